// The host extension module pyg_ioaware._native_host_ext: the native
// library's host side in C++ where Python's costs more than the kernels
// (see spmm_autograd.h, graph_build.h, spmm_launch.h, minmax_launch.h).
// Built against the torch it runs with.
#include <torch/extension.h>

#include "graph_build.h"
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
  m.attr("HOST_API_VERSION") = 2;
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
         const OptionalTensor& col_t, const torch::Tensor& x, const torch::Tensor& out,
         const torch::Tensor& arg, const torch::Tensor& grad_out, int64_t reduce,
         const OptionalTensor& hub_degree, int64_t max_hubs, const torch::Tensor& grad_x) {
        pygio_host::minmax_backward(rowptr, col, rowptr_t.value_or(torch::Tensor()),
                                    col_t.value_or(torch::Tensor()), x, out, arg, grad_out,
                                    reduce, hub_degree.value_or(torch::Tensor()), max_hubs,
                                    grad_x);
      },
      "pygio_minmax_backward");
  m.def("spmm", &spmm_autograd, "Y = A X + b with its backward in C++", py::arg("x"),
        py::arg("bias"), py::arg("a"), py::arg("a_t"), py::arg("num_cols"),
        py::arg("materialize_work"), py::arg("deterministic"), py::arg("fallback"));
  py::class_<EdgeStatsRead>(m, "EdgeStatsRead",
                            "pygio_edge_index_stats enqueued, its values on their way")
      .def(py::init<const torch::Tensor&>())
      .def("read", &EdgeStatsRead::read, "the values (waits for their copy)");
  m.def("edge_index_stats", &edge_index_stats, "pygio_edge_index_stats, read back");
  m.def("csr_from_grouped", &csr_from_grouped, "pygio_csr_from_grouped");
  m.def("csr_add_self_loops", &csr_add_self_loops, "pygio_csr_add_self_loops");
  m.def("gcn_norm", &gcn_norm, "pygio_gcn_norm");
  m.def("mean_norm", &mean_norm, "pygio_mean_norm");
}
