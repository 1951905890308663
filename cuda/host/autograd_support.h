// What the host extension's autograd nodes share: a Python object kept in
// a node's saved data, and Python's once_differentiable for a C++ backward.
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

}  // namespace pygio_host
