// An aggregation followed by linear maps as one autograd node in C++
// (aggregate_linear_autograd.cpp's header comment).
#pragma once

#include <torch/extension.h>

namespace pygio_host {

// Y = (A X_s) W_a^T + X_r W_r^T + b as one autograd node: A as
// spmm_autograd takes it (a, a_t, num_cols, materialize_work,
// cast_grad_first_degree, deterministic, fallback), x_root None for
// X_r = X_s, bias optional; with `dtype` (autocast's) the products'
// factors cast to it, each gradient in its input's dtype. `recompute`
// (ops.aggregate_linear.Recompute) gives the gradients of a backward that
// records a graph.
torch::Tensor aggregate_linear_autograd(
    const torch::Tensor& x_src, const c10::optional<torch::Tensor>& x_root,
    const torch::Tensor& w_agg, const torch::Tensor& w_root,
    const c10::optional<torch::Tensor>& bias, const py::tuple& a, const py::object& a_t,
    int64_t num_cols, int64_t materialize_work, int64_t cast_grad_first_degree,
    bool deterministic, const py::object& fallback, const py::object& recompute,
    std::optional<c10::ScalarType> dtype);

// The same with aggr(X_s) the neighbour min / max of X_s over the CSR
// (rowptr, col), its operand as minmax_autograd takes it; the winners kept
// only where X_s needs a gradient.
torch::Tensor minmax_linear_autograd(
    const torch::Tensor& x_src, const c10::optional<torch::Tensor>& x_root,
    const torch::Tensor& w_agg, const torch::Tensor& w_root,
    const c10::optional<torch::Tensor>& bias, const torch::Tensor& rowptr,
    const torch::Tensor& col, int64_t reduce, const c10::optional<torch::Tensor>& hub_degree,
    int64_t max_hubs, const c10::optional<torch::Tensor>& backward_hub_degree,
    int64_t backward_max_hubs, int64_t arg_bytes, const py::object& graph, int64_t backward_path,
    const py::object& recompute, std::optional<c10::ScalarType> dtype);

}  // namespace pygio_host
