// Linear maps of one input as one product, with their backward in C++
// (linear_autograd.cpp's header comment).
#pragma once

#include <torch/extension.h>

#include <vector>

namespace pygio_host {

// Y = X [W_1; ...; W_k]^T (+ [b_1; ...; b_k]) as one autograd node; biases
// empty or one per weight. With `into` (one map, no bias): into += X W^T in
// place. With `dtype` (autocast's): X, W and b cast to it for the product,
// each gradient in its input's dtype.
torch::Tensor fused_linear_autograd(const torch::Tensor& x,
                                    const std::vector<torch::Tensor>& weights,
                                    const std::vector<torch::Tensor>& biases,
                                    const std::optional<torch::Tensor>& into,
                                    std::optional<c10::ScalarType> dtype);

}  // namespace pygio_host
