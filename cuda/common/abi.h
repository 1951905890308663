// Checks every entry applies to its params struct before using it: the
// struct's size (the ABI handshake), the CSR structure, the dtype code and
// row strides. None of them touches the device.
#pragma once

#include <stdint.h>

#include <string>

#include "pyg_ioaware.h"
#include "status.h"

namespace pygio {

// "entry: message", the form of every error an entry reports.
std::string entry_message(const char* entry, const std::string& message);

// Records the error for a params struct of the wrong size.
int struct_size_mismatch(const char* entry, int64_t caller_size, size_t library_size);

// Fails unless params is non-NULL and params->struct_size == sizeof(Params),
// naming `entry` and both sizes; reads no other field.
template <typename Params>
int check_params(const Params* params, const char* entry) {
  if (params == nullptr)
    return fail(PYGIO_ERR_INVALID_ARGUMENT, std::string(entry) + ": params is NULL");
  if (params->struct_size != static_cast<int64_t>(sizeof(Params)))
    return struct_size_mismatch(entry, params->struct_size, sizeof(Params));
  return PYGIO_OK;
}

// Sizes >= 0 and consistent, index_bits 32 or 64, rowptr / col non-NULL
// where nnz > 0.
int check_csr(const pygio_csr& a, const char* entry);

// A known pygio_dtype code.
int check_dtype(int32_t dtype, const char* entry);

// A row-major matrix `name` of `width` columns: row_stride >= width.
int check_row_stride(int64_t row_stride, int64_t width, const char* name, const char* entry);

}  // namespace pygio
