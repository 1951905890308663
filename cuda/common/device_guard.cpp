#include "device_guard.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include "status.h"

namespace pygio {

namespace {

// The three driver calls the guard needs, resolved from libcuda (already
// loaded in any process that uses CUDA) so the library does not link it.
struct ContextApi {
  decltype(&cuCtxGetCurrent) get_current = nullptr;
  decltype(&cuCtxSetCurrent) set_current = nullptr;
  bool ready = false;
};

const ContextApi& context_api() {
  static const ContextApi api = [] {
    ContextApi resolved;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib == nullptr) return resolved;
    auto init = reinterpret_cast<decltype(&cuInit)>(dlsym(lib, "cuInit"));
    resolved.get_current =
        reinterpret_cast<decltype(&cuCtxGetCurrent)>(dlsym(lib, "cuCtxGetCurrent"));
    resolved.set_current =
        reinterpret_cast<decltype(&cuCtxSetCurrent)>(dlsym(lib, "cuCtxSetCurrent"));
    resolved.ready = init != nullptr && resolved.get_current != nullptr &&
                     resolved.set_current != nullptr && init(0) == CUDA_SUCCESS;
    return resolved;
  }();
  return api;
}

}  // namespace

int DeviceGuard::set(int device) {
  PYGIO_CHECK_ARG(device >= 0, "device index must be non-negative, got " +
                                   std::to_string(device));
  const ContextApi& api = context_api();
  if (!api.ready)
    return fail(PYGIO_ERR_CUDA, "the CUDA driver (libcuda.so.1) could not be loaded");
  if (api.get_current(&saved_) != CUDA_SUCCESS)
    return fail(PYGIO_ERR_CUDA, "cuCtxGetCurrent failed");
  restore_ = true;
  PYGIO_CHECK_CUDA(cudaSetDevice(device));
  return PYGIO_OK;
}

DeviceGuard::~DeviceGuard() {
  if (restore_) context_api().set_current(saved_);
}

}  // namespace pygio
