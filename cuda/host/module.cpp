// The host extension module pyg_ioaware._native_host_ext: the native
// library's host side in C++ where Python's costs more than the kernels
// (see spmm_autograd.h, aggregate_linear_autograd.h, minmax_autograd.h,
// attention_autograd.h, linear_autograd.h, graph_build.h, spmm_launch.h,
// minmax_launch.h, attention_launch.h).
// Built against the torch it runs with.
#include <torch/extension.h>

#include "aggregate_linear_autograd.h"
#include "attention_autograd.h"
#include "attention_launch.h"
#include "graph_build.h"
#include "linear_autograd.h"
#include "minmax_autograd.h"
#include "minmax_launch.h"
#include "native_api.h"
#include "spmm_autograd.h"
#include "spmm_launch.h"

PYBIND11_MODULE(_native_host_ext, m) {
  using namespace pygio_host;
  using OptionalTensor = c10::optional<torch::Tensor>;
  m.doc() = "pyg_ioaware's host side in C++ (cuda/host)";
  m.attr("TORCH_VERSION") = TORCH_VERSION;
  m.attr("ABI_VERSION") = PYGIO_ABI_VERSION;
  // What this module's functions take and return; pyg_ioaware._native_host
  // loads only the version it was written for.
  m.attr("HOST_API_VERSION") = 16;
  m.def("set_native", &set_native, "the native library's entry points: {name: address}");
  m.def(
      "spmm_csr",
      [](const torch::Tensor& rowptr, const torch::Tensor& col, const torch::Tensor& values,
         const torch::Tensor& x, const OptionalTensor& bias,
         const torch::Tensor& out, bool transpose, bool deterministic, int64_t degree_bound) {
        spmm_into(rowptr, col, values, x, bias.value_or(torch::Tensor()), out, transpose,
                  deterministic, degree_bound);
      },
      "pygio_spmm_csr into out");
  m.def(
      "minmax",
      [](const torch::Tensor& rowptr, const torch::Tensor& col, const torch::Tensor& x,
         int64_t reduce, const OptionalTensor& hub_degree, int64_t max_hubs,
         const torch::Tensor& out, const OptionalTensor& arg) {
        pygio_host::minmax(rowptr, col, x, reduce, hub_degree.value_or(torch::Tensor()),
                           max_hubs, out, arg.value_or(torch::Tensor()));
      },
      "pygio_minmax");
  m.def(
      "minmax_backward",
      [](const torch::Tensor& rowptr, const torch::Tensor& col, const OptionalTensor& rowptr_t,
         const OptionalTensor& col_t, const OptionalTensor& perm_t, const torch::Tensor& x,
         const torch::Tensor& out, const torch::Tensor& arg, const torch::Tensor& grad_out,
         int64_t reduce, const OptionalTensor& hub_degree, int64_t max_hubs,
         const torch::Tensor& grad_x, int64_t path) {
        pygio_host::minmax_backward(rowptr, col, rowptr_t.value_or(torch::Tensor()),
                                    col_t.value_or(torch::Tensor()),
                                    perm_t.value_or(torch::Tensor()), x, out, arg, grad_out,
                                    reduce, hub_degree.value_or(torch::Tensor()), max_hubs,
                                    grad_x, path);
      },
      "pygio_minmax_backward");
  m.def("gatv2", &pygio_host::gatv2, "pygio_gatv2: [out, lse]");
  m.def(
      "gatv2_backward",
      [](const torch::Tensor& rowptr, const torch::Tensor& col, const torch::Tensor& rowptr_t,
         const torch::Tensor& col_t, const torch::Tensor& perm_t, const torch::Tensor& x_l,
         const torch::Tensor& x_r, const OptionalTensor& edge, const torch::Tensor& att,
         double negative_slope, double dropout_p, int64_t seed, const OptionalTensor& hub_degree,
         int64_t max_hubs, const OptionalTensor& hub_degree_t, int64_t max_hubs_t,
         const torch::Tensor& lse, const torch::Tensor& grad_out,
         const OptionalTensor& into_x_l, const OptionalTensor& into_x_r) {
        return pygio_host::gatv2_backward(
            rowptr, col, rowptr_t, col_t, perm_t, x_l, x_r, edge, att, negative_slope,
            dropout_p, seed, Hubs{hub_degree, max_hubs, hub_degree_t, max_hubs_t}, lse,
            grad_out, into_x_l, into_x_r);
      },
      "pygio_gatv2_backward: [grad_x_l, grad_x_r, grad_att, grad_edge]");
  m.def("transformer", &pygio_host::transformer, "pygio_transformer: [out, lse]");
  m.def(
      "transformer_backward",
      [](const torch::Tensor& rowptr, const torch::Tensor& col, const torch::Tensor& rowptr_t,
         const torch::Tensor& col_t, const torch::Tensor& perm_t, const torch::Tensor& q,
         const torch::Tensor& k, const torch::Tensor& v, const OptionalTensor& edge,
         double scale, double dropout_p, int64_t seed, const OptionalTensor& hub_degree,
         int64_t max_hubs, const OptionalTensor& hub_degree_t, int64_t max_hubs_t,
         const torch::Tensor& out, const torch::Tensor& lse, const torch::Tensor& grad_out,
         const OptionalTensor& into_q, const OptionalTensor& into_k,
         const OptionalTensor& into_v) {
        return pygio_host::transformer_backward(
            rowptr, col, rowptr_t, col_t, perm_t, q, k, v, edge, scale, dropout_p, seed,
            Hubs{hub_degree, max_hubs, hub_degree_t, max_hubs_t}, out, lse, grad_out, into_q,
            into_k, into_v);
      },
      "pygio_transformer_backward: [grad_q, grad_k, grad_v, grad_edge]");
  m.def("spmm", &spmm_autograd, "Y = A X + b with its backward in C++", py::arg("x"),
        py::arg("bias"), py::arg("a"), py::arg("a_t"), py::arg("num_cols"),
        py::arg("materialize_work"), py::arg("cast_grad_first_degree"),
        py::arg("deterministic"), py::arg("fallback"));
  m.def("aggregate_linear", &aggregate_linear_autograd,
        "(A x_src) w_agg^T + x_root w_root^T + b as one autograd node in C++",
        py::arg("x_src"), py::arg("x_root"), py::arg("w_agg"), py::arg("w_root"),
        py::arg("bias"), py::arg("a"), py::arg("a_t"), py::arg("num_cols"),
        py::arg("materialize_work"), py::arg("cast_grad_first_degree"),
        py::arg("deterministic"), py::arg("fallback"), py::arg("recompute"),
        py::arg("dtype"));
  m.def("minmax_linear", &minmax_linear_autograd,
        "min / max(x_src) w_agg^T + x_root w_root^T + b as one autograd node in C++",
        py::arg("x_src"), py::arg("x_root"), py::arg("w_agg"), py::arg("w_root"),
        py::arg("bias"), py::arg("rowptr"), py::arg("col"), py::arg("reduce"),
        py::arg("hub_degree"), py::arg("max_hubs"), py::arg("backward_hub_degree"),
        py::arg("backward_max_hubs"), py::arg("arg_bytes"), py::arg("graph"),
        py::arg("backward_path"), py::arg("recompute"), py::arg("dtype"));
  m.def("minmax_aggregate", &minmax_autograd,
        "neighbour min / max with its backward in C++", py::arg("x"), py::arg("rowptr"),
        py::arg("col"), py::arg("reduce"), py::arg("hub_degree"), py::arg("max_hubs"),
        py::arg("backward_hub_degree"), py::arg("backward_max_hubs"), py::arg("arg_bytes"),
        py::arg("graph"), py::arg("backward_path"));
  m.def("transformer_attention", &transformer_autograd,
        "graph-transformer attention [out, lse] with its backward in C++", py::arg("q"),
        py::arg("k"), py::arg("v"), py::arg("packed"), py::arg("edge"), py::arg("structure"),
        py::arg("transposed"), py::arg("scale"), py::arg("dropout_p"), py::arg("seed"));
  m.def("gatv2_attention", &gatv2_autograd,
        "GATv2 attention [out, lse] with its backward in C++", py::arg("x_l"), py::arg("x_r"),
        py::arg("x_lr"), py::arg("att"), py::arg("edge"), py::arg("out_bias"),
        py::arg("structure"), py::arg("transposed"), py::arg("negative_slope"),
        py::arg("dropout_p"), py::arg("seed"));
  py::class_<EdgeStatsRead>(m, "EdgeStatsRead",
                            "pygio_edge_index_stats enqueued, its values on their way")
      .def(py::init<const torch::Tensor&, int64_t, c10::ScalarType, bool>(),
           py::arg("edge_index"), py::arg("num_rows") = -1,
           py::arg("index_dtype") = torch::kInt, py::arg("entries") = true)
      .def("read", &EdgeStatsRead::read, "the values (waits for the kernel)")
      .def("csr", &EdgeStatsRead::csr, "the CSR the same launch wrote, where asked");
  m.def("fused_linear", &fused_linear_autograd,
        "x [W_1; ...; W_k]^T + [b_1; ...; b_k] (or into += x W^T) as one autograd node, "
        "in dtype where given (autocast's)",
        py::arg("x"), py::arg("weights"), py::arg("biases"), py::arg("into") = py::none(),
        py::arg("dtype") = py::none());
  m.def("edge_index_stats", &edge_index_stats, "pygio_edge_index_stats, read back");
  m.def("grouped_graph", &grouped_graph,
        "a new graph's statistics, CSR and optionally self-loop graph in one call");
  m.def("csr_from_grouped", &csr_from_grouped, "pygio_csr_from_grouped");
  m.def("csr_add_self_loops", &csr_add_self_loops, "pygio_csr_add_self_loops");
  m.def("csr_pyg_self_loops", &csr_pyg_self_loops, "pygio_csr_pyg_self_loops");
  m.def("csr_transpose", &csr_transpose, "pygio_csr_transpose");
  m.def("gcn_norm", &gcn_norm, "pygio_gcn_norm");
  m.def("mean_norm", &mean_norm, "pygio_mean_norm");
}
