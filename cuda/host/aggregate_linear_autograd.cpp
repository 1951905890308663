// An aggregation and the linear maps after it as one autograd node in C++:
// SAGEConv's layer, whose three nodes (the root map, the aggregation, the
// map of the aggregation) cost a small training step more host time than
// their kernels take.
//
//   forward:  Y = X_r W_r^T + b           (one GEMM; X_r = X_s where no
//                                          root features are given)
//             Y += aggr(X_s) W_a^T        (the aggregation, then one GEMM
//                                          accumulating in place)
//   backward: dX_s = aggr'(dY W_a)        (the aggregation's own dX rules)
//                    (+ dY W_r where X_r = X_s, accumulated in place)
//             dX_r = dY W_r,  dW_a = dY^T aggr(X_s),  dW_r = dY^T X_r,
//             db = column sums of dY
//
// aggr is the SpMM family's sum / mean (SpmmOperand: A X_s, dX = A^T G) or
// the reduction family's min / max (MinMaxOperand: dX through the saved
// winners). Under autocast (a compute dtype given) the node makes
// autocast's casts (X_r, aggr(X_s), the weights and b to the 16-bit
// dtype), as the C++ linear node does (linear_autograd.cpp), and each
// gradient comes out in its input's dtype straight from its product. The
// forward gives the values of the three nodes it stands for, bitwise: the
// same kernels in the same order. A backward that records a graph
// (create_graph) goes to Python (`recompute`:
// ops.aggregate_linear.Recompute), which differentiates the same
// composition of differentiable ops.
//
// Part of the host extension module (module.cpp), called only by
// ops.aggregate_linear on inputs it has checked.
#include "aggregate_linear_autograd.h"

#include <torch/csrc/Exceptions.h>

#include "autograd_support.h"
#include "minmax_autograd.h"
#include "native_api.h"
#include "spmm_autograd.h"

namespace pygio_host {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Where forward's save_for_backward puts each tensor (the operand's six
// after these).
enum Saved : size_t {
  kXSrc, kXRoot, kWAgg, kWRoot, kBias,  // the inputs, for a backward that records a graph
  kAggregated,                          // aggr(X_s) as its product took it, for dW_a
  kRootCast, kWAggCast, kWRootCast,     // autocast's casts (undefined where none)
  kOperand
};

// What the node asks of its aggregation's operand: forward (keeping what
// its backward needs: six tensors appended to `saved`) and dX from the
// aggregation's gradient (those tensors at saved[first..]).
struct SpmmAggregation {
  static Tensor forward(AutogradContext* ctx, const SpmmOperand& op, const Tensor& x,
                        variable_list& saved) {
    save_operand(ctx, op, saved);
    return operand_forward(op, x, Tensor());
  }
  static Tensor grad_x(AutogradContext* ctx, const variable_list& saved, size_t first,
                       const Tensor& grad, c10::ScalarType x_dtype) {
    return operand_grad_x(ctx, saved, first, grad, x_dtype);
  }
};

struct MinMaxAggregation {
  static Tensor forward(AutogradContext* ctx, const MinMaxOperand& op, const Tensor& x,
                        variable_list& saved) {
    return minmax_operand_forward(ctx, op, x, saved);
  }
  static Tensor grad_x(AutogradContext* ctx, const variable_list& saved, size_t first,
                       const Tensor& grad, c10::ScalarType /*x_dtype: the output's too*/) {
    return minmax_operand_grad_x(ctx, saved, first, grad);
  }
};

template <typename Aggregation, typename Operand>
class AggregateLinearFunction
    : public torch::autograd::Function<AggregateLinearFunction<Aggregation, Operand>> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x_src,
                        const c10::optional<Tensor>& x_root, const Tensor& w_agg,
                        const Tensor& w_root, const c10::optional<Tensor>& bias, Operand op,
                        const py::object& recompute, std::optional<c10::ScalarType> dtype) {
    // The casts are made here: autocast has nothing left to do below.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const Tensor& root_input = x_root ? *x_root : x_src;
    const Tensor root = in_compute_dtype(root_input, dtype);
    const Tensor wa = in_compute_dtype(w_agg, dtype), wr = in_compute_dtype(w_root, dtype);
    Tensor out = bias ? at::addmm(in_compute_dtype(*bias, dtype), root, wr.t())
                      : root.mm(wr.t());
    variable_list operand_saved;
    const Tensor raw = Aggregation::forward(ctx, op, x_src, operand_saved);
    const Tensor aggregated = in_compute_dtype(raw, dtype);
    out.addmm_(aggregated, wa.t());

    ctx->saved_data["aggregated_dtype"] = raw.scalar_type();
    ctx->saved_data["recompute"] = hold(recompute);
    const auto cast = [&](const Tensor& t, const Tensor& input) {
      return t.scalar_type() != input.scalar_type() ? t : Tensor();
    };
    variable_list saved{x_src,
                        x_root.value_or(Tensor()),
                        w_agg,
                        w_root,
                        bias.value_or(Tensor()),
                        w_agg.requires_grad() ? aggregated : Tensor(),
                        w_root.requires_grad() ? cast(root, root_input) : Tensor(),
                        cast(wa, w_agg),
                        cast(wr, w_root)};
    saved.insert(saved.end(), operand_saved.begin(), operand_saved.end());
    ctx->save_for_backward(saved);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto saved = ctx->get_saved_variables();
    const bool has_root = saved[kXRoot].defined(), has_bias = saved[kBias].defined();
    // needs_input_grad counts the tensors given: x_src, x_root, w_agg,
    // w_root, bias, the optional ones only where given.
    const size_t w_agg_edge = has_root ? 2 : 1;
    const bool needs_x_src = ctx->needs_input_grad(0);
    const bool needs_x_root = has_root && ctx->needs_input_grad(1);
    const bool needs_w_agg = ctx->needs_input_grad(w_agg_edge);
    const bool needs_w_root = ctx->needs_input_grad(w_agg_edge + 1);
    const bool needs_bias = has_bias && ctx->needs_input_grad(w_agg_edge + 2);
    const Tensor grad = grads[0].contiguous();
    // One gradient per forward argument: the five tensors, then none for
    // the operand, recompute and dtype.
    variable_list out(8);
    if (torch::GradMode::is_enabled()) {  // create_graph: a backward that records
      py::gil_scoped_acquire gil;
      auto result = python_object(ctx->saved_data["recompute"])
                        .attr("gradients")(grad, saved[kXSrc], optional(saved[kXRoot]),
                                           saved[kWAgg], saved[kWRoot], optional(saved[kBias]))
                        .cast<py::tuple>();
      const bool needs[] = {needs_x_src, needs_x_root, needs_w_agg, needs_w_root, needs_bias};
      for (size_t i = 0; i < 5; ++i) {
        if (needs[i]) out[i] = result[i].cast<Tensor>();
      }
      return out;
    }
    const Tensor& x_root = has_root ? saved[kXRoot] : saved[kXSrc];
    const Tensor& wa = either(saved[kWAggCast], saved[kWAgg]);
    const Tensor& wr = either(saved[kWRootCast], saved[kWRoot]);
    if (needs_x_src) {
      const auto x_dtype = saved[kXSrc].scalar_type();
      const auto aggregated_dtype = ctx->saved_data["aggregated_dtype"].toScalarType();
      Tensor grad_x = Aggregation::grad_x(ctx, saved, kOperand,
                                          product(grad, wa, aggregated_dtype), x_dtype);
      if (!has_root) {  // X_r = X_s: dY W_r added to the same gradient
        if (grad.scalar_type() == x_dtype) {
          grad_x.addmm_(grad, wr);
        } else {
          grad_x.add_(product(grad, wr, x_dtype));
        }
      }
      out[0] = grad_x;
    }
    if (needs_x_root) out[1] = product(grad, wr, x_root.scalar_type());
    if (needs_w_agg) out[2] = product(grad.t(), saved[kAggregated], saved[kWAgg].scalar_type());
    if (needs_w_root) {
      out[3] = product(grad.t(), either(saved[kRootCast], x_root), saved[kWRoot].scalar_type());
    }
    if (needs_bias) out[4] = column_sums(grad, saved[kBias].scalar_type());
    return out;
  }

 private:
  static const Tensor& either(const Tensor& first, const Tensor& otherwise) {
    return first.defined() ? first : otherwise;
  }

  static py::object optional(const Tensor& t) {
    return t.defined() ? py::cast(t) : py::none();
  }
};

}  // namespace

Tensor aggregate_linear_autograd(const Tensor& x_src, const c10::optional<Tensor>& x_root,
                                 const Tensor& w_agg, const Tensor& w_root,
                                 const c10::optional<Tensor>& bias, const py::tuple& a,
                                 const py::object& a_t, int64_t num_cols,
                                 int64_t materialize_work, int64_t cast_grad_first_degree,
                                 bool deterministic, const py::object& fallback,
                                 const py::object& recompute,
                                 std::optional<c10::ScalarType> dtype) {
  torch::PyWarningHandler warnings;  // torch's warnings reach Python's warnings
  TORCH_CHECK(x_src.is_cuda() && x_src.dim() == 2 && x_src.stride(1) == 1,
              "pyg_ioaware host extension: x_src must be a 2-D CUDA tensor of inner stride 1");
  return AggregateLinearFunction<SpmmAggregation, SpmmOperand>::apply(
      x_src, x_root, w_agg, w_root, bias,
      spmm_operand(a, a_t, num_cols, materialize_work, cast_grad_first_degree, deterministic,
                   fallback),
      recompute, dtype);
}

Tensor minmax_linear_autograd(const Tensor& x_src, const c10::optional<Tensor>& x_root,
                              const Tensor& w_agg, const Tensor& w_root,
                              const c10::optional<Tensor>& bias, const Tensor& rowptr,
                              const Tensor& col, int64_t reduce,
                              const c10::optional<Tensor>& hub_degree, int64_t max_hubs,
                              const c10::optional<Tensor>& backward_hub_degree,
                              int64_t backward_max_hubs, int64_t arg_bytes,
                              const py::object& graph, int64_t backward_path,
                              const py::object& recompute,
                              std::optional<c10::ScalarType> dtype) {
  torch::PyWarningHandler warnings;  // torch's warnings reach Python's warnings
  check_minmax_input(x_src);
  // The winners are kept where a backward will need them (as ops.minmax.graph_minmax).
  const bool keep_arg = torch::GradMode::is_enabled() && x_src.requires_grad();
  return AggregateLinearFunction<MinMaxAggregation, MinMaxOperand>::apply(
      x_src, x_root, w_agg, w_root, bias,
      minmax_operand(rowptr, col, reduce, hub_degree, max_hubs, backward_hub_degree,
                     backward_max_hubs, arg_bytes, graph, backward_path, keep_arg),
      recompute, dtype);
}

}  // namespace pygio_host
