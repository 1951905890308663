#include "graph_build.h"

#include <torch/csrc/Exceptions.h>

#include "native_api.h"

namespace pygio_host {

namespace {
const void* optional_pointer(const c10::optional<torch::Tensor>& tensor) {
  return tensor.has_value() ? tensor->data_ptr() : nullptr;
}
}  // namespace

std::vector<int64_t> edge_index_stats(const torch::Tensor& edge_index) {
  // torch's warnings (sync debug mode's, of the read below) reach Python's
  // warnings as from any torch call, not stderr.
  torch::PyWarningHandler warnings;
  torch::Tensor stats =
      torch::empty({PYGIO_EDGE_STATS}, edge_index.options().dtype(torch::kLong));
  pygio_edge_stats_params p{};
  p.struct_size = sizeof(p);
  p.device = edge_index.get_device();
  p.edges = edges_of(edge_index);
  p.stats = stats.data_ptr<int64_t>();
  p.stream = current_stream(edge_index);
  check(native.edge_index_stats(&p), "pygio_edge_index_stats");
  const torch::Tensor host = stats.to(torch::kCPU);  // the build's one host wait
  const int64_t* values = host.data_ptr<int64_t>();
  return std::vector<int64_t>(values, values + PYGIO_EDGE_STATS);
}

void csr_from_grouped(const torch::Tensor& edge_index, int64_t num_rows,
                      const torch::Tensor& rowptr, const torch::Tensor& col,
                      const torch::Tensor& row) {
  TORCH_CHECK(rowptr.scalar_type() == col.scalar_type() &&
                  col.scalar_type() == row.scalar_type(),
              "csr_from_grouped: rowptr, col and row must share one index dtype");
  pygio_csr_from_grouped_params p{};
  p.struct_size = sizeof(p);
  p.device = edge_index.get_device();
  p.edges = edges_of(edge_index);
  p.num_rows = num_rows;
  p.out_index_bits = index_bits(rowptr.scalar_type());
  p.out_rowptr = rowptr.data_ptr();
  p.out_col = col.data_ptr();
  p.out_row = row.data_ptr();
  p.stream = current_stream(edge_index);
  check(native.csr_from_grouped(&p), "pygio_csr_from_grouped");
}

namespace {
// The fields pygio_gcn_norm_params and pygio_mean_norm_params share.
template <typename Params>
Params norm_params(const torch::Tensor& rowptr, const torch::Tensor& col, int64_t num_cols,
                   const torch::Tensor& row, const c10::optional<torch::Tensor>& weight,
                   const c10::optional<torch::Tensor>& origin, const torch::Tensor& values) {
  Params p{};
  p.struct_size = sizeof(p);
  p.dtype = dtype_code(values.scalar_type());
  p.device = rowptr.get_device();
  p.a = csr_of(rowptr, col, num_cols);
  p.row = row.data_ptr();
  p.weight = optional_pointer(weight);
  p.origin = static_cast<const int64_t*>(optional_pointer(origin));
  p.values = values.data_ptr();
  p.stream = current_stream(rowptr);
  return p;
}
}  // namespace

void gcn_norm(const torch::Tensor& rowptr, const torch::Tensor& col, const torch::Tensor& row,
              const c10::optional<torch::Tensor>& weight,
              const c10::optional<torch::Tensor>& origin, const torch::Tensor& deg_inv_sqrt,
              const torch::Tensor& values) {
  auto p = norm_params<pygio_gcn_norm_params>(rowptr, col, rowptr.numel() - 1, row, weight,
                                              origin, values);
  p.deg_inv_sqrt = deg_inv_sqrt.data_ptr();
  check(native.gcn_norm(&p), "pygio_gcn_norm");
}

void mean_norm(const torch::Tensor& rowptr, const torch::Tensor& col, const torch::Tensor& row,
               const c10::optional<torch::Tensor>& weight,
               const c10::optional<torch::Tensor>& origin, int64_t num_cols,
               const torch::Tensor& values) {
  const auto p =
      norm_params<pygio_mean_norm_params>(rowptr, col, num_cols, row, weight, origin, values);
  check(native.mean_norm(&p), "pygio_mean_norm");
}

}  // namespace pygio_host
