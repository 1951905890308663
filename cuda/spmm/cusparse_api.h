// The part of cuSPARSE's generic API that SpMM uses, resolved at run time,
// and one cuSPARSE handle per device.
//
// Declared here rather than taken from cusparse.h so the native library
// builds with nothing but nvcc and the CUDA runtime: the process that loads
// it (torch with CUDA) already has libcusparse.so.12 loaded. Handles and
// descriptors are opaque pointers; the enum values are those of cuSPARSE 12's
// stable ABI (cusparse.h: cusparseStatus_t, cusparseOperation_t,
// cusparseIndexType_t, cusparseOrder_t; library_types.h: cudaDataType).
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include <mutex>

#include "../common/status.h"

namespace pygio::cusparse {

using Handle = void*;
using SpMatDescr = void*;
using DnMatDescr = void*;
using Status = int;

constexpr Status kSuccess = 0;
constexpr Status kNotSupported = 10;
constexpr int kOperationNonTranspose = 0;
constexpr int kOperationTranspose = 1;
constexpr int kIndexBaseZero = 0;
constexpr int kIndex32I = 2;
constexpr int kIndex64I = 3;
constexpr int kOrderRow = 2;
// cudaDataType values.
constexpr int kR32F = 0;
constexpr int kR64F = 1;
constexpr int kR16F = 2;
constexpr int kR16BF = 14;

// Function table filled by load().
struct Api {
  Status (*create)(Handle*);
  Status (*set_stream)(Handle, cudaStream_t);
  const char* (*get_error_string)(Status);
  Status (*create_csr)(SpMatDescr*, int64_t, int64_t, int64_t, void*, void*, void*, int, int,
                       int, int);
  Status (*csr_set_pointers)(SpMatDescr, void*, void*, void*);
  Status (*destroy_sp_mat)(SpMatDescr);
  Status (*create_dn_mat)(DnMatDescr*, int64_t, int64_t, int64_t, void*, int, int);
  Status (*dn_mat_set_values)(DnMatDescr, void*);
  Status (*destroy_dn_mat)(DnMatDescr);
  Status (*spmm_buffer_size)(Handle, int, int, const void*, SpMatDescr, DnMatDescr, const void*,
                             DnMatDescr, int, int, size_t*);
  Status (*spmm_preprocess)(Handle, int, int, const void*, SpMatDescr, DnMatDescr, const void*,
                            DnMatDescr, int, int, void*);
  Status (*spmm)(Handle, int, int, const void*, SpMatDescr, DnMatDescr, const void*, DnMatDescr,
                 int, int, void*);
};

// Loads libcusparse (already loaded copy first, then `path` or the default
// search) and resolves every symbol, once per process. Returns a pygio status.
int load(const char* path);

// The function table; load() must have succeeded.
const Api& api();

// A pygio status for cuSPARSE status `status` of the call `what`
// (PYGIO_ERR_UNSUPPORTED for CUSPARSE_STATUS_NOT_SUPPORTED).
int check(Status status, const char* what);

// A device's cuSPARSE handle, bound to a stream, held under that device's
// lock for the guard's lifetime: calls on one device are serialised while
// they bind and enqueue, calls on different devices never wait on each
// other. The handle is created on first use (cuSPARSE is loaded if needed).
class LockedHandle {
 public:
  // Locks `device`'s handle and binds `stream`; `device` must be current.
  int acquire(int device, cudaStream_t stream);
  Handle get() const { return handle_; }

 private:
  std::unique_lock<std::mutex> lock_;
  Handle handle_ = nullptr;
};

}  // namespace pygio::cusparse

// Returns from the enclosing function with a cuSPARSE failure.
#define PYGIO_CHECK_CUSPARSE(expr) PYGIO_TRY(::pygio::cusparse::check((expr), #expr))
