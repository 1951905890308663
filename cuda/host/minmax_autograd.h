// The reduction family's autograd in C++ (minmax_autograd.cpp's header
// comment): neighbour min / max as one autograd node.
#pragma once

#include <torch/extension.h>

namespace pygio_host {

// The min / max aggregation's operand as its autograd nodes keep it: the
// CSR (rowptr, col), reduce (0 min, 1 max), the forward's hub split
// (hub_degree undefined: none) and the backward's, the saved arg's code
// width (1 or 2 bytes, pyg_ioaware.h) and the Python Graph whose
// `transpose` (rowptr, col and perm) a backward over the CSR^T reads;
// backward_path: how the backward adds the gradients (MinMaxBackwardPath,
// minmax_launch.h: kAtomics or kBuckets, as ops.minmax.backward_path
// decided; torch's deterministic algorithms take kDeterministic at the
// backward); keep_arg: whether the
// forward keeps the winners for a backward.
struct MinMaxOperand {
  torch::Tensor rowptr, col;
  int64_t reduce;
  torch::Tensor hub_degree;
  int64_t max_hubs;
  torch::Tensor backward_hub_degree;
  int64_t backward_max_hubs;
  int64_t arg_bytes;
  py::object graph;
  int64_t backward_path;
  bool keep_arg;
};

// The operand from Python's arguments (checked: one index dtype, 1 or 2
// arg bytes).
MinMaxOperand minmax_operand(const torch::Tensor& rowptr, const torch::Tensor& col,
                             int64_t reduce, const c10::optional<torch::Tensor>& hub_degree,
                             int64_t max_hubs,
                             const c10::optional<torch::Tensor>& backward_hub_degree,
                             int64_t backward_max_hubs, int64_t arg_bytes,
                             const py::object& graph, int64_t backward_path, bool keep_arg);

// x [num_src, C] of inner stride 1 with rows that do not overlap (checked).
void check_minmax_input(const torch::Tensor& x);

// out[d, f] = min / max over the CSR row d of x[col[e], f] (0 for an empty
// row). With op.keep_arg, also the winners' codes, kept in the node with x
// and out for the backward: scalars in ctx->saved_data (keys "reduce",
// "max_hubs", "graph", "backward_path"), six tensors appended to `saved`;
// without, six undefined tensors appended.
torch::Tensor minmax_operand_forward(torch::autograd::AutogradContext* ctx,
                                     const MinMaxOperand& op, const torch::Tensor& x,
                                     torch::autograd::variable_list& saved);

// dX of that forward for dY = grad (PyG's rule: a tie shares the gradient),
// its tensors at saved[first..first + 5]: by the operand's backward path,
// or, with torch's deterministic algorithms on, gathered over the graph's
// CSR^T in a fixed order.
torch::Tensor minmax_operand_grad_x(torch::autograd::AutogradContext* ctx,
                                    const torch::autograd::variable_list& saved, size_t first,
                                    const torch::Tensor& grad);

// minmax_operand_forward of x recorded as one autograd node whose backward
// is minmax_operand_grad_x. Not twice differentiable, as
// ops.minmax.MinMaxFunction.
torch::Tensor minmax_autograd(const torch::Tensor& x, const torch::Tensor& rowptr,
                              const torch::Tensor& col, int64_t reduce,
                              const c10::optional<torch::Tensor>& hub_degree, int64_t max_hubs,
                              const c10::optional<torch::Tensor>& backward_hub_degree,
                              int64_t backward_max_hubs, int64_t arg_bytes,
                              const py::object& graph, int64_t backward_path);

}  // namespace pygio_host
