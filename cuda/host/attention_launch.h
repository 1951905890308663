// The attention kernels' launches from C++ in place of ctypes: GATv2's and
// the graph transformer's forward and backward (contracts: pygio_gatv2,
// pygio_gatv2_backward, pygio_transformer, pygio_transformer_backward in
// cuda/include/pyg_ioaware.h). Filling one of their parameter structs from
// Python took 120-200 us a call under cProfile on an H200 host, a large
// share of a small mini-batch step with two attention layers. Outputs are
// allocated here (a backward may write its node gradients into the slots
// of one packed gradient instead), the workspace from torch's caching
// allocator. The wrappers of pyg_ioaware._native call these where the
// extension is loaded, after the checks their ctypes path makes.
#pragma once

#include <torch/extension.h>

#include <cstdint>
#include <vector>

namespace pygio_host {

using OptionalTensor = c10::optional<torch::Tensor>;

// A backward's hub split, of the structure and of its transpose: rows above
// the int64 device scalar degree (none: no row is split), at most max_hubs
// of them.
struct Hubs {
  OptionalTensor degree;
  int64_t max_hubs = 0;
  OptionalTensor degree_t;
  int64_t max_hubs_t = 0;
};

// pygio_gatv2: {out [rows, heads, channels] in x_l's dtype, lse [rows,
// heads] fp32} of GATv2 attention over (rowptr, col), allocated here.
std::vector<torch::Tensor> gatv2(const torch::Tensor& rowptr, const torch::Tensor& col,
                                 const torch::Tensor& x_l, const torch::Tensor& x_r,
                                 const OptionalTensor& edge, const torch::Tensor& att,
                                 double negative_slope, double dropout_p, int64_t seed,
                                 const OptionalTensor& hub_degree, int64_t max_hubs,
                                 const OptionalTensor& out_bias);

// pygio_gatv2_backward: {grad_x_l, grad_x_r, grad_att (fp32), grad_edge
// (empty without edge)}; grad_x_l / grad_x_r written into into_x_l /
// into_x_r where given, else allocated here, as the others are.
std::vector<torch::Tensor> gatv2_backward(
    const torch::Tensor& rowptr, const torch::Tensor& col, const torch::Tensor& rowptr_t,
    const torch::Tensor& col_t, const torch::Tensor& perm_t, const torch::Tensor& x_l,
    const torch::Tensor& x_r, const OptionalTensor& edge, const torch::Tensor& att,
    double negative_slope, double dropout_p, int64_t seed, const Hubs& hubs,
    const torch::Tensor& lse, const torch::Tensor& grad_out, const OptionalTensor& into_x_l,
    const OptionalTensor& into_x_r);

// pygio_transformer: {out [rows, heads, channels] in q's dtype, lse [rows,
// heads] fp32} of graph-transformer attention, allocated here.
std::vector<torch::Tensor> transformer(const torch::Tensor& rowptr, const torch::Tensor& col,
                                       const torch::Tensor& q, const torch::Tensor& k,
                                       const torch::Tensor& v, const OptionalTensor& edge,
                                       double scale, double dropout_p, int64_t seed,
                                       const OptionalTensor& hub_degree, int64_t max_hubs);

// pygio_transformer_backward: {grad_q, grad_k, grad_v, grad_edge (empty
// without edge)}, each of grad_q, grad_k, grad_v written into its into_*
// where given, else allocated here.
std::vector<torch::Tensor> transformer_backward(
    const torch::Tensor& rowptr, const torch::Tensor& col, const torch::Tensor& rowptr_t,
    const torch::Tensor& col_t, const torch::Tensor& perm_t, const torch::Tensor& q,
    const torch::Tensor& k, const torch::Tensor& v, const OptionalTensor& edge, double scale,
    double dropout_p, int64_t seed, const Hubs& hubs, const torch::Tensor& out,
    const torch::Tensor& lse, const torch::Tensor& grad_out, const OptionalTensor& into_q,
    const OptionalTensor& into_k, const OptionalTensor& into_v);

}  // namespace pygio_host
