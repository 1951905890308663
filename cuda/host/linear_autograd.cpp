// Linear maps of one input as one product, as one autograd node in C++:
//
//   forward:  Y = X W^T + b,  W = [W_1; ...; W_k] (k maps of one width),
//                             b = [b_1; ...; b_k] (or no bias)
//   backward: dX = dY W
//             dW_i = the rows of dY^T X of map i
//             db_i = the columns of map i of dY summed over the rows
//                    (column_sums: a GEMV dY^T 1 on large fp32 / fp64
//                    gradients, as ops.bias_gradient.column_sums)
//
// Part of the host extension module (module.cpp), called by
// ops.bias_gradient.linear / fused_linear on 2-D CUDA tensors of one
// float32 / float64 dtype outside autocast and compilation. In Python the
// same product took a torch.autograd.Function (large outputs) and, for
// k > 1, two concatenations recorded by autograd: host time that a layer's
// forward spends before its first large kernel can start, right after the
// synchronisation a training loop or benchmark makes.
#include "linear_autograd.h"

#include <torch/csrc/Exceptions.h>

#include "native_api.h"

namespace pygio_host {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Tensor stacked(at::TensorList parts) { return parts.size() == 1 ? parts[0] : at::cat(parts); }

class FusedLinearFunction : public torch::autograd::Function<FusedLinearFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, at::TensorList weights,
                        at::TensorList biases) {
    const Tensor weight = stacked(weights);
    bool weights_need_grad = false;
    for (const auto& w : weights) weights_need_grad |= w.requires_grad();
    ctx->saved_data["maps"] = static_cast<int64_t>(weights.size());
    ctx->saved_data["has_bias"] = !biases.empty();
    // X only for dW, W only for dX (a layer's input is not kept for nothing);
    // the maps' own weights too, for a backward that records a graph (the
    // concatenation made here has none).
    variable_list saved{weights_need_grad ? x : Tensor(), x.requires_grad() ? weight : Tensor()};
    if (x.requires_grad() && weights.size() > 1) {
      saved.insert(saved.end(), weights.begin(), weights.end());
    }
    ctx->save_for_backward(saved);
    // A fresh tensor, no view: a caller may add to it in place.
    return biases.empty() ? x.mm(weight.t()) : at::addmm(stacked(biases), x, weight.t());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const int64_t maps = ctx->saved_data["maps"].toInt();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    auto saved = ctx->get_saved_variables();
    const Tensor& x = saved[0];
    // create_graph: W again from the maps' weights, so dX's graph reaches them.
    const Tensor weight = torch::GradMode::is_enabled() && saved.size() > 2
                              ? at::cat(at::TensorList(saved).slice(2))
                              : saved[1];
    const Tensor grad = grads[0].contiguous();
    // One gradient per input as forward flattened them: x, the weights,
    // the biases.
    variable_list out(1 + maps + (has_bias ? maps : 0));
    if (ctx->needs_input_grad(0)) out[0] = grad.mm(weight);
    split_into(out, 1, maps, ctx, [&] { return grad.t().mm(x); });
    if (has_bias) {
      split_into(out, 1 + maps, maps, ctx, [&] { return column_sums(grad, grad.scalar_type()); });
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
                             const std::vector<Tensor>& biases) {
  torch::PyWarningHandler warnings;  // torch's warnings reach Python's warnings
  TORCH_CHECK(!weights.empty() && (biases.empty() || biases.size() == weights.size()),
              "pyg_ioaware host extension: fused_linear takes one or more weights and no "
              "bias or one per weight");
  // As TensorLists: autograd takes their tensors as inputs (a vector it would not).
  return FusedLinearFunction::apply(x, at::TensorList(weights), at::TensorList(biases));
}

}  // namespace pygio_host
