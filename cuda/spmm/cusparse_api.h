// The part of cuSPARSE's generic API that SpMM uses, resolved at run time.
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
// search) and resolves every symbol. Returns PYGIO_OK or records an error.
int load(const char* path);

// The function table; load() must have succeeded.
const Api& api();

// One cuSPARSE handle per device, created on first use (device current).
int handle_for_device(int device, Handle* out);

}  // namespace pygio::cusparse

#define PYGIO_CHECK_CUSPARSE(expr)                                                    \
  do {                                                                                \
    ::pygio::cusparse::Status pygio_st_ = (expr);                                     \
    if (pygio_st_ != ::pygio::cusparse::kSuccess)                                     \
      return ::pygio::fail(pygio_st_ == ::pygio::cusparse::kNotSupported              \
                               ? PYGIO_ERR_UNSUPPORTED                                \
                               : PYGIO_ERR_CUSPARSE,                                  \
                           std::string(#expr) + ": " +                                \
                               ::pygio::cusparse::api().get_error_string(pygio_st_)); \
  } while (0)
