// Vectorized loads and stores of N consecutive elements (N * sizeof(T) of
// 4, 8 or 16 bytes, or one element), converted to and from the accumulator
// type. Callers guarantee alignment to N * sizeof(T).
#pragma once

#include <type_traits>

#include "dtype.cuh"

namespace pygio {

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// An unsigned integer type of `bytes` bytes (1, 2, 4, 8 or 16).
template <int bytes> struct RawBits;
template <> struct RawBits<1> { using type = unsigned char; };
template <> struct RawBits<2> { using type = unsigned short; };
template <> struct RawBits<4> { using type = unsigned; };
template <> struct RawBits<8> { using type = uint2; };
template <> struct RawBits<16> { using type = uint4; };

// One vector load of N elements at p, whatever T's copy semantics.
template <int N, typename T>
__device__ __forceinline__ Pack<T, N> load_pack(const T* __restrict__ p) {
  using raw_t = typename RawBits<sizeof(T) * N>::type;
  const raw_t raw = *reinterpret_cast<const raw_t*>(p);
  Pack<T, N> pack;
  memcpy(&pack, &raw, sizeof(raw));
  return pack;
}

// out[i] = pack[i] widened to the accumulator type. bf16 pairs are widened
// from their 32-bit words (a shift and a mask each), never split into
// 16-bit registers first: that held a register per element.
template <typename T, int N, typename acc_t>
__device__ __forceinline__ void widen_pack(const Pack<T, N>& pack, acc_t (&out)[N]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16> && N % 2 == 0) {
    unsigned words[N / 2];
    memcpy(words, &pack, sizeof(words));
#pragma unroll
    for (int w = 0; w < N / 2; ++w) {
      out[2 * w] = __uint_as_float(words[w] << 16);
      out[2 * w + 1] = __uint_as_float(words[w] & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = DTypeTraits<T>::load(pack.v[i]);
  }
}

// One store of `raw` at p; kStreaming marks it evict-first (st.global.cs):
// a result nobody reads soon then does not push reused input lines out of
// L2.
template <bool kStreaming, typename raw_t>
__device__ __forceinline__ void store_raw(raw_t* p, raw_t raw) {
  if constexpr (kStreaming) __stcs(p, raw);
  else *p = raw;
}

// p[i] = acc[i] (converted to T) for i < N: one vector store, or 16-byte
// stores where N elements of T are wider (8 float32 results of a 16-bit
// row's 16-byte loads), so p needs alignment to min(16, N * sizeof(T)).
// kStreaming: evict-first stores (store_raw).
template <int N, bool kStreaming = false, typename T, typename acc_t>
__device__ __forceinline__ void store_pack(T* __restrict__ p, const acc_t (&acc)[N]) {
  constexpr int kChunk = sizeof(T) * N > 16 ? static_cast<int>(16 / sizeof(T)) : N;
#pragma unroll
  for (int c = 0; c < N; c += kChunk) {
    Pack<T, kChunk> pack;
#pragma unroll
    for (int i = 0; i < kChunk; ++i) pack.v[i] = DTypeTraits<T>::store(acc[c + i]);
    typename RawBits<sizeof(T) * kChunk>::type raw;
    memcpy(&raw, &pack, sizeof(raw));
    store_raw<kStreaming>(reinterpret_cast<decltype(raw)*>(p + c), raw);
  }
}

}  // namespace pygio

namespace pygio {

// Whether atomic_add_pack can use w-element vector atomics here.
template <typename acc_t, int N, int w>
__device__ constexpr bool vector_atomics() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return sizeof(acc_t) == 4 && N % w == 0;
#else
  return false;
#endif
}

// p[i] += v[i] for i < N with atomics: 16- or 8-byte vector atomics for
// float on sm_90 and newer (p aligned to them), else one per element.
template <int N, typename acc_t>
__device__ __forceinline__ void atomic_add_pack(acc_t* p, const acc_t (&v)[N]) {
  if constexpr (vector_atomics<acc_t, N, 4>()) {
#pragma unroll
    for (int i = 0; i < N; i += 4)
      atomicAdd(reinterpret_cast<float4*>(p + i), make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]));
  } else if constexpr (vector_atomics<acc_t, N, 2>()) {
#pragma unroll
    for (int i = 0; i < N; i += 2)
      atomicAdd(reinterpret_cast<float2*>(p + i), make_float2(v[i], v[i + 1]));
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) atomicAdd(p + i, v[i]);
  }
}

// p[i] += v[i] for the i < N whose bit is set in `mask`: where vector
// atomics apply (as in atomic_add_pack), one pack with -0.0, the additive
// identity, in the other elements (a float atomic flushes a subnormal
// result to zero, PTX red.add.f32, so an unmasked element holding a
// subnormal may become 0); else one atomic per set bit.
template <int N, typename acc_t>
__device__ __forceinline__ void atomic_add_pack_masked(acc_t* p, const acc_t (&v)[N],
                                                       unsigned mask) {
  if constexpr (vector_atomics<acc_t, N, 2>()) {
    acc_t add[N];
#pragma unroll
    for (int i = 0; i < N; ++i) add[i] = mask >> i & 1u ? v[i] : acc_t(-0.0);
    atomic_add_pack<N>(p, add);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i)
      if (mask >> i & 1u) atomicAdd(p + i, v[i]);
  }
}

}  // namespace pygio
