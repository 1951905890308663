#include "native_api.h"

#include <c10/cuda/CUDAStream.h>

#include <string>

namespace pygio_host {

NativeApi native;

namespace {
template <typename Fn>
void take(const py::dict& entries, const char* name, Fn* slot) {
  TORCH_CHECK(entries.contains(name), "pyg_ioaware host extension: no address for ", name);
  *slot = reinterpret_cast<Fn>(entries[name].cast<int64_t>());
}
}  // namespace

void set_native(const py::dict& entries) {
  take(entries, "pygio_spmm_csr", &native.spmm_csr);
  take(entries, "pygio_spmm_csr_workspace_size", &native.spmm_csr_workspace_size);
  take(entries, "pygio_edge_index_stats", &native.edge_index_stats);
  take(entries, "pygio_csr_from_grouped", &native.csr_from_grouped);
  take(entries, "pygio_csr_add_self_loops", &native.csr_add_self_loops);
  take(entries, "pygio_minmax", &native.minmax);
  take(entries, "pygio_minmax_workspace_size", &native.minmax_workspace_size);
  take(entries, "pygio_minmax_backward", &native.minmax_backward);
  take(entries, "pygio_minmax_backward_workspace_size", &native.minmax_backward_workspace_size);
  take(entries, "pygio_csr_pyg_self_loops", &native.csr_pyg_self_loops);
  take(entries, "pygio_csr_pyg_self_loops_workspace_size",
       &native.csr_pyg_self_loops_workspace_size);
  take(entries, "pygio_csr_transpose", &native.csr_transpose);
  take(entries, "pygio_csr_transpose_workspace_size", &native.csr_transpose_workspace_size);
  take(entries, "pygio_gatv2", &native.gatv2);
  take(entries, "pygio_gatv2_workspace_size", &native.gatv2_workspace_size);
  take(entries, "pygio_gatv2_backward", &native.gatv2_backward);
  take(entries, "pygio_gatv2_backward_workspace_size", &native.gatv2_backward_workspace_size);
  take(entries, "pygio_transformer", &native.transformer);
  take(entries, "pygio_transformer_workspace_size", &native.transformer_workspace_size);
  take(entries, "pygio_transformer_backward", &native.transformer_backward);
  take(entries, "pygio_transformer_backward_workspace_size",
       &native.transformer_backward_workspace_size);
  take(entries, "pygio_gcn_norm", &native.gcn_norm);
  take(entries, "pygio_mean_norm", &native.mean_norm);
  take(entries, "pygio_last_error", &native.last_error);
  native.gemv_min_elements = entries["gemv_min_elements"].cast<int64_t>();
}

// pyg_ioaware._native._host_call raises NativeError for messages that
// begin so (as the ctypes path's do).
void check(int status, const char* what) {
  TORCH_CHECK(status == PYGIO_OK, "pyg_ioaware native error ", status, " in ", what, ": ",
              native.last_error());
}

int32_t dtype_code(c10::ScalarType type) {
  switch (type) {
    case c10::kFloat: return PYGIO_FLOAT32;
    case c10::kDouble: return PYGIO_FLOAT64;
    case c10::kHalf: return PYGIO_FLOAT16;
    case c10::kBFloat16: return PYGIO_BFLOAT16;
    default: TORCH_CHECK(false, "pyg_ioaware host extension: unsupported dtype ", type);
  }
}

int32_t index_bits(c10::ScalarType type) {
  TORCH_CHECK(type == c10::kInt || type == c10::kLong,
              "pyg_ioaware host extension: indices must be int32 or int64, got ", type);
  return type == c10::kInt ? 32 : 64;
}

void* current_stream(const torch::Tensor& on) {
  return c10::cuda::getCurrentCUDAStream(on.get_device()).stream();
}

pygio_edges edges_of(const torch::Tensor& edge_index) {
  const auto* base = static_cast<const char*>(edge_index.data_ptr());
  return pygio_edges{base, base + edge_index.stride(0) * edge_index.element_size(),
                     edge_index.stride(1), edge_index.stride(1), edge_index.size(1),
                     index_bits(edge_index.scalar_type())};
}

pygio_csr csr_of(const torch::Tensor& rowptr, const torch::Tensor& col, int64_t num_cols) {
  TORCH_CHECK(rowptr.scalar_type() == col.scalar_type(),
              "pyg_ioaware host extension: rowptr and col must share one index dtype");
  return pygio_csr{rowptr.data_ptr(), col.data_ptr(), rowptr.numel() - 1, num_cols, col.numel(),
                   index_bits(rowptr.scalar_type())};
}

torch::Tensor column_sums(const torch::Tensor& grad, c10::ScalarType dtype) {
  const bool wide = grad.scalar_type() == c10::kFloat || grad.scalar_type() == c10::kDouble;
  if (wide && grad.numel() >= native.gemv_min_elements) {
    return torch::mv(grad.t(), torch::ones({grad.size(0)}, grad.options())).to(dtype);
  }
  const auto accumulate = grad.scalar_type() == c10::kDouble ? c10::kDouble : c10::kFloat;
  return grad.sum(0, false, accumulate).to(dtype);
}

int64_t row_stride(const torch::Tensor& t) { return t.size(0) > 1 ? t.stride(0) : t.size(1); }

int64_t node_row_stride(const torch::Tensor& t) {
  return t.size(0) > 1 ? t.stride(0) : t.size(1) * t.size(2);
}

void* data_or_null(const torch::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

void* data_or_null(const c10::optional<torch::Tensor>& t) {
  return t.has_value() ? data_or_null(*t) : nullptr;
}

torch::Tensor workspace(size_t bytes, const torch::Tensor& like) {
  if (bytes == 0) return torch::Tensor();
  return torch::empty({static_cast<int64_t>(bytes)}, like.options().dtype(torch::kUInt8));
}

}  // namespace pygio_host
