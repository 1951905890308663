// The attention family's autograd in C++ (attention_autograd.cpp's header
// comment): graph-transformer and GATv2 attention, each as one autograd node.
#pragma once

#include <torch/extension.h>

#include <vector>

namespace pygio_host {

// {out, lse} of graph-transformer attention (pygio_transformer) recorded as
// one autograd node whose backward is pygio_transformer_backward.
//   q, k, v:   [nodes, heads, channels] (None where packed holds them);
//   packed:    None, or [nodes, 3, heads, channels] (q, k, v as its slots)
//              or [nodes, 2, heads, channels] (k, v; q given), its gradient
//              one tensor whose slots the backward kernels write;
//   edge:      None or [nnz, heads, channels] in CSR order;
//   structure: (rowptr, col, hub_degree or None, max_hubs);
//   transposed: None (no backward will run) or (rowptr_t, col_t, perm_t,
//              hub_degree_t or None, max_hubs_t), the CSR^T.
// Every tensor is laid out as the kernels read it (checked by the caller,
// ops.transformer). Not twice differentiable: a backward that records a
// graph gives gradients whose own backward raises, as Python's
// once_differentiable does.
std::vector<torch::Tensor> transformer_autograd(
    const c10::optional<torch::Tensor>& q, const c10::optional<torch::Tensor>& k,
    const c10::optional<torch::Tensor>& v, const c10::optional<torch::Tensor>& packed,
    const c10::optional<torch::Tensor>& edge, const py::tuple& structure,
    const py::object& transposed, double scale, double dropout_p, int64_t seed);

// {out, lse} of GATv2 attention (pygio_gatv2) recorded as one autograd node
// whose backward is pygio_gatv2_backward: x_l, x_r [nodes, heads, channels]
// (None where x_lr [nodes, 2, heads, channels] holds them), att [heads,
// channels] fp32, edge as the transformer's, out_bias None or [heads,
// channels] fp32 (added to every output row; its gradient is grad_out
// summed over rows in fp32); structure and transposed as the transformer's.
std::vector<torch::Tensor> gatv2_autograd(
    const c10::optional<torch::Tensor>& x_l, const c10::optional<torch::Tensor>& x_r,
    const c10::optional<torch::Tensor>& x_lr, const torch::Tensor& att,
    const c10::optional<torch::Tensor>& edge, const c10::optional<torch::Tensor>& out_bias,
    const py::tuple& structure, const py::object& transposed, double negative_slope,
    double dropout_p, int64_t seed);

}  // namespace pygio_host
