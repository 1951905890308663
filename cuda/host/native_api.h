// The native library's entry points as the host extension calls them:
// addresses handed over by Python at load (pyg_ioaware._native_host), so
// the extension links nothing of ours, and the helpers every call shares
// (status check, dtype code, the current stream, torch tensors as the C
// ABI's structs).
#pragma once

#include <torch/extension.h>

#include <cstdint>

#include "pyg_ioaware.h"

namespace pygio_host {

struct NativeApi {
  int (*spmm_csr)(const pygio_spmm_csr_params*) = nullptr;
  int (*spmm_csr_workspace_size)(const pygio_spmm_csr_params*, size_t*) = nullptr;
  int (*edge_index_stats)(const pygio_edge_stats_params*) = nullptr;
  int (*csr_from_grouped)(const pygio_csr_from_grouped_params*) = nullptr;
  int (*csr_add_self_loops)(const pygio_self_loops_params*) = nullptr;
  int (*minmax)(const pygio_minmax_params*) = nullptr;
  int (*minmax_workspace_size)(const pygio_minmax_params*, size_t*) = nullptr;
  int (*minmax_backward)(const pygio_minmax_backward_params*) = nullptr;
  int (*minmax_backward_workspace_size)(const pygio_minmax_backward_params*, size_t*) = nullptr;
  int (*csr_pyg_self_loops)(const pygio_pyg_self_loops_params*) = nullptr;
  int (*csr_pyg_self_loops_workspace_size)(const pygio_pyg_self_loops_params*, size_t*) = nullptr;
  int (*csr_transpose)(const pygio_csr_transpose_params*) = nullptr;
  int (*csr_transpose_workspace_size)(const pygio_csr_transpose_params*, size_t*) = nullptr;
  int (*gatv2)(const pygio_gatv2_params*) = nullptr;
  int (*gatv2_workspace_size)(const pygio_gatv2_params*, size_t*) = nullptr;
  int (*gatv2_backward)(const pygio_gatv2_backward_params*) = nullptr;
  int (*gatv2_backward_workspace_size)(const pygio_gatv2_backward_params*, size_t*) = nullptr;
  int (*transformer)(const pygio_transformer_params*) = nullptr;
  int (*transformer_workspace_size)(const pygio_transformer_params*, size_t*) = nullptr;
  int (*transformer_backward)(const pygio_transformer_backward_params*) = nullptr;
  int (*transformer_backward_workspace_size)(const pygio_transformer_backward_params*,
                                             size_t*) = nullptr;
  int (*gcn_norm)(const pygio_gcn_norm_params*) = nullptr;
  int (*mean_norm)(const pygio_mean_norm_params*) = nullptr;
  const char* (*last_error)() = nullptr;
  int64_t gemv_min_elements = 0;  // ops.bias_gradient.MIN_GEMV_SUM_ELEMENTS
};
extern NativeApi native;

// Takes the entry points from {name: address} (every field above, by its
// C name, and "gemv_min_elements").
void set_native(const py::dict& entries);

// A TORCH_CHECK failure with the library's message where status is not OK.
void check(int status, const char* what);

int32_t dtype_code(c10::ScalarType type);
int32_t index_bits(c10::ScalarType type);
void* current_stream(const torch::Tensor& on);

// edge_index [2, E] (int32 or int64, any strides) as a pygio_edges.
pygio_edges edges_of(const torch::Tensor& edge_index);

// rowptr / col (one index dtype) as a pygio_csr of num_cols columns.
pygio_csr csr_of(const torch::Tensor& rowptr, const torch::Tensor& col, int64_t num_cols);

// ops.bias_gradient.column_sums of a 2-D grad: grad^T 1 (a GEMV) for large
// fp32 / fp64, else a sum accumulated in fp32; in `dtype` (a bias's
// gradient).
torch::Tensor column_sums(const torch::Tensor& grad, c10::ScalarType dtype);

// A 2-D tensor's row stride as the kernels take it: torch reports any
// stride for a dimension of size 1, so a single row's is its width
// (pyg_ioaware._native._row_stride's rule).
int64_t row_stride(const torch::Tensor& t);

// A [nodes, heads, channels] tensor's node row stride as the attention
// kernels take it (a single node's is heads * channels, as row_stride's).
int64_t node_row_stride(const torch::Tensor& t);

// The tensor's data, or NULL for an undefined tensor or none.
void* data_or_null(const torch::Tensor& t);
void* data_or_null(const c10::optional<torch::Tensor>& t);

// `bytes` of scratch on like's device from torch's caching allocator (an
// undefined tensor for 0 bytes).
torch::Tensor workspace(size_t bytes, const torch::Tensor& like);

// The size / allocate / launch of every entry point that takes a
// workspace: asks size_of for the bytes p needs, allocates them on like's
// device (p.workspace; kept alive through the launch: torch's caching
// allocator orders its reuse on the stream) and calls launch(&p). `name`
// is launch's C name, for errors.
template <typename Params>
void launch_with_workspace(int (*size_of)(const Params*, size_t*),
                           int (*launch)(const Params*), Params& p, const torch::Tensor& like,
                           const char* name) {
  size_t bytes = 0;
  check(size_of(&p, &bytes), name);
  const torch::Tensor scratch = workspace(bytes, like);
  p.workspace = data_or_null(scratch);
  check(launch(&p), name);
}

}  // namespace pygio_host
