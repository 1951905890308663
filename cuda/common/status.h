// Error reporting shared by every entry point: a thread-local message and
// macros that turn CUDA / argument failures into a pygio_status.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "pyg_ioaware.h"

namespace pygio {

// Records `message` as this thread's last error and returns `status`.
int fail(int status, const std::string& message);

// Clears this thread's last error and returns PYGIO_OK.
int ok();

// Makes `device` current for the library's CUDA runtime. The runtime is
// linked statically, so its current device is separate from torch's and is
// set explicitly on every entry.
int set_device(int device);

}  // namespace pygio

#define PYGIO_CHECK_ARG(cond, msg)                                   \
  do {                                                               \
    if (!(cond)) return ::pygio::fail(PYGIO_ERR_INVALID_ARGUMENT, msg); \
  } while (0)

#define PYGIO_CHECK_CUDA(expr)                                                      \
  do {                                                                              \
    cudaError_t pygio_err_ = (expr);                                                \
    if (pygio_err_ != cudaSuccess)                                                  \
      return ::pygio::fail(PYGIO_ERR_CUDA, std::string(#expr) + ": " +              \
                                               cudaGetErrorString(pygio_err_));     \
  } while (0)
