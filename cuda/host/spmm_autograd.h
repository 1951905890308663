// The SpMM family's autograd in C++ (spmm_autograd.cpp's header comment).
#pragma once

#include <torch/extension.h>

namespace pygio_host {

// One CSR matrix with its values and the longest row it is known to have.
struct Csr {
  torch::Tensor rowptr, col, values;
  int64_t degree_bound;  // -1: not known
};

// A, the SpMM's sparse operand, as its autograd nodes keep it: the CSR, its
// CSR^T where there is one (undefined tensors where not), the columns of A
// (rows of x), ops.spmm's LazyTranspose.MATERIALIZE_WORK and
// CAST_GRAD_FIRST_DEGREE, the deterministic flag and the Python object
// (ops.spmm.NativeAutogradFallback) asked for what needs Python.
struct SpmmOperand {
  Csr a, a_t;
  int64_t num_cols;
  int64_t materialize_work;
  int64_t cast_grad_first_degree;
  bool deterministic;
  py::object fallback;
};

// The operand from Python's arguments: a = (rowptr, col, values, degree
// bound), a_t the same of the CSR^T or None.
SpmmOperand spmm_operand(const py::tuple& a, const py::object& a_t, int64_t num_cols,
                         int64_t materialize_work, int64_t cast_grad_first_degree,
                         bool deterministic, const py::object& fallback);

// Keeps op in a node: its scalars in ctx->saved_data (keys "out_dtype",
// "num_cols", "deterministic", "materialize_work", "cast_grad_first_degree",
// "degree_bound", "degree_bound_t", "fallback"), its six tensors appended to
// `saved` (the node's save_for_backward list).
void save_operand(torch::autograd::AutogradContext* ctx, const SpmmOperand& op,
                  torch::autograd::variable_list& saved);

// A x (+ bias, of Y's dtype, inside the kernel) in the values' dtype (x's,
// or float32 for 16-bit x).
torch::Tensor operand_forward(const SpmmOperand& op, const torch::Tensor& x,
                              const torch::Tensor& bias);

// dX = A^T grad in x_dtype for the operand save_operand kept, its tensors
// at saved[first..first + 5]: over the CSR^T, or as a transposed SpMM over
// A where the lazy rule allows (the CSR^T built through Python otherwise).
torch::Tensor operand_grad_x(torch::autograd::AutogradContext* ctx,
                             const torch::autograd::variable_list& saved, size_t first,
                             const torch::Tensor& grad, c10::ScalarType x_dtype);

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
