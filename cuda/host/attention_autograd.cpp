// The attention family's autograd in C++: the host side of a training step
// on a small graph. The Python autograd.Functions (ops.transformer's
// TransformerFunction, ops.attention's GATv2Function) cost a small
// mini-batch step with two such layers 0.25-0.32 ms on an H200 host, a
// tenth of the step (one-process A/B, docs/results.md): their forward and
// backward bodies, saved tensors and the packed gradient's slots.
//
//   forward:  {out, lse} = pygio_transformer / pygio_gatv2 over the CSR
//   backward: the node gradients (and att's, edge's, the output bias's) by
//             pygio_transformer_backward / pygio_gatv2_backward over the
//             CSR and its CSR^T, given by the forward's caller where a
//             backward may run, so that the backward needs no Python (nor
//             the GIL)
//
// Part of the host extension module (module.cpp), called only by
// ops.transformer and ops.attention on inputs they have checked and laid
// out as the kernels read them. The launches are attention_launch.h's.
#include "attention_autograd.h"

#include "attention_launch.h"
#include "autograd_support.h"
#include "native_api.h"

namespace pygio_host {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The structure an attention node runs over: the CSR with its hub split and,
// where a backward may run, its CSR^T with the transpose's hub split.
// Undefined tensors: no split, no CSR^T.
struct AttentionStructure {
  Tensor rowptr, col, hub_degree;
  int64_t max_hubs = 0;
  Tensor rowptr_t, col_t, perm_t, hub_degree_t;
  int64_t max_hubs_t = 0;
};

Tensor tensor_or_undefined(const py::handle& object) {
  return object.is_none() ? Tensor() : object.cast<Tensor>();
}

OptionalTensor optional_of(const Tensor& t) {
  return t.defined() ? OptionalTensor(t) : c10::nullopt;
}

AttentionStructure structure_from_python(const py::tuple& structure,
                                         const py::object& transposed) {
  AttentionStructure s;
  s.rowptr = structure[0].cast<Tensor>();
  s.col = structure[1].cast<Tensor>();
  s.hub_degree = tensor_or_undefined(structure[2]);
  s.max_hubs = structure[3].cast<int64_t>();
  if (!transposed.is_none()) {
    auto t = transposed.cast<py::tuple>();
    s.rowptr_t = t[0].cast<Tensor>();
    s.col_t = t[1].cast<Tensor>();
    s.perm_t = t[2].cast<Tensor>();
    s.hub_degree_t = tensor_or_undefined(t[3]);
    s.max_hubs_t = t[4].cast<int64_t>();
  }
  return s;
}

// Saves the structure's tensors after a node's own (`saved`) and its hub
// counts; saved_structure reads them back from position `first`.
void save_structure(AutogradContext* ctx, variable_list saved, const AttentionStructure& s) {
  saved.insert(saved.end(), {s.rowptr, s.col, s.hub_degree, s.rowptr_t, s.col_t, s.perm_t,
                             s.hub_degree_t});
  ctx->save_for_backward(std::move(saved));
  ctx->saved_data["max_hubs"] = s.max_hubs;
  ctx->saved_data["max_hubs_t"] = s.max_hubs_t;
}

AttentionStructure saved_structure(AutogradContext* ctx, const variable_list& saved,
                                   size_t first) {
  AttentionStructure s{saved[first], saved[first + 1], saved[first + 2],
                       ctx->saved_data["max_hubs"].toInt(), saved[first + 3],
                       saved[first + 4], saved[first + 5], saved[first + 6],
                       ctx->saved_data["max_hubs_t"].toInt()};
  TORCH_CHECK(s.rowptr_t.defined(),
              "pyg_ioaware attention: no CSR^T was given to the forward of this backward");
  return s;
}

Hubs hubs_of(const AttentionStructure& s) {
  return Hubs{optional_of(s.hub_degree), s.max_hubs, optional_of(s.hub_degree_t), s.max_hubs_t};
}

// The node features the kernels read: the slots of packed where it holds
// them (the transformer's [nodes, 3, heads, channels]: q, k, v, or [nodes,
// 2, ...]: k, v with q given; GATv2's [nodes, 2, ...]: x_l, x_r), else the
// given ones.
variable_list features_of(variable_list given, const Tensor& packed) {
  if (!packed.defined()) return given;
  const int64_t slots = packed.size(1);
  const int64_t first = static_cast<int64_t>(given.size()) - slots;
  for (int64_t i = 0; i < slots; ++i) given[first + i] = packed.select(1, i);
  return given;
}

// Where the backward kernels write the node gradients: the slots of one
// fresh tensor of packed's shape where packed is given (the packed input's
// gradient, returned first), else nothing (fresh tensors each).
std::pair<Tensor, std::vector<OptionalTensor>> gradient_slots(size_t count,
                                                              const Tensor& packed) {
  std::vector<OptionalTensor> into(count);
  if (!packed.defined()) return {Tensor(), into};
  Tensor gradient = torch::empty(packed.sizes(), packed.options());
  const int64_t slots = packed.size(1);
  for (int64_t i = 0; i < slots; ++i) into[count - slots + i] = gradient.select(1, i);
  return {gradient, into};
}

class TransformerFunction : public torch::autograd::Function<TransformerFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const OptionalTensor& q,
                               const OptionalTensor& k, const OptionalTensor& v,
                               const OptionalTensor& packed, const OptionalTensor& edge,
                               const AttentionStructure& s, double scale, double dropout_p,
                               int64_t seed) {
    const Tensor none;
    const variable_list f = features_of({q.value_or(none), k.value_or(none), v.value_or(none)},
                                        packed.value_or(none));
    variable_list result = transformer(s.rowptr, s.col, f[0], f[1], f[2], edge, scale,
                                       dropout_p, seed, optional_of(s.hub_degree), s.max_hubs);
    ctx->mark_non_differentiable({result[1]});
    save_structure(ctx, {q.value_or(none), k.value_or(none), v.value_or(none),
                         packed.value_or(none), edge.value_or(none), result[0], result[1]},
                   s);
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["dropout_p"] = dropout_p;
    ctx->saved_data["seed"] = seed;
    return result;
  }

  // One gradient per forward argument: q, k, v, packed, edge (each where
  // given), then none for the structure and the three numbers.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &q = saved[0], &k = saved[1], &v = saved[2], &packed = saved[3],
                 &edge = saved[4], &out = saved[5], &lse = saved[6];
    const AttentionStructure s = saved_structure(ctx, saved, 7);
    variable_list result(9);
    {
      torch::NoGradGuard no_grad;  // once differentiable: nothing recorded here
      const variable_list f = features_of({q, k, v}, packed);
      auto [grad_packed, into] = gradient_slots(3, packed);
      variable_list g = transformer_backward(
          s.rowptr, s.col, s.rowptr_t, s.col_t, s.perm_t, f[0], f[1], f[2], optional_of(edge),
          ctx->saved_data["scale"].toDouble(), ctx->saved_data["dropout_p"].toDouble(),
          ctx->saved_data["seed"].toInt(), hubs_of(s), out, lse, grads[0].contiguous(),
          into[0], into[1], into[2]);
      for (int i = 0; i < 3; ++i) result[i] = saved[i].defined() ? g[i] : Tensor();
      result[3] = grad_packed;
      result[4] = edge.defined() ? g[3] : Tensor();
    }
    return once_differentiable(std::move(result), grads[0]);
  }
};

class Gatv2Function : public torch::autograd::Function<Gatv2Function> {
 public:
  static variable_list forward(AutogradContext* ctx, const OptionalTensor& x_l,
                               const OptionalTensor& x_r, const OptionalTensor& x_lr,
                               const Tensor& att, const OptionalTensor& edge,
                               const OptionalTensor& out_bias, const AttentionStructure& s,
                               double negative_slope, double dropout_p, int64_t seed) {
    const Tensor none;
    const variable_list f = features_of({x_l.value_or(none), x_r.value_or(none)},
                                        x_lr.value_or(none));
    variable_list result = gatv2(s.rowptr, s.col, f[0], f[1], edge, att, negative_slope,
                                 dropout_p, seed, optional_of(s.hub_degree), s.max_hubs,
                                 out_bias);
    ctx->mark_non_differentiable({result[1]});
    save_structure(ctx, {x_l.value_or(none), x_r.value_or(none), x_lr.value_or(none), att,
                         edge.value_or(none), result[1]},
                   s);
    ctx->saved_data["has_bias"] = out_bias.has_value();
    ctx->saved_data["negative_slope"] = negative_slope;
    ctx->saved_data["dropout_p"] = dropout_p;
    ctx->saved_data["seed"] = seed;
    return result;
  }

  // One gradient per forward argument: x_l, x_r, x_lr, att, edge, out_bias
  // (each where given), then none for the structure and the three numbers.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &x_l = saved[0], &x_r = saved[1], &x_lr = saved[2], &att = saved[3],
                 &edge = saved[4], &lse = saved[5];
    const AttentionStructure s = saved_structure(ctx, saved, 6);
    variable_list result(10);
    {
      torch::NoGradGuard no_grad;  // once differentiable: nothing recorded here
      const variable_list f = features_of({x_l, x_r}, x_lr);
      auto [grad_x_lr, into] = gradient_slots(2, x_lr);
      const Tensor grad_out = grads[0].contiguous();
      variable_list g = gatv2_backward(
          s.rowptr, s.col, s.rowptr_t, s.col_t, s.perm_t, f[0], f[1], optional_of(edge), att,
          ctx->saved_data["negative_slope"].toDouble(), ctx->saved_data["dropout_p"].toDouble(),
          ctx->saved_data["seed"].toInt(), hubs_of(s), lse, grad_out, into[0], into[1]);
      result[0] = x_l.defined() ? g[0] : Tensor();
      result[1] = x_r.defined() ? g[1] : Tensor();
      result[2] = grad_x_lr;
      result[3] = g[2];
      result[4] = edge.defined() ? g[3] : Tensor();
      if (ctx->saved_data["has_bias"].toBool()) {
        // Summed in fp32 over the rows (GATv2Function's column_sums).
        result[5] = column_sums(grad_out.view({grad_out.size(0), -1}), c10::kFloat)
                        .view(att.sizes());
      }
    }
    return once_differentiable(std::move(result), grads[0]);
  }
};

}  // namespace

std::vector<Tensor> transformer_autograd(const OptionalTensor& q, const OptionalTensor& k,
                                         const OptionalTensor& v, const OptionalTensor& packed,
                                         const OptionalTensor& edge, const py::tuple& structure,
                                         const py::object& transposed, double scale,
                                         double dropout_p, int64_t seed) {
  TORCH_CHECK(native.transformer != nullptr, "pyg_ioaware host extension: set_native first");
  TORCH_CHECK(packed.has_value() ? (packed->size(1) == 3 ? !q && !k && !v : q && !k && !v)
                                 : q && k && v,
              "pyg_ioaware transformer attention: q, k, v each given or the slots of packed");
  return TransformerFunction::apply(q, k, v, packed, edge,
                                    structure_from_python(structure, transposed), scale,
                                    dropout_p, seed);
}

std::vector<Tensor> gatv2_autograd(const OptionalTensor& x_l, const OptionalTensor& x_r,
                                   const OptionalTensor& x_lr, const Tensor& att,
                                   const OptionalTensor& edge, const OptionalTensor& out_bias,
                                   const py::tuple& structure, const py::object& transposed,
                                   double negative_slope, double dropout_p, int64_t seed) {
  TORCH_CHECK(native.gatv2 != nullptr, "pyg_ioaware host extension: set_native first");
  TORCH_CHECK(x_lr.has_value() ? !x_l && !x_r : x_l && x_r,
              "pyg_ioaware GATv2 attention: x_l and x_r each given or the slots of x_lr");
  TORCH_CHECK(att.scalar_type() == c10::kFloat &&
                  (!out_bias || out_bias->scalar_type() == c10::kFloat),
              "pyg_ioaware GATv2 attention: att and out_bias must be float32");
  return Gatv2Function::apply(x_l, x_r, x_lr, att, edge, out_bias,
                              structure_from_python(structure, transposed), negative_slope,
                              dropout_p, seed);
}

}  // namespace pygio_host
