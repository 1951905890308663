// A new graph's native launches, called from C++ in place of ctypes (each
// ctypes call took 20-60 us of host time on an H200 host, a large share of
// a small mini-batch step): the edge statistics and their read back, the
// CSR of edges grouped by destination, and the normalized edge values. The
// contracts are the C ABI's (cuda/include/pyg_ioaware.h); the Python
// wrappers of pyg_ioaware._native call these where the extension is loaded.
#pragma once

#include <torch/extension.h>

#include <vector>

namespace pygio_host {

// pygio_edge_index_stats over a CUDA edge_index [2, E], E > 0, read back:
// the PYGIO_EDGE_STATS values as the kernel wrote them (one host wait).
std::vector<int64_t> edge_index_stats(const torch::Tensor& edge_index);

// pygio_csr_from_grouped into rowptr / col / row (one index dtype).
void csr_from_grouped(const torch::Tensor& edge_index, int64_t num_rows,
                      const torch::Tensor& rowptr, const torch::Tensor& col,
                      const torch::Tensor& row);

// pygio_gcn_norm: GCN's symmetric normalization of a square CSR graph.
void gcn_norm(const torch::Tensor& rowptr, const torch::Tensor& col, const torch::Tensor& row,
              const c10::optional<torch::Tensor>& weight,
              const c10::optional<torch::Tensor>& origin, const torch::Tensor& deg_inv_sqrt,
              const torch::Tensor& values);

// pygio_mean_norm: mean aggregation's edge values of a CSR graph.
void mean_norm(const torch::Tensor& rowptr, const torch::Tensor& col, const torch::Tensor& row,
               const c10::optional<torch::Tensor>& weight,
               const c10::optional<torch::Tensor>& origin, int64_t num_cols,
               const torch::Tensor& values);

}  // namespace pygio_host
