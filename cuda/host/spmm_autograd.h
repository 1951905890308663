// The SpMM family's autograd in C++ (spmm_autograd.cpp's header comment).
#pragma once

#include <torch/extension.h>

namespace pygio_host {

// Y = A X + b as one autograd node: a = (rowptr, col, values, degree bound),
// a_t the same of the CSR^T or None, num_cols = rows of x; Y in the
// values' dtype (x's, or float32 for 16-bit x); `fallback` is the Python
// object (ops.spmm.NativeAutogradFallback) asked for what needs Python.
// materialize_work and cast_grad_first_degree are ops.spmm's
// LazyTranspose.MATERIALIZE_WORK and CAST_GRAD_FIRST_DEGREE.
torch::Tensor spmm_autograd(const torch::Tensor& x, const c10::optional<torch::Tensor>& bias,
                            const py::tuple& a, const py::object& a_t, int64_t num_cols,
                            int64_t materialize_work, int64_t cast_grad_first_degree,
                            bool deterministic, const py::object& fallback);

}  // namespace pygio_host
