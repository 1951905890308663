#include "attention_launch.h"

#include "native_api.h"

namespace pygio_host {

namespace {
// The fields pygio_gatv2_params and pygio_gatv2_backward_params share.
template <typename Params>
Params gatv2_inputs(const torch::Tensor& rowptr, const torch::Tensor& col,
                    const torch::Tensor& x_l, const torch::Tensor& x_r,
                    const OptionalTensor& edge, const torch::Tensor& att, double negative_slope,
                    double dropout_p, int64_t seed) {
  Params p{};
  p.struct_size = sizeof(p);
  p.dtype = dtype_code(x_l.scalar_type());
  p.device = x_l.get_device();
  p.a = csr_of(rowptr, col, x_l.size(0));
  p.heads = x_l.size(1);
  p.channels = x_l.size(2);
  p.x_l = x_l.data_ptr();
  p.x_l_row_stride = node_row_stride(x_l);
  p.x_r = x_r.data_ptr();
  p.x_r_row_stride = node_row_stride(x_r);
  p.edge = data_or_null(edge);
  p.att = att.data_ptr<float>();
  p.negative_slope = static_cast<float>(negative_slope);
  p.dropout_p = static_cast<float>(dropout_p);
  p.seed = static_cast<uint64_t>(seed);  // the ABI's seed: the same 64 bits
  p.stream = current_stream(x_l);
  return p;
}

// The fields pygio_transformer_params and pygio_transformer_backward_params share.
template <typename Params>
Params transformer_inputs(const torch::Tensor& rowptr, const torch::Tensor& col,
                          const torch::Tensor& q, const torch::Tensor& k,
                          const torch::Tensor& v, const OptionalTensor& edge, double scale,
                          double dropout_p, int64_t seed) {
  Params p{};
  p.struct_size = sizeof(p);
  p.dtype = dtype_code(q.scalar_type());
  p.device = q.get_device();
  p.a = csr_of(rowptr, col, k.size(0));
  p.heads = q.size(1);
  p.channels = q.size(2);
  p.q = q.data_ptr();
  p.q_row_stride = node_row_stride(q);
  p.k = k.data_ptr();
  p.k_row_stride = node_row_stride(k);
  p.v = v.data_ptr();
  p.v_row_stride = node_row_stride(v);
  p.edge = data_or_null(edge);
  p.scale = static_cast<float>(scale);
  p.dropout_p = static_cast<float>(dropout_p);
  p.seed = static_cast<uint64_t>(seed);
  p.stream = current_stream(q);
  return p;
}

// A node gradient: `into` where given (a slot of a packed gradient), else a
// fresh contiguous tensor of like's shape and dtype.
torch::Tensor node_tensor(const OptionalTensor& into, const torch::Tensor& like) {
  return into.has_value() ? *into : torch::empty(like.sizes(), like.options());
}

// The edge features' gradient: of edge's shape, or empty (in like's dtype)
// without edge features.
torch::Tensor edge_gradient(const OptionalTensor& edge, const torch::Tensor& like) {
  return edge.has_value() ? torch::empty(edge->sizes(), edge->options())
                          : torch::empty({0}, like.options());
}

// The hub fields of a backward: the structure's and its transpose's.
template <typename Params>
void set_backward_hubs(Params& p, const Hubs& hubs) {
  p.hub_degree = static_cast<const int64_t*>(data_or_null(hubs.degree));
  p.max_hubs = hubs.max_hubs;
  p.hub_degree_t = static_cast<const int64_t*>(data_or_null(hubs.degree_t));
  p.max_hubs_t = hubs.max_hubs_t;
}
}  // namespace

std::vector<torch::Tensor> gatv2(const torch::Tensor& rowptr, const torch::Tensor& col,
                                 const torch::Tensor& x_l, const torch::Tensor& x_r,
                                 const OptionalTensor& edge, const torch::Tensor& att,
                                 double negative_slope, double dropout_p, int64_t seed,
                                 const OptionalTensor& hub_degree, int64_t max_hubs,
                                 const OptionalTensor& out_bias) {
  auto p = gatv2_inputs<pygio_gatv2_params>(rowptr, col, x_l, x_r, edge, att, negative_slope,
                                            dropout_p, seed);
  const torch::Tensor out = torch::empty({p.a.num_rows, p.heads, p.channels}, x_l.options());
  const torch::Tensor lse = torch::empty({p.a.num_rows, p.heads}, x_l.options().dtype(c10::kFloat));
  p.hub_degree = static_cast<const int64_t*>(data_or_null(hub_degree));
  p.max_hubs = max_hubs;
  p.out_bias = static_cast<const float*>(data_or_null(out_bias));
  p.out = out.data_ptr();
  p.lse = lse.data_ptr<float>();
  launch_with_workspace(native.gatv2_workspace_size, native.gatv2, p, x_l, "pygio_gatv2");
  return {out, lse};
}

std::vector<torch::Tensor> gatv2_backward(
    const torch::Tensor& rowptr, const torch::Tensor& col, const torch::Tensor& rowptr_t,
    const torch::Tensor& col_t, const torch::Tensor& perm_t, const torch::Tensor& x_l,
    const torch::Tensor& x_r, const OptionalTensor& edge, const torch::Tensor& att,
    double negative_slope, double dropout_p, int64_t seed, const Hubs& hubs,
    const torch::Tensor& lse, const torch::Tensor& grad_out, const OptionalTensor& into_x_l,
    const OptionalTensor& into_x_r) {
  auto p = gatv2_inputs<pygio_gatv2_backward_params>(rowptr, col, x_l, x_r, edge, att,
                                                     negative_slope, dropout_p, seed);
  const torch::Tensor grad_x_l = node_tensor(into_x_l, x_l);
  const torch::Tensor grad_x_r = node_tensor(into_x_r, x_r);
  const torch::Tensor grad_att = torch::empty(att.sizes(), att.options());
  const torch::Tensor grad_edge = edge_gradient(edge, x_l);
  p.a_t = csr_of(rowptr_t, col_t, rowptr.numel() - 1);
  p.perm_t = perm_t.data_ptr();
  set_backward_hubs(p, hubs);
  p.lse = lse.data_ptr<float>();
  p.grad_out = grad_out.data_ptr();
  p.grad_x_l = grad_x_l.data_ptr();
  p.grad_x_l_row_stride = node_row_stride(grad_x_l);
  p.grad_x_r = grad_x_r.data_ptr();
  p.grad_x_r_row_stride = node_row_stride(grad_x_r);
  p.grad_att = grad_att.data_ptr<float>();
  p.grad_edge = edge.has_value() ? grad_edge.data_ptr() : nullptr;
  launch_with_workspace(native.gatv2_backward_workspace_size, native.gatv2_backward, p, x_l,
                        "pygio_gatv2_backward");
  return {grad_x_l, grad_x_r, grad_att, grad_edge};
}

std::vector<torch::Tensor> transformer(const torch::Tensor& rowptr, const torch::Tensor& col,
                                       const torch::Tensor& q, const torch::Tensor& k,
                                       const torch::Tensor& v, const OptionalTensor& edge,
                                       double scale, double dropout_p, int64_t seed,
                                       const OptionalTensor& hub_degree, int64_t max_hubs) {
  auto p = transformer_inputs<pygio_transformer_params>(rowptr, col, q, k, v, edge, scale,
                                                        dropout_p, seed);
  const torch::Tensor out = torch::empty({p.a.num_rows, p.heads, p.channels}, q.options());
  const torch::Tensor lse = torch::empty({p.a.num_rows, p.heads}, q.options().dtype(c10::kFloat));
  p.hub_degree = static_cast<const int64_t*>(data_or_null(hub_degree));
  p.max_hubs = max_hubs;
  p.out = out.data_ptr();
  p.lse = lse.data_ptr<float>();
  launch_with_workspace(native.transformer_workspace_size, native.transformer, p, q,
                        "pygio_transformer");
  return {out, lse};
}

std::vector<torch::Tensor> transformer_backward(
    const torch::Tensor& rowptr, const torch::Tensor& col, const torch::Tensor& rowptr_t,
    const torch::Tensor& col_t, const torch::Tensor& perm_t, const torch::Tensor& q,
    const torch::Tensor& k, const torch::Tensor& v, const OptionalTensor& edge, double scale,
    double dropout_p, int64_t seed, const Hubs& hubs, const torch::Tensor& out,
    const torch::Tensor& lse, const torch::Tensor& grad_out, const OptionalTensor& into_q,
    const OptionalTensor& into_k, const OptionalTensor& into_v) {
  auto p = transformer_inputs<pygio_transformer_backward_params>(rowptr, col, q, k, v, edge,
                                                                 scale, dropout_p, seed);
  const torch::Tensor grad_q = node_tensor(into_q, q);
  const torch::Tensor grad_k = node_tensor(into_k, k);
  const torch::Tensor grad_v = node_tensor(into_v, v);
  const torch::Tensor grad_edge = edge_gradient(edge, q);
  p.a_t = csr_of(rowptr_t, col_t, rowptr.numel() - 1);
  p.perm_t = perm_t.data_ptr();
  set_backward_hubs(p, hubs);
  p.out = out.data_ptr();
  p.lse = lse.data_ptr<float>();
  p.grad_out = grad_out.data_ptr();
  p.grad_q = grad_q.data_ptr();
  p.grad_q_row_stride = node_row_stride(grad_q);
  p.grad_k = grad_k.data_ptr();
  p.grad_k_row_stride = node_row_stride(grad_k);
  p.grad_v = grad_v.data_ptr();
  p.grad_v_row_stride = node_row_stride(grad_v);
  p.grad_edge = edge.has_value() ? grad_edge.data_ptr() : nullptr;
  launch_with_workspace(native.transformer_backward_workspace_size,
                        native.transformer_backward, p, q, "pygio_transformer_backward");
  return {grad_q, grad_k, grad_v, grad_edge};
}

}  // namespace pygio_host
