// Element-type traits for kernels: storage type per pygio_dtype, the
// accumulator type, and conversions. Kernels are templated on the storage
// type; DISPATCH_DTYPE turns the runtime code into that template argument.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "pyg_ioaware.h"
#include "status.h"

namespace pygio {

template <typename T>
struct DTypeTraits {
  using acc = float;
  __device__ static acc load(T v) { return static_cast<acc>(v); }
  __device__ static T store(acc v) { return static_cast<T>(v); }
};

template <>
struct DTypeTraits<double> {
  using acc = double;
  __device__ static acc load(double v) { return v; }
  __device__ static double store(acc v) { return v; }
};

template <>
struct DTypeTraits<__half> {
  using acc = float;
  __device__ static acc load(__half v) { return __half2float(v); }
  __device__ static __half store(acc v) { return __float2half(v); }
};

template <>
struct DTypeTraits<__nv_bfloat16> {
  using acc = float;
  // bf16 is the upper half of an fp32: a shift, exact.
  __device__ static acc load(__nv_bfloat16 v) {
    return __uint_as_float(static_cast<unsigned>(__bfloat16_as_ushort(v)) << 16);
  }
  __device__ static __nv_bfloat16 store(acc v) { return __float2bfloat16(v); }
};

}  // namespace pygio

// Calls BODY with `scalar_t` bound to the storage type of `code`;
// returns PYGIO_ERR_INVALID_ARGUMENT for an unknown code.
#define PYGIO_DISPATCH_DTYPE(code, ...)                                        \
  [&]() -> int {                                                               \
    switch (code) {                                                            \
      case PYGIO_FLOAT32: { using scalar_t = float; return __VA_ARGS__(); }    \
      case PYGIO_FLOAT64: { using scalar_t = double; return __VA_ARGS__(); }   \
      case PYGIO_FLOAT16: { using scalar_t = __half; return __VA_ARGS__(); }   \
      case PYGIO_BFLOAT16: { using scalar_t = __nv_bfloat16; return __VA_ARGS__(); } \
      default: return ::pygio::fail(PYGIO_ERR_INVALID_ARGUMENT, "unknown dtype code"); \
    }                                                                          \
  }()

// Calls BODY with `index_t` bound to int32_t or int64_t by `bits`.
#define PYGIO_DISPATCH_INDEX(bits, ...)                                        \
  [&]() -> int {                                                               \
    switch (bits) {                                                            \
      case 32: { using index_t = int32_t; return __VA_ARGS__(); }              \
      case 64: { using index_t = int64_t; return __VA_ARGS__(); }              \
      default: return ::pygio::fail(PYGIO_ERR_INVALID_ARGUMENT, "index_bits must be 32 or 64"); \
    }                                                                          \
  }()
