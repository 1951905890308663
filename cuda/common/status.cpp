#include "status.h"

namespace pygio {

thread_local std::string last_error;

int fail(int status, const std::string& message) {
  last_error = message;
  return status;
}

int ok() {
  last_error.clear();
  return PYGIO_OK;
}

int set_device(int device) {
  PYGIO_CHECK_ARG(device >= 0, "device index must be non-negative");
  PYGIO_CHECK_CUDA(cudaSetDevice(device));
  return PYGIO_OK;
}

}  // namespace pygio

extern "C" {

int pygio_abi_version(void) { return PYGIO_ABI_VERSION; }

const char* pygio_last_error(void) { return pygio::last_error.c_str(); }

}  // extern "C"
