// Vectorized loads and stores of N consecutive elements (N * sizeof(T) of
// 4, 8 or 16 bytes, or one element), converted to and from the accumulator
// type. Callers guarantee alignment to N * sizeof(T).
#pragma once

#include "dtype.cuh"

namespace pygio {

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// acc[i] += scale * p[i] for i < N.
template <int N, typename T, typename acc_t>
__device__ __forceinline__ void fma_pack(const T* __restrict__ p, acc_t scale, acc_t (&acc)[N]) {
  const Pack<T, N> pack = *reinterpret_cast<const Pack<T, N>*>(p);
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] += scale * DTypeTraits<T>::load(pack.v[i]);
}

// p[i] = acc[i] (converted to T) for i < N.
template <int N, typename T, typename acc_t>
__device__ __forceinline__ void store_pack(T* __restrict__ p, const acc_t (&acc)[N]) {
  Pack<T, N> pack;
#pragma unroll
  for (int i = 0; i < N; ++i) pack.v[i] = DTypeTraits<T>::store(acc[i]);
  *reinterpret_cast<Pack<T, N>*>(p) = pack;
}

}  // namespace pygio

namespace pygio {

// p[i] += v[i] for i < N with atomics: 16- or 8-byte vector atomics for
// float on sm_90 and newer (p aligned to them), else one per element.
template <int N, typename acc_t>
__device__ __forceinline__ void atomic_add_pack(acc_t* p, const acc_t (&v)[N]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (sizeof(acc_t) == 4 && N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 4)
      atomicAdd(reinterpret_cast<float4*>(p + i), make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]));
    return;
  } else if constexpr (sizeof(acc_t) == 4 && N % 2 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 2)
      atomicAdd(reinterpret_cast<float2*>(p + i), make_float2(v[i], v[i + 1]));
    return;
  }
#endif
#pragma unroll
  for (int i = 0; i < N; ++i) atomicAdd(p + i, v[i]);
}

}  // namespace pygio
