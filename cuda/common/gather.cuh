// Entry positions and gathered-row addresses for the gather loops of the
// SpMM, min/max and attention kernels, and the column indices of the first
// two.
//
// The SpMM and min/max loops take U entries a step (e0, e0 + stride, ...)
// and gather the feature row x[col[e]] of each: the gather depends on the
// index load, so a step that loads its own indices waits for two round
// trips to memory. The loops load the next step's indices (load_sources)
// right after issuing this step's gathers, so each step waits for one.
#pragma once

#include <stdint.h>

#include <type_traits>

namespace pygio {

// An entry position in a CSR: uint32_t for int32 indices (then nnz <
// 2^31, and a step's positions past the end fit too), else int64_t.
// 32-bit positions take one instruction where 64-bit ones take two
// (compares, adds, addresses).
template <typename index_t>
using EntryOffset = std::conditional_t<sizeof(index_t) == 4, uint32_t, int64_t>;

// src[u] = col[e0 + stride * u] for the entries before end, -1 past it
// (positions as EntryOffset, or int64_t).
template <int U, typename index_t, typename offset_t>
__device__ __forceinline__ void load_sources(const index_t* __restrict__ col, offset_t e0,
                                             offset_t end, offset_t stride, index_t (&src)[U]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const offset_t e = e0 + stride * u;
    src[u] = e < end ? col[e] : index_t(-1);
  }
}

// Asks L2 for the line holding p (no register, no wait).
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// Makes `p` opaque to the compiler, so that it stays in a register rather
// than being rebuilt from the kernel parameters at each use (a
// constant-bank load and its address arithmetic, which ptxas prefers to a
// register when registers are tight).
template <typename T>
__device__ __forceinline__ void pin_in_register(T*& p) {
  asm("" : "+l"(p));
}

// Row `src` (>= 0) of a matrix whose rows lie `row_bytes` apart, at the
// position `base` has in row 0. For int32 indices the offset is a 32 x
// 64-bit unsigned product (no sign extension, no 64 x 64-bit multiply).
template <typename T, typename index_t>
__device__ __forceinline__ const T* row_address(const T* base, index_t src, uint64_t row_bytes) {
  const uint64_t row = sizeof(index_t) == 4 ? static_cast<uint32_t>(src)
                                            : static_cast<uint64_t>(src);
  return reinterpret_cast<const T*>(reinterpret_cast<const char*>(base) + row * row_bytes);
}

}  // namespace pygio
