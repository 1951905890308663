// A new graph's native launches, called from C++ in place of ctypes (each
// ctypes call took 20-60 us of host time on an H200 host, a large share of
// a small mini-batch step): the edge statistics and their read back, the
// CSR of edges grouped by destination, the graph with self loops (GCN's;
// PyG's remove + add), the CSR^T and the normalized edge values, each
// allocating its outputs (a torch.empty from Python costs several
// microseconds, from C++ well under one). The contracts are the C ABI's
// (cuda/include/pyg_ioaware.h); the Python wrappers of pyg_ioaware._native
// call these where the extension is loaded.
#pragma once

#include <c10/core/Event.h>
#include <torch/extension.h>

#include <tuple>
#include <vector>

namespace pygio_host {

// Pinned rows for the largest statistics launch and the event after it:
// one read's, reused by the reads after it (stats_slots.cpp), so that a new
// graph's read allocates no host memory and creates no event.
struct StatsSlot {
  torch::Tensor rows;  // [PYGIO_EDGE_STATS_BLOCKS, PYGIO_EDGE_STATS] int64, pinned
  c10::Event written{c10::DeviceType::CUDA};
  bool taken = false;
  // Its read waited for `written`: taken again without querying the event
  // (a query costs microseconds of a new graph's host time).
  bool waited = false;
};

// A slot of `device` that no read holds and no kernel still writes (a new
// one where none is free), marked taken; give it back with release_stats_slot.
StatsSlot* take_stats_slot(c10::DeviceIndex device);
void release_stats_slot(StatsSlot* slot);

// The statistics of one CUDA edge_index [2, E], E > 0, on their way to the
// host: the constructor enqueues pygio_edge_index_stats, its kernel writing
// its rows straight into a pinned StatsSlot, and the slot's event after it,
// and returns without waiting; read() waits for that event only (the
// build's one host wait, reported to torch's sync debug mode, the GIL
// released meanwhile; called with the GIL held) and gives the
// PYGIO_EDGE_STATS values reduced over the rows. With num_rows >= 0 the
// same launch writes the CSR of the edges as if grouped by destination
// (pygio_csr_from_grouped's; meaningful only where the values say they are
// grouped and in range): csr() gives [rowptr [num_rows + 1]] or, with
// entries, [rowptr, col [E], row [E]] in index_dtype, allocated here. The
// slot goes back when the read is destroyed (read or not: a slot is taken
// again only once its kernel is done).
class EdgeStatsRead {
 public:
  explicit EdgeStatsRead(const torch::Tensor& edge_index, int64_t num_rows = -1,
                         c10::ScalarType index_dtype = torch::kInt, bool entries = true);
  ~EdgeStatsRead();
  EdgeStatsRead(const EdgeStatsRead&) = delete;
  EdgeStatsRead& operator=(const EdgeStatsRead&) = delete;
  std::vector<int64_t> read() const;
  const std::vector<torch::Tensor>& csr() const { return csr_; }

 private:
  StatsSlot* slot_ = nullptr;
  int64_t num_stat_rows_ = 0;  // PYGIO_EDGE_STATS_ROWS(items): the slot's rows written
  std::vector<torch::Tensor> csr_;
};

// EdgeStatsRead(edge_index).read(): enqueued and read at once.
std::vector<int64_t> edge_index_stats(const torch::Tensor& edge_index);

// A new graph's native build in one call (Graph.from_edge_index's grouped
// path): EdgeStatsRead(edge_index, num_dst, index_dtype, entries) read at
// once, and, with self_loops (a square graph), where the values say the
// edges are grouped with every index in range (the rule of
// pyg_ioaware._native.grouped_in_range), the graph with PyG's remaining
// self loops enqueued behind it (csr_add_self_loops over that CSR; without
// entries its col and row are edge_index's rows). Returns (the raw values,
// EdgeStatsRead::csr(), [] or the self-loop graph's [rowptr, col, row,
// origin], followed, with gcn_values where the values count no input self
// loop, by its float32 GCN values without weights (csr_add_self_loops)).
std::tuple<std::vector<int64_t>, std::vector<torch::Tensor>, std::vector<torch::Tensor>>
grouped_graph(const torch::Tensor& edge_index, int64_t num_src, int64_t num_dst,
              c10::ScalarType index_dtype, bool entries, bool self_loops, bool gcn_values);

// pygio_csr_from_grouped: (rowptr [num_rows + 1], col [E], row [E]) in
// index_dtype, allocated here.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> csr_from_grouped(
    const torch::Tensor& edge_index, int64_t num_rows, c10::ScalarType index_dtype);

// pygio_csr_add_self_loops: [rowptr, col, row, origin] of the square CSR
// graph with PyG's remaining self loops, allocated here (indices in the
// input's index dtype, origin int64), and with gcn_values its float32 GCN
// values without weights (out_gcn_values: the input must hold no self loop).
std::vector<torch::Tensor> csr_add_self_loops(const torch::Tensor& rowptr,
                                              const torch::Tensor& col, const torch::Tensor& row,
                                              const c10::optional<torch::Tensor>& edge_perm,
                                              bool gcn_values);

// pygio_csr_pyg_self_loops: PyG's remove + add self loops of edges grouped
// by destination, num_kept of them no loop: (edges [2, num_kept +
// num_loops] in edge_index's dtype, kept [num_kept] int64, rowptr, col,
// row, perm in index_dtype), allocated here.
std::vector<torch::Tensor> csr_pyg_self_loops(const torch::Tensor& edge_index, int64_t num_rows,
                                              int64_t num_loops, int64_t num_kept,
                                              c10::ScalarType index_dtype);

// pygio_csr_transpose: (rowptr [num_cols + 1], col, row, perm) of the
// CSR^T, in the input's index dtype, allocated here.
std::vector<torch::Tensor> csr_transpose(const torch::Tensor& rowptr, const torch::Tensor& col,
                                         const torch::Tensor& row, int64_t num_cols);

// pygio_gcn_norm: GCN's symmetric normalization of a square CSR graph, its
// values [E] in dtype (the degrees' scratch allocated here too).
torch::Tensor gcn_norm(const torch::Tensor& rowptr, const torch::Tensor& col,
                       const torch::Tensor& row, const c10::optional<torch::Tensor>& weight,
                       const c10::optional<torch::Tensor>& origin, c10::ScalarType dtype);

// pygio_mean_norm: mean aggregation's edge values of a CSR graph [E] in dtype.
torch::Tensor mean_norm(const torch::Tensor& rowptr, const torch::Tensor& col,
                        const torch::Tensor& row, const c10::optional<torch::Tensor>& weight,
                        const c10::optional<torch::Tensor>& origin, int64_t num_cols,
                        c10::ScalarType dtype);

}  // namespace pygio_host
