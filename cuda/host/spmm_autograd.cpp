// The SpMM family's autograd in C++: the host side of a training step on a
// small graph, where Python's autograd.Function costs more than the kernels.
//
//   forward:  Y = A X + b          (A = rowptr, col, values; CSR, rows of Y;
//                                  Y in the values' dtype: X's, or float32
//                                  for 16-bit X (the kernels' mixed form);
//                                  b of another dtype than Y's added after,
//                                  promoting)
//   backward: dX = A^T dY          over the CSR^T (rowptr_t, col_t, values_t)
//                                  where given, else as a transposed SpMM
//                                  over A (the lazy rule below); in X's
//                                  dtype (a float32 dY of 16-bit X cast
//                                  first where A has many entries a row
//                                  of dY, else the kernels' mixed form)
//             db = column sums of dY, fp32 accumulation (as autograd's add
//                  sums them where b promotes)
//
// Part of the host extension module (module.cpp), called only by
// ops.spmm_functional on inputs it has already checked (a Graph's
// structure, node features checked against it). The kernels are the native
// library's (native_api.h). Everything that needs Python (building a CSR^T,
// a backward that records a graph for a double backward) goes back to the
// Python object `fallback` (ops.spmm.NativeAutogradFallback).
//
// SpmmOperand's save / gradient helpers are shared with the node that
// follows the SpMM with linear maps (aggregate_linear_autograd.cpp).
#include "spmm_autograd.h"

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/graph_task.h>

#include "autograd_support.h"
#include "native_api.h"
#include "spmm_launch.h"

namespace pygio_host {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Y = op(A) x (+ bias) in `out_dtype` by the native kernel on torch's
// current stream; A has num_cols columns. transpose: Y = A^T x (no bias).
Tensor spmm(const Csr& a, int64_t num_cols, const Tensor& x, const Tensor& bias,
            bool transpose, bool deterministic, c10::ScalarType out_dtype) {
  const int64_t rows = transpose ? num_cols : a.rowptr.numel() - 1;
  Tensor out = torch::empty({rows, x.size(1)}, x.options().dtype(out_dtype));
  spmm_into(a.rowptr, a.col, a.values, x, bias, out, transpose, deterministic,
            transpose ? -1 : a.degree_bound);
  return out;
}

Csr csr_from_python(const py::handle& parts) {
  auto tuple = parts.cast<py::tuple>();
  return Csr{tuple[0].cast<Tensor>(), tuple[1].cast<Tensor>(), tuple[2].cast<Tensor>(),
             tuple[3].cast<int64_t>()};
}

// ops.spmm.LazyTranspose's rule, on the graph's state (fallback.graph.state,
// read and written under the GIL): the graph's first backward pass runs
// the transposed SpMM over A where the work is small; a later pass, a
// large one, a deterministic one, or one after the CSR^T was built gets
// the CSR^T.
bool transposed_over_a(AutogradContext* ctx, const Csr& a, int64_t width, bool deterministic) {
  if (deterministic) return false;
  py::gil_scoped_acquire gil;
  py::object state = python_object(ctx->saved_data["fallback"]).attr("graph").attr("state");
  if (!state.attr("transpose").is_none()) return false;
  const int64_t task = torch::autograd::get_current_graph_task_id();
  py::object first = state.attr("first_backward_task");
  if (first.is_none()) state.attr("first_backward_task") = task;
  const bool small = a.col.numel() * width < ctx->saved_data["materialize_work"].toInt();
  return small && (first.is_none() || first.cast<int64_t>() == task);
}

class SpmmFunction : public torch::autograd::Function<SpmmFunction> {
 public:
  // bias is optional (an undefined tensor cannot be an autograd input). Of
  // Y's dtype it is added inside the kernel; of another (say a float16 bias
  // of a float32 Y; autocast's fp32 bias over 16-bit X comes as the mixed
  // form, Y in float32) after it, promoting as torch does.
  static Tensor forward(AutogradContext* ctx, const Tensor& x,
                        const c10::optional<Tensor>& bias, SpmmOperand op) {
    const auto out_dtype = op.a.values.scalar_type();  // x's, or float32 for 16-bit x
    const bool promoting = bias.has_value() && bias->scalar_type() != out_dtype;
    ctx->saved_data["has_bias"] = bias.has_value();
    ctx->saved_data["promoting"] = promoting;
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    variable_list saved;
    save_operand(ctx, op, saved);
    ctx->save_for_backward(saved);
    if (promoting) return operand_forward(op, x, Tensor()) + *bias;
    return operand_forward(op, x, bias.value_or(Tensor()));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // needs_input_grad counts tensor inputs only: x, then bias where given.
    const bool needs_x = ctx->needs_input_grad(0);
    const bool needs_bias = ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(1);
    const bool promoting = ctx->saved_data["promoting"].toBool();
    const auto x_dtype = static_cast<c10::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    Tensor grad = grads[0];
    Tensor grad_x, grad_bias;
    if (promoting) {  // as autograd's add: db sums dY, dY goes on in the SpMM's dtype
      if (needs_bias) grad_bias = grad.sum(0);
      grad = grad.to(static_cast<c10::ScalarType>(ctx->saved_data["out_dtype"].toInt()));
    }
    grad = grad.contiguous();
    if (torch::GradMode::is_enabled()) {  // create_graph: a backward that records
      py::gil_scoped_acquire gil;
      auto fallback = python_object(ctx->saved_data["fallback"]);
      auto result = fallback.attr("differentiable_backward")(grad).cast<py::tuple>();
      grad_x = needs_x ? result[0].cast<Tensor>() : Tensor();
      if (needs_bias && !promoting) grad_bias = result[1].cast<Tensor>();
      return gradients(grad_x, grad_bias);
    }
    if (needs_x) grad_x = operand_grad_x(ctx, ctx->get_saved_variables(), 0, grad, x_dtype);
    if (needs_bias && !promoting) grad_bias = column_sums(grad, grad.scalar_type());
    return gradients(grad_x, grad_bias);
  }

 private:
  // One gradient per argument of forward (x, bias, then the operand).
  static variable_list gradients(const Tensor& grad_x, const Tensor& grad_bias) {
    return {grad_x, grad_bias, Tensor()};
  }
};

}  // namespace

SpmmOperand spmm_operand(const py::tuple& a, const py::object& a_t, int64_t num_cols,
                         int64_t materialize_work, int64_t cast_grad_first_degree,
                         bool deterministic, const py::object& fallback) {
  TORCH_CHECK(native.spmm_csr != nullptr, "pyg_ioaware host extension: set_native first");
  Csr transposed{Tensor(), Tensor(), Tensor(), -1};
  if (!a_t.is_none()) transposed = csr_from_python(a_t);
  return SpmmOperand{csr_from_python(a), transposed, num_cols, materialize_work,
                     cast_grad_first_degree, deterministic, fallback};
}

void save_operand(AutogradContext* ctx, const SpmmOperand& op, variable_list& saved) {
  ctx->saved_data["out_dtype"] = static_cast<int64_t>(op.a.values.scalar_type());
  ctx->saved_data["num_cols"] = op.num_cols;
  ctx->saved_data["deterministic"] = op.deterministic;
  ctx->saved_data["materialize_work"] = op.materialize_work;
  ctx->saved_data["cast_grad_first_degree"] = op.cast_grad_first_degree;
  ctx->saved_data["degree_bound"] = op.a.degree_bound;
  ctx->saved_data["degree_bound_t"] = op.a_t.degree_bound;
  ctx->saved_data["fallback"] = hold(op.fallback);
  saved.insert(saved.end(), {op.a.rowptr, op.a.col, op.a.values, op.a_t.rowptr, op.a_t.col,
                             op.a_t.values});
}

Tensor operand_forward(const SpmmOperand& op, const Tensor& x, const Tensor& bias) {
  return spmm(op.a, op.num_cols, x, bias, false, op.deterministic, op.a.values.scalar_type());
}

Tensor operand_grad_x(AutogradContext* ctx, const variable_list& saved, size_t first,
                      const Tensor& grad, c10::ScalarType x_dtype) {
  Csr a{saved[first], saved[first + 1], saved[first + 2],
        ctx->saved_data["degree_bound"].toInt()};
  Csr a_t{saved[first + 3], saved[first + 4], saved[first + 5],
          ctx->saved_data["degree_bound_t"].toInt()};
  const bool deterministic = ctx->saved_data["deterministic"].toBool();
  if (!a_t.rowptr.defined() && !transposed_over_a(ctx, a, grad.size(1), deterministic)) {
    py::gil_scoped_acquire gil;
    a_t = csr_from_python(python_object(ctx->saved_data["fallback"]).attr("transpose")());
  }
  // dX in x's dtype. From a float32 dY of a 16-bit x: dY and the values
  // cast to x's dtype first where A has many entries a row of dY, else
  // the kernels' mixed form (ops.spmm.cast_grad_first).
  Csr& used = a_t.rowptr.defined() ? a_t : a;
  Tensor grad_in = grad;
  if (grad.scalar_type() != x_dtype &&
      a.col.numel() >= ctx->saved_data["cast_grad_first_degree"].toInt() * grad.size(0)) {
    grad_in = grad.to(x_dtype);
    used.values = used.values.to(x_dtype);
  }
  return a_t.rowptr.defined()
             ? spmm(a_t, a.rowptr.numel() - 1, grad_in, Tensor(), false, deterministic, x_dtype)
             : spmm(a, ctx->saved_data["num_cols"].toInt(), grad_in, Tensor(), true, false,
                    x_dtype);
}

Tensor spmm_autograd(const Tensor& x, const c10::optional<Tensor>& bias,
                     const py::tuple& a, const py::object& a_t, int64_t num_cols,
                     int64_t materialize_work, int64_t cast_grad_first_degree,
                     bool deterministic, const py::object& fallback) {
  torch::PyWarningHandler warnings;  // torch's warnings reach Python's warnings
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.stride(1) == 1,
              "pyg_ioaware host extension: x must be a 2-D CUDA tensor of inner stride 1");
  return SpmmFunction::apply(x, bias,
                             spmm_operand(a, a_t, num_cols, materialize_work,
                                          cast_grad_first_degree, deterministic, fallback));
}

}  // namespace pygio_host
