// The reduction family's autograd in C++ (minmax_autograd.cpp's header
// comment): neighbour min / max as one autograd node.
#pragma once

#include <torch/extension.h>

namespace pygio_host {

// out[d, f] = min (reduce 0) / max (reduce 1) over the CSR row d of
// x[col[e], f] (0 for an empty row), recorded as one autograd node whose
// backward is pygio_minmax_backward (PyG's rule: a tie shares the
// gradient). x: [num_src, C] of inner stride 1, rows not overlapping
// (checked by the caller, ops.minmax); hub_degree / max_hubs: the
// forward's split (hub_degree None: none), backward_hub_degree /
// backward_max_hubs the backward's; arg_bytes: the saved arg's code width
// (1 or 2, pyg_ioaware.h); graph: the Python Graph whose
// `transpose` (rowptr, col) a deterministic backward reads. Not twice
// differentiable, as ops.minmax.MinMaxFunction.
torch::Tensor minmax_autograd(const torch::Tensor& x, const torch::Tensor& rowptr,
                              const torch::Tensor& col, int64_t reduce,
                              const c10::optional<torch::Tensor>& hub_degree, int64_t max_hubs,
                              const c10::optional<torch::Tensor>& backward_hub_degree,
                              int64_t backward_max_hubs, int64_t arg_bytes,
                              const py::object& graph);

}  // namespace pygio_host
