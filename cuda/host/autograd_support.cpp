#include "autograd_support.h"

#include <torch/csrc/autograd/functions/basic_ops.h>

namespace pygio_host {
namespace {

// A Python object kept in an autograd context's saved_data.
struct PythonObject : torch::CustomClassHolder {
  explicit PythonObject(py::object object) : object(std::move(object)) {}
  ~PythonObject() override {
    py::gil_scoped_acquire gil;
    object = py::object();
  }
  py::object object;
};

}  // namespace

c10::IValue hold(const py::object& object) {
  return c10::IValue::make_capsule(c10::make_intrusive<PythonObject>(object));
}

py::object python_object(const c10::IValue& value) {
  return static_cast<PythonObject*>(value.toCapsule().get())->object;
}

torch::autograd::variable_list once_differentiable(torch::autograd::variable_list grads,
                                                   const torch::Tensor& incoming) {
  if (!torch::GradMode::is_enabled() || !incoming.requires_grad()) return grads;
  for (torch::Tensor& g : grads) {
    if (g.defined()) g = g.detach().requires_grad_(true);
  }
  auto error = std::make_shared<torch::autograd::DelayedError>(
      "trying to differentiate twice a function that was marked with @once_differentiable",
      static_cast<int64_t>(grads.size()));
  return error->apply(std::move(grads));
}

torch::Tensor in_compute_dtype(const torch::Tensor& t, std::optional<c10::ScalarType> dtype) {
  return dtype && t.defined() ? t.to(*dtype) : t;
}

torch::Tensor product(const torch::Tensor& a, const torch::Tensor& b, c10::ScalarType want) {
  if (a.scalar_type() == want) return a.mm(b);
  return torch::GradMode::is_enabled() ? a.mm(b).to(want) : at::mm(a, b, want);
}

}  // namespace pygio_host
