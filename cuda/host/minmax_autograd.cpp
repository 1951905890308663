// The reduction family's autograd in C++: the host side of a training step
// on a small graph, where ops.minmax.MinMaxFunction's Python forward and
// backward bodies cost more than the kernels.
//
//   forward:  out, arg = pygio_minmax over the CSR (arg: a code of
//             arg_bytes bytes an element, the winner's position in its row
//             or the mark of an element the backward walks); saves x, out
//             and arg, no edge tensor
//   backward: grad_x = pygio_minmax_backward through arg by the path
//             ops.minmax decided (atomics or buckets), or, with torch's
//             deterministic algorithms on, gathered over the CSR^T in a
//             fixed order (the graph's CSR^T, from Python, the only thing
//             asked of it)
//
// Part of the host extension module (module.cpp), called only by
// ops.minmax on a Graph's structure and features it has checked. The
// launches are minmax_launch.h's. MinMaxOperand's forward and gradient are
// shared with the node that follows the aggregation with linear maps
// (aggregate_linear_autograd.cpp).
#include "minmax_autograd.h"

#include <ATen/Context.h>
#include <torch/csrc/Exceptions.h>

#include "autograd_support.h"
#include "minmax_launch.h"
#include "native_api.h"

namespace pygio_host {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Whether the kernels read t's rows in place: inner stride 1, rows that do
// not overlap (an expanded gradient's do).
bool readable_rows(const Tensor& t) {
  return t.stride(1) == 1 && (t.size(0) <= 1 || t.stride(0) >= t.size(1));
}

Tensor rows_readable(const Tensor& t) { return readable_rows(t) ? t : t.contiguous(); }

class MinMaxFunction : public torch::autograd::Function<MinMaxFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, MinMaxOperand op) {
    variable_list saved;
    Tensor out = minmax_operand_forward(ctx, op, x, saved);
    ctx->save_for_backward(saved);
    return out;
  }

  // One gradient per forward argument: x's, then none for the operand.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list result(2);
    {
      torch::NoGradGuard no_grad;  // once differentiable: nothing recorded here
      result[0] = minmax_operand_grad_x(ctx, ctx->get_saved_variables(), 0, grads[0]);
    }
    return once_differentiable(std::move(result), grads[0]);
  }
};

}  // namespace

MinMaxOperand minmax_operand(const Tensor& rowptr, const Tensor& col, int64_t reduce,
                             const c10::optional<Tensor>& hub_degree, int64_t max_hubs,
                             const c10::optional<Tensor>& backward_hub_degree,
                             int64_t backward_max_hubs, int64_t arg_bytes,
                             const py::object& graph, int64_t backward_path, bool keep_arg) {
  TORCH_CHECK(native.minmax != nullptr, "pyg_ioaware host extension: set_native first");
  TORCH_CHECK(rowptr.scalar_type() == col.scalar_type(),
              "pyg_ioaware host extension: rowptr and col must share one index dtype");
  TORCH_CHECK(arg_bytes == 1 || arg_bytes == 2,
              "pyg_ioaware host extension: arg_bytes must be 1 or 2");
  TORCH_CHECK(backward_path >= kAtomics && backward_path <= kBuckets,
              "pyg_ioaware host extension: unknown min / max backward path ", backward_path);
  return MinMaxOperand{rowptr,
                       col,
                       reduce,
                       hub_degree.value_or(Tensor()),
                       max_hubs,
                       backward_hub_degree.value_or(Tensor()),
                       backward_max_hubs,
                       arg_bytes,
                       graph,
                       backward_path,
                       keep_arg};
}

void check_minmax_input(const Tensor& x) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && readable_rows(x),
              "pyg_ioaware host extension: x must be a 2-D CUDA tensor of inner stride 1 "
              "and rows that do not overlap");
}

Tensor minmax_operand_forward(AutogradContext* ctx, const MinMaxOperand& op, const Tensor& x,
                              variable_list& saved) {
  const int64_t rows = op.rowptr.numel() - 1, width = x.size(1);
  Tensor out = torch::empty({rows, width}, x.options());
  Tensor arg;
  if (op.keep_arg) {
    arg = torch::empty({rows, width},
                       x.options().dtype(op.arg_bytes == 1 ? torch::kByte : torch::kShort));
  }
  if (rows > 0 && width > 0) {
    minmax(op.rowptr, op.col, x, op.reduce, op.hub_degree, op.max_hubs, out, arg);
  }
  if (!op.keep_arg) {
    saved.insert(saved.end(), 6, Tensor());
    return out;
  }
  saved.insert(saved.end(), {x, out, arg, op.rowptr, op.col, op.backward_hub_degree});
  ctx->saved_data["reduce"] = op.reduce;
  ctx->saved_data["max_hubs"] = op.backward_max_hubs;
  ctx->saved_data["graph"] = hold(op.graph);
  ctx->saved_data["backward_path"] = op.backward_path;
  return out;
}

Tensor minmax_operand_grad_x(AutogradContext* ctx, const variable_list& saved, size_t first,
                             const Tensor& grad) {
  const Tensor &x = saved[first], &out = saved[first + 1], &arg = saved[first + 2],
               &rowptr = saved[first + 3], &col = saved[first + 4],
               &hub_degree = saved[first + 5];
  Tensor rowptr_t, col_t, perm_t;  // the CSR^T, for every path but atomics
  const int64_t path = at::globalContext().deterministicAlgorithms()
                           ? kDeterministic
                           : ctx->saved_data["backward_path"].toInt();
  if (path != kAtomics) {
    py::gil_scoped_acquire gil;
    py::object transpose = python_object(ctx->saved_data["graph"]).attr("transpose");
    rowptr_t = transpose.attr("rowptr").cast<Tensor>();
    col_t = transpose.attr("col").cast<Tensor>();
    perm_t = transpose.attr("perm").cast<Tensor>();
  }
  Tensor grad_x = torch::empty(x.sizes(), x.options());
  minmax_backward(rowptr, col, rowptr_t, col_t, perm_t, x, out, arg, rows_readable(grad),
                  ctx->saved_data["reduce"].toInt(), hub_degree,
                  ctx->saved_data["max_hubs"].toInt(), grad_x, path);
  return grad_x;
}

Tensor minmax_autograd(const Tensor& x, const Tensor& rowptr, const Tensor& col,
                       int64_t reduce, const c10::optional<Tensor>& hub_degree,
                       int64_t max_hubs, const c10::optional<Tensor>& backward_hub_degree,
                       int64_t backward_max_hubs, int64_t arg_bytes, const py::object& graph,
                       int64_t backward_path) {
  torch::PyWarningHandler warnings;  // torch's warnings reach Python's warnings
  check_minmax_input(x);
  return MinMaxFunction::apply(x, minmax_operand(rowptr, col, reduce, hub_degree, max_hubs,
                                                 backward_hub_degree, backward_max_hubs,
                                                 arg_bytes, graph, backward_path, true));
}

}  // namespace pygio_host
