// Linear maps of one input as one product, as one autograd node in C++:
//
//   forward:  Y = X W^T + b,  W = [W_1; ...; W_k] (k maps of one width),
//                             b = [b_1; ...; b_k] (or no bias)
//             or, accumulating into a fresh result R in place (no bias):
//             R += X W^T
//   backward: dX = dY W
//             dW_i = the rows of dY^T X of map i
//             db_i = the columns of map i of dY summed over the rows
//                    (column_sums: a GEMV dY^T 1 on large fp32 / fp64
//                    gradients, as ops.bias_gradient.column_sums)
//             dR = dY
//
// Under autocast (a compute dtype given) the node makes autocast's casts
// itself (X, W and b to the 16-bit dtype, the product as F.linear /
// torch.addmm's under autocast: the same forward values) and writes every
// gradient in its input's own dtype straight from the product (a float32
// dW from the 16-bit GEMM, db summed in float32): no cast node per
// parameter and no cast kernel per gradient, where autocast's F.linear
// recorded one of each.
//
// Part of the host extension module (module.cpp), called by
// ops.bias_gradient.linear / fused_linear / add_product on 2-D CUDA
// tensors outside compilation. In Python the same product took a
// torch.autograd.Function (large outputs) and, for k > 1, two
// concatenations recorded by autograd: host time that a layer's forward
// spends before its first large kernel can start, right after the
// synchronisation a training loop or benchmark makes.
#include "linear_autograd.h"

#include <torch/csrc/Exceptions.h>

#include "autograd_support.h"
#include "native_api.h"

namespace pygio_host {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Tensor stacked(at::TensorList parts) { return parts.size() == 1 ? parts[0] : at::cat(parts); }

class FusedLinearFunction : public torch::autograd::Function<FusedLinearFunction> {
 public:
  // Tensor arguments first (one gradient each, in this order), then the
  // compute dtype (none: the inputs' own).
  static Tensor forward(AutogradContext* ctx, const Tensor& x, at::TensorList weights,
                        at::TensorList biases, const std::optional<Tensor>& into,
                        std::optional<c10::ScalarType> dtype) {
    // The casts are made here: autocast has nothing left to do below.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const Tensor input = in_compute_dtype(x, dtype);
    const Tensor weight = in_compute_dtype(stacked(weights), dtype);
    bool weights_need_grad = false;
    for (const auto& w : weights) weights_need_grad |= w.requires_grad();
    ctx->saved_data["maps"] = static_cast<int64_t>(weights.size());
    ctx->saved_data["has_bias"] = !biases.empty();
    ctx->saved_data["has_into"] = into.has_value();
    // Each gradient in its input's dtype (autocast's casts undone in the products).
    ctx->saved_data["x_dtype"] = x.scalar_type();
    ctx->saved_data["weight_dtype"] = weights[0].scalar_type();
    ctx->saved_data["bias_dtype"] = biases.empty() ? x.scalar_type() : biases[0].scalar_type();
    // X only for dW, W only for dX (a layer's input is not kept for nothing);
    // the maps' own weights too, and X itself where it was cast, for a
    // backward that records a graph (the concatenation and the casts made
    // here have none).
    const bool x_recast = x.requires_grad() && input.scalar_type() != x.scalar_type();
    variable_list saved{weights_need_grad ? (x_recast ? x : input) : Tensor(),
                        x.requires_grad() ? weight : Tensor()};
    if (x.requires_grad() && (weights.size() > 1 || dtype)) {
      saved.insert(saved.end(), weights.begin(), weights.end());
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["dtype"] = dtype;
    if (into) {
      ctx->mark_dirty({*into});
      return into->addmm_(input, weight.t());
    }
    // A fresh tensor, no view: a caller may add to it in place.
    return biases.empty() ? input.mm(weight.t())
                          : at::addmm(in_compute_dtype(stacked(biases), dtype), input, weight.t());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const int64_t maps = ctx->saved_data["maps"].toInt();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const bool has_into = ctx->saved_data["has_into"].toBool();
    const auto dtype = ctx->saved_data["dtype"].toOptional<c10::ScalarType>();
    auto saved = ctx->get_saved_variables();
    const Tensor x = in_compute_dtype(saved[0], dtype);  // a cast X cast again (see forward)
    // create_graph: W again from the maps' weights, so dX's graph reaches them.
    Tensor weight = saved[1];
    if (torch::GradMode::is_enabled() && saved.size() > 2) {
      weight = in_compute_dtype(at::cat(at::TensorList(saved).slice(2)), dtype);
    }
    const Tensor grad = grads[0].contiguous();
    // One gradient per input as forward flattened them: x, the weights,
    // the biases, into, and none for the dtype.
    const int64_t first_bias = 1 + maps, bias_count = has_bias ? maps : 0;
    variable_list out(first_bias + bias_count + 2);
    if (ctx->needs_input_grad(0)) {
      out[0] = product(grad, weight, ctx->saved_data["x_dtype"].toScalarType());
    }
    split_into(out, 1, maps, ctx, [&] {
      return product(grad.t(), x, ctx->saved_data["weight_dtype"].toScalarType());
    });
    if (has_bias) {
      split_into(out, first_bias, maps, ctx, [&] {
        return column_sums(grad, ctx->saved_data["bias_dtype"].toScalarType());
      });
    }
    if (has_into && ctx->needs_input_grad(first_bias + bias_count)) {
      out[first_bias + bias_count] = grads[0];
    }
    return out;
  }

 private:
  // out[first + i] = map i's rows of whole() where input first + i needs a
  // gradient (whole() computed once, only then; one map takes it as it is).
  template <typename Whole>
  static void split_into(variable_list& out, int64_t first, int64_t maps, AutogradContext* ctx,
                         Whole whole) {
    bool any = false;
    for (int64_t i = 0; i < maps; ++i) any |= ctx->needs_input_grad(first + i);
    if (!any) return;
    const Tensor all = whole();
    if (maps == 1) {
      out[first] = all;
      return;
    }
    const int64_t width = all.size(0) / maps;
    for (int64_t i = 0; i < maps; ++i) {
      if (ctx->needs_input_grad(first + i)) out[first + i] = all.narrow(0, i * width, width);
    }
  }
};

}  // namespace

Tensor fused_linear_autograd(const Tensor& x, const std::vector<Tensor>& weights,
                             const std::vector<Tensor>& biases,
                             const std::optional<Tensor>& into,
                             std::optional<c10::ScalarType> dtype) {
  torch::PyWarningHandler warnings;  // torch's warnings reach Python's warnings
  TORCH_CHECK(!weights.empty() && (biases.empty() || biases.size() == weights.size()),
              "pyg_ioaware host extension: fused_linear takes one or more weights and no "
              "bias or one per weight");
  TORCH_CHECK(!into || (biases.empty() && weights.size() == 1),
              "pyg_ioaware host extension: fused_linear accumulates one map without a bias "
              "into a result");
  // As TensorLists: autograd takes their tensors as inputs (a vector it would not).
  return FusedLinearFunction::apply(x, at::TensorList(weights), at::TensorList(biases), into,
                                    dtype);
}

}  // namespace pygio_host
