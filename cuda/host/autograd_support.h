// What the host extension's autograd nodes share: a Python object kept in
// a node's saved data, Python's once_differentiable for a C++ backward, and
// the casts and products of the nodes with linear maps.
#pragma once

#include <torch/extension.h>

namespace pygio_host {

// `object` as an IValue a node keeps in ctx->saved_data (a capsule), released
// with the GIL from whichever thread frees the node.
c10::IValue hold(const py::object& object);

// The object `hold` saved (call it with the GIL held).
py::object python_object(const c10::IValue& value);

// Python's torch.autograd.function.once_differentiable for a C++ backward:
// where the backward records a graph (create_graph) and its incoming
// gradient requires one, the gradients go out through a DelayedError node,
// so that differentiating them again raises (and not silently gives zero).
torch::autograd::variable_list once_differentiable(torch::autograd::variable_list grads,
                                                   const torch::Tensor& incoming);

// t in the product's dtype where one is given (autocast's), else as it is.
torch::Tensor in_compute_dtype(const torch::Tensor& t, std::optional<c10::ScalarType> dtype);

// a b in the dtype `want` (a float32 product of 16-bit factors straight
// from the GEMM, not rounded to 16 bits and cast; cast after the product
// where the backward records a graph, which aten::mm.dtype does not).
torch::Tensor product(const torch::Tensor& a, const torch::Tensor& b, c10::ScalarType want);

}  // namespace pygio_host
