// Error reporting shared by every entry point: a thread-local message and
// macros that turn argument and CUDA failures into a pygio_status.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "pyg_ioaware.h"

namespace pygio {

// Records `message` as this thread's last error and returns `status`.
int fail(int status, const std::string& message);

// Clears this thread's last error and returns PYGIO_OK.
int ok();

}  // namespace pygio

// Returns from the enclosing function with `msg` unless `cond` holds.
#define PYGIO_CHECK_ARG(cond, msg)                                      \
  do {                                                                  \
    if (!(cond)) return ::pygio::fail(PYGIO_ERR_INVALID_ARGUMENT, msg); \
  } while (0)

// Returns from the enclosing function with a CUDA runtime failure.
#define PYGIO_CHECK_CUDA(expr)                                                  \
  do {                                                                          \
    cudaError_t pygio_err_ = (expr);                                            \
    if (pygio_err_ != cudaSuccess)                                              \
      return ::pygio::fail(PYGIO_ERR_CUDA, std::string(#expr) + ": " +          \
                                               cudaGetErrorString(pygio_err_)); \
  } while (0)

// Returns the status of `expr` from the enclosing function unless it is PYGIO_OK.
#define PYGIO_TRY(expr)                                \
  do {                                                 \
    int pygio_status_ = (expr);                        \
    if (pygio_status_ != PYGIO_OK) return pygio_status_; \
  } while (0)
