// An aggregation followed by linear maps as one autograd node in C++
// (aggregate_linear_autograd.cpp's header comment).
#pragma once

#include <torch/extension.h>

namespace pygio_host {

// Y = (A X_s) W_a^T + X_r W_r^T + b as one autograd node: A as
// spmm_autograd takes it (a, a_t, num_cols, materialize_work,
// cast_grad_first_degree, deterministic, fallback), x_root None for
// X_r = X_s, bias optional; with `dtype` (autocast's) the products'
// factors cast to it, each gradient in its input's dtype.
torch::Tensor aggregate_linear_autograd(
    const torch::Tensor& x_src, const c10::optional<torch::Tensor>& x_root,
    const torch::Tensor& w_agg, const torch::Tensor& w_root,
    const c10::optional<torch::Tensor>& bias, const py::tuple& a, const py::object& a_t,
    int64_t num_cols, int64_t materialize_work, int64_t cast_grad_first_degree,
    bool deterministic, const py::object& fallback, std::optional<c10::ScalarType> dtype);

}  // namespace pygio_host
