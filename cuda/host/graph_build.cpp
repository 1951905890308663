#include "graph_build.h"

#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/Exceptions.h>

#include <algorithm>

#include "native_api.h"

namespace pygio_host {

EdgeStatsRead::EdgeStatsRead(const torch::Tensor& edge_index, int64_t num_rows,
                             c10::ScalarType index_dtype, bool entries) {
  // torch's warnings (sync debug mode's) reach Python's warnings as from
  // any torch call, not stderr.
  torch::PyWarningHandler warnings;
  const int64_t items = PYGIO_EDGE_STATS_ITEMS(edge_index.size(1), num_rows, num_rows >= 0);
  num_stat_rows_ = PYGIO_EDGE_STATS_ROWS(items);
  pygio_edge_stats_params p{};
  p.struct_size = sizeof(p);
  p.device = edge_index.get_device();
  p.edges = edges_of(edge_index);
  if (num_rows >= 0) {
    const auto options = edge_index.options().dtype(index_dtype);
    csr_.push_back(torch::empty({num_rows + 1}, options));
    if (entries) {
      csr_.push_back(torch::empty({edge_index.size(1)}, options));
      csr_.push_back(torch::empty({edge_index.size(1)}, options));
    }
    p.num_rows = num_rows;
    p.out_index_bits = index_bits(index_dtype);
    p.out_rowptr = csr_[0].data_ptr();
    p.out_col = entries ? csr_[1].data_ptr() : nullptr;
    p.out_row = entries ? csr_[2].data_ptr() : nullptr;
  }
  p.stream = current_stream(edge_index);
  slot_ = take_stats_slot(edge_index.get_device());
  p.stats = slot_->rows.data_ptr<int64_t>();  // written by the kernel: no memset, no copy
  try {
    check(native.edge_index_stats(&p), "pygio_edge_index_stats");
  } catch (...) {
    release_stats_slot(slot_);  // nothing was enqueued
    throw;
  }
  slot_->written.record(c10::cuda::getCurrentCUDAStream(edge_index.get_device()));
}

EdgeStatsRead::~EdgeStatsRead() { release_stats_slot(slot_); }

std::vector<int64_t> EdgeStatsRead::read() const {
  {
    // A host wait, as torch.cuda.set_sync_debug_mode sees one (an event
    // wait is not reported by torch itself); its warning reaches Python.
    torch::PyWarningHandler warnings;
    c10::cuda::warn_or_error_on_sync();
  }
  std::vector<int64_t> stats(PYGIO_EDGE_STATS);
  {
    py::gil_scoped_release no_gil;  // other Python threads run while this one waits
    slot_->written.synchronize();
    slot_->waited = true;
    // Every block's row: the first values reduce by min, the last (self loops) by sum.
    const int64_t* rows = slot_->rows.data_ptr<int64_t>();
    std::copy(rows, rows + PYGIO_EDGE_STATS, stats.begin());
    for (int64_t b = 1; b < num_stat_rows_; ++b) {
      const int64_t* row = rows + b * PYGIO_EDGE_STATS;
      for (int s = 0; s + 1 < PYGIO_EDGE_STATS; ++s) stats[s] = std::min(stats[s], row[s]);
      stats[PYGIO_EDGE_STATS - 1] += row[PYGIO_EDGE_STATS - 1];
    }
  }
  return stats;
}

std::vector<int64_t> edge_index_stats(const torch::Tensor& edge_index) {
  return EdgeStatsRead(edge_index).read();
}

std::tuple<std::vector<int64_t>, std::vector<torch::Tensor>, std::vector<torch::Tensor>>
grouped_graph(const torch::Tensor& edge_index, int64_t num_src, int64_t num_dst,
              c10::ScalarType index_dtype, bool entries, bool self_loops, bool gcn_values) {
  TORCH_CHECK(!self_loops || num_src == num_dst, "grouped_graph: self loops need a square graph");
  TORCH_CHECK(!self_loops || entries ||
                  (edge_index.scalar_type() == index_dtype && edge_index.stride(1) == 1),
              "grouped_graph: without entries the self-loop graph reads edge_index's rows as "
              "its col and row, which must then be contiguous in index_dtype");
  const EdgeStatsRead pending(edge_index, num_dst, index_dtype, entries);
  std::vector<int64_t> raw = pending.read();
  std::vector<torch::Tensor> looped;
  // PYGIO_EDGE_STATS: min src, min dst, ~max src, ~max dst, grouped, ~longest
  // run, self loops.
  const bool grouped_in_range = raw[0] >= 0 && raw[1] >= 0 && ~raw[2] < num_src &&
                                ~raw[3] < num_dst && raw[4] != 0;
  if (self_loops && grouped_in_range) {
    const auto& csr = pending.csr();
    const torch::Tensor col = entries ? csr[1] : edge_index.select(0, 0);
    const torch::Tensor row = entries ? csr[2] : edge_index.select(0, 1);
    looped = csr_add_self_loops(csr[0], col, row, c10::nullopt, gcn_values && raw[6] == 0);
  }
  return {std::move(raw), pending.csr(), std::move(looped)};
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> csr_from_grouped(
    const torch::Tensor& edge_index, int64_t num_rows, c10::ScalarType index_dtype) {
  const auto options = edge_index.options().dtype(index_dtype);
  torch::Tensor rowptr = torch::empty({num_rows + 1}, options);
  torch::Tensor col = torch::empty({edge_index.size(1)}, options);
  torch::Tensor row = torch::empty({edge_index.size(1)}, options);
  pygio_csr_from_grouped_params p{};
  p.struct_size = sizeof(p);
  p.device = edge_index.get_device();
  p.edges = edges_of(edge_index);
  p.num_rows = num_rows;
  p.out_index_bits = index_bits(index_dtype);
  p.out_rowptr = rowptr.data_ptr();
  p.out_col = col.data_ptr();
  p.out_row = row.data_ptr();
  p.stream = current_stream(edge_index);
  check(native.csr_from_grouped(&p), "pygio_csr_from_grouped");
  return {rowptr, col, row};
}

std::vector<torch::Tensor> csr_add_self_loops(const torch::Tensor& rowptr,
                                              const torch::Tensor& col, const torch::Tensor& row,
                                              const c10::optional<torch::Tensor>& edge_perm,
                                              bool gcn_values) {
  const auto index_dtype = rowptr.scalar_type();
  TORCH_CHECK(col.scalar_type() == index_dtype && row.scalar_type() == index_dtype &&
                  (!edge_perm.has_value() || edge_perm->scalar_type() == index_dtype),
              "csr_add_self_loops: every index tensor must share one dtype");
  const int64_t num_nodes = rowptr.numel() - 1, entries = col.numel() + num_nodes;
  torch::Tensor out_rowptr = torch::empty({num_nodes + 1}, rowptr.options());
  torch::Tensor out_col = torch::empty({entries}, rowptr.options());
  torch::Tensor out_row = torch::empty({entries}, rowptr.options());
  torch::Tensor out_origin = torch::empty({entries}, rowptr.options().dtype(torch::kLong));
  torch::Tensor out_values =
      gcn_values ? torch::empty({entries}, rowptr.options().dtype(torch::kFloat)) : torch::Tensor();
  pygio_self_loops_params p{};
  p.struct_size = sizeof(p);
  p.index_bits = index_bits(index_dtype);
  p.device = rowptr.get_device();
  p.num_nodes = num_nodes;
  p.nnz = col.numel();
  p.rowptr = rowptr.data_ptr();
  p.col = col.data_ptr();
  p.row = row.data_ptr();
  p.edge_perm = data_or_null(edge_perm);
  p.out_rowptr = out_rowptr.data_ptr();
  p.out_col = out_col.data_ptr();
  p.out_row = out_row.data_ptr();
  p.out_origin = out_origin.data_ptr<int64_t>();
  p.out_gcn_values = gcn_values ? out_values.data_ptr<float>() : nullptr;
  p.stream = current_stream(rowptr);
  check(native.csr_add_self_loops(&p), "pygio_csr_add_self_loops");
  std::vector<torch::Tensor> out{out_rowptr, out_col, out_row, out_origin};
  if (gcn_values) out.push_back(out_values);
  return out;
}

std::vector<torch::Tensor> csr_pyg_self_loops(const torch::Tensor& edge_index, int64_t num_rows,
                                              int64_t num_loops, int64_t num_kept,
                                              c10::ScalarType index_dtype) {
  const int64_t entries = num_kept + num_loops;
  const auto options = edge_index.options().dtype(index_dtype);
  torch::Tensor out_edges = torch::empty({2, entries}, edge_index.options());
  torch::Tensor out_kept = torch::empty({num_kept}, edge_index.options().dtype(torch::kLong));
  torch::Tensor out_rowptr = torch::empty({num_rows + 1}, options);
  torch::Tensor out_col = torch::empty({entries}, options);
  torch::Tensor out_row = torch::empty({entries}, options);
  torch::Tensor out_perm = torch::empty({entries}, options);
  pygio_pyg_self_loops_params p{};
  p.struct_size = sizeof(p);
  p.device = edge_index.get_device();
  p.edges = edges_of(edge_index);
  p.num_rows = num_rows;
  p.num_loops = num_loops;
  p.num_kept = num_kept;
  p.out_index_bits = index_bits(index_dtype);
  p.out_edges = out_edges.data_ptr();
  p.out_kept = out_kept.data_ptr<int64_t>();
  p.out_rowptr = out_rowptr.data_ptr();
  p.out_col = out_col.data_ptr();
  p.out_row = out_row.data_ptr();
  p.out_perm = out_perm.data_ptr();
  p.stream = current_stream(edge_index);
  launch_with_workspace(native.csr_pyg_self_loops_workspace_size, native.csr_pyg_self_loops, p,
                        edge_index, "pygio_csr_pyg_self_loops");
  return {out_edges, out_kept, out_rowptr, out_col, out_row, out_perm};
}

std::vector<torch::Tensor> csr_transpose(const torch::Tensor& rowptr, const torch::Tensor& col,
                                         const torch::Tensor& row, int64_t num_cols) {
  TORCH_CHECK(col.scalar_type() == rowptr.scalar_type() &&
                  row.scalar_type() == rowptr.scalar_type(),
              "csr_transpose: every index tensor must share one dtype");
  torch::Tensor out_rowptr = torch::empty({num_cols + 1}, rowptr.options());
  torch::Tensor out_col = torch::empty_like(col);
  torch::Tensor out_row = torch::empty_like(col);
  torch::Tensor out_perm = torch::empty_like(col);
  pygio_csr_transpose_params p{};
  p.struct_size = sizeof(p);
  p.device = rowptr.get_device();
  p.a = csr_of(rowptr, col, num_cols);
  p.row = row.data_ptr();
  p.out_rowptr = out_rowptr.data_ptr();
  p.out_col = out_col.data_ptr();
  p.out_row = out_row.data_ptr();
  p.out_perm = out_perm.data_ptr();
  p.stream = current_stream(rowptr);
  launch_with_workspace(native.csr_transpose_workspace_size, native.csr_transpose, p, rowptr,
                        "pygio_csr_transpose");
  return {out_rowptr, out_col, out_row, out_perm};
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
  p.weight = data_or_null(weight);
  p.origin = static_cast<const int64_t*>(data_or_null(origin));
  p.values = values.data_ptr();
  p.stream = current_stream(rowptr);
  return p;
}

// Float accumulation, double for float64 values (the C ABI's rule).
c10::ScalarType accumulator_of(c10::ScalarType dtype) {
  return dtype == c10::kDouble ? c10::kDouble : c10::kFloat;
}
}  // namespace

torch::Tensor gcn_norm(const torch::Tensor& rowptr, const torch::Tensor& col,
                       const torch::Tensor& row, const c10::optional<torch::Tensor>& weight,
                       const c10::optional<torch::Tensor>& origin, c10::ScalarType dtype) {
  torch::Tensor values = torch::empty({col.numel()}, col.options().dtype(dtype));
  torch::Tensor deg_inv_sqrt =
      torch::empty({rowptr.numel() - 1}, col.options().dtype(accumulator_of(dtype)));
  auto p = norm_params<pygio_gcn_norm_params>(rowptr, col, rowptr.numel() - 1, row, weight,
                                              origin, values);
  p.deg_inv_sqrt = deg_inv_sqrt.data_ptr();
  check(native.gcn_norm(&p), "pygio_gcn_norm");
  return values;
}

torch::Tensor mean_norm(const torch::Tensor& rowptr, const torch::Tensor& col,
                        const torch::Tensor& row, const c10::optional<torch::Tensor>& weight,
                        const c10::optional<torch::Tensor>& origin, int64_t num_cols,
                        c10::ScalarType dtype) {
  torch::Tensor values = torch::empty({col.numel()}, col.options().dtype(dtype));
  const auto p =
      norm_params<pygio_mean_norm_params>(rowptr, col, num_cols, row, weight, origin, values);
  check(native.mean_norm(&p), "pygio_mean_norm");
  return values;
}

}  // namespace pygio_host
