// The host extension module pyg_ioaware._native_host_ext: the native
// library's host side in C++ where Python's costs more than the kernels
// (see spmm_autograd.h, graph_build.h). Built against the torch it runs with.
#include <torch/extension.h>

#include "graph_build.h"
#include "native_api.h"
#include "spmm_autograd.h"

PYBIND11_MODULE(_native_host_ext, m) {
  using namespace pygio_host;
  m.doc() = "pyg_ioaware's host side in C++ (cuda/host)";
  m.attr("TORCH_VERSION") = TORCH_VERSION;
  m.attr("ABI_VERSION") = PYGIO_ABI_VERSION;
  // What this module's functions take and return; pyg_ioaware._native_host
  // loads only the version it was written for.
  m.attr("HOST_API_VERSION") = 2;
  m.def("set_native", &set_native, "the native library's entry points: {name: address}");
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
