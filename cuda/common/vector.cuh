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
