// What the GATv2 kernels share: the compile-time shape of a lane's slice of
// one head's channels, slice loads and stores, the score of an entry, the
// reductions over the lanes of a group and the online-softmax state.
//
// A warp covers one head of one row at a time: groups of `lanes` lanes
// (WarpLayout) span the head's channels, each lane holding kPieces pieces
// of kVec consecutive channels (channel (q * lanes + lane) * kVec + i for
// piece q); the warp's 32 / lanes groups take interleaved entries of the
// row and are merged with shuffles at the end.
#pragma once

#include <math.h>
#include <stdint.h>

#include "../common/dropout.cuh"
#include "../common/vector.cuh"
#include "../common/warp.cuh"
#include "pyg_ioaware.h"

namespace pygio {

template <typename scalar_t_, typename index_t_, int kVec_, int kPieces_>
struct GatTraits {
  using scalar_t = scalar_t_;
  using index_t = index_t_;
  static constexpr int kVec = kVec_;
  static constexpr int kPieces = kPieces_;
  static constexpr int kElems = kVec * kPieces;  // channels a lane holds
  static constexpr int kWarpsPerBlock = 8;
  static constexpr int kThreadsPerBlock = kWarpsPerBlock * kWarpSize;
};

// Entries of a hub row per chunk of the forward's hub kernel.
constexpr int kGatHubChunk = 256;

// The shape every kernel needs besides its traits.
struct GatShape {
  WarpLayout layout;
  int64_t heads;
  int64_t channels;
  __host__ __device__ int64_t width() const { return heads * channels; }
};

// The channel of element 0 of piece q of `lane`, or -1 past the head's end.
template <typename Traits>
__device__ __forceinline__ int64_t piece_channel(const GatShape& s, int lane, int q) {
  const int64_t c = (static_cast<int64_t>(q) * s.layout.lanes() + s.layout.lane_in_group(lane)) *
                    Traits::kVec;
  return c < s.channels ? c : -1;
}

// v = the lane's slice of the head row at `head_row` (fp32; 0 past the end).
template <typename Traits, typename T>
__device__ __forceinline__ void load_slice(const T* __restrict__ head_row, const GatShape& s,
                                           int lane, float (&v)[Traits::kElems]) {
#pragma unroll
  for (int q = 0; q < Traits::kPieces; ++q) {
    const int64_t c = piece_channel<Traits>(s, lane, q);
    if (c >= 0) {
      const Pack<T, Traits::kVec> pack = load_pack<Traits::kVec>(head_row + c);
#pragma unroll
      for (int i = 0; i < Traits::kVec; ++i)
        v[q * Traits::kVec + i] = DTypeTraits<T>::load(pack.v[i]);
    } else {
#pragma unroll
      for (int i = 0; i < Traits::kVec; ++i) v[q * Traits::kVec + i] = 0.f;
    }
  }
}

// att is fp32 whatever the features are: loaded one element at a time
// (once per row and head).
template <typename Traits>
__device__ __forceinline__ void load_att(const float* __restrict__ head_att, const GatShape& s,
                                         int lane, float (&v)[Traits::kElems]) {
#pragma unroll
  for (int q = 0; q < Traits::kPieces; ++q) {
    const int64_t c = piece_channel<Traits>(s, lane, q);
#pragma unroll
    for (int i = 0; i < Traits::kVec; ++i) v[q * Traits::kVec + i] = c >= 0 ? head_att[c + i] : 0.f;
  }
}

// The lane's slice of v stored at `head_row` (converted to T).
template <typename Traits, typename T>
__device__ __forceinline__ void store_slice(T* __restrict__ head_row, const GatShape& s, int lane,
                                            const float (&v)[Traits::kElems]) {
#pragma unroll
  for (int q = 0; q < Traits::kPieces; ++q) {
    const int64_t c = piece_channel<Traits>(s, lane, q);
    if (c < 0) continue;
    float piece[Traits::kVec];
#pragma unroll
    for (int i = 0; i < Traits::kVec; ++i) piece[i] = v[q * Traits::kVec + i];
    store_pack<Traits::kVec>(head_row + c, piece);
  }
}

// Sum of v over the lanes of the caller's group (every lane gets it).
__device__ __forceinline__ float group_sum(float v, const WarpLayout& layout) {
  for (int offset = layout.lanes() / 2; offset > 0; offset >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// v summed over the warp's groups (every group gets the total).
template <int N>
__device__ __forceinline__ void sum_over_groups(float (&v)[N], const WarpLayout& layout) {
  for (int offset = layout.lanes(); offset < kWarpSize; offset <<= 1) {
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] += __shfl_xor_sync(0xffffffffu, v[k], offset);
  }
}

__device__ __forceinline__ float leaky_relu(float z, float slope) { return z > 0.f ? z : z * slope; }
__device__ __forceinline__ float leaky_relu_grad(float z, float slope) {
  return z > 0.f ? 1.f : slope;
}

// The group's score sum_c att[c] * leaky_relu(z[c]) of an entry whose
// z = x_l[j] + x_r[i] (+ edge[e]) slice the lane holds (every lane of the
// group gets it).
template <typename Traits>
__device__ __forceinline__ float entry_score(const float (&z)[Traits::kElems],
                                             const float (&att)[Traits::kElems], float slope,
                                             const WarpLayout& layout) {
  float partial = 0.f;
#pragma unroll
  for (int k = 0; k < Traits::kElems; ++k) partial += att[k] * leaky_relu(z[k], slope);
  return group_sum(partial, layout);
}

// keep(e, h) / (1 - p): the dropout factor of entry e, head h.
__device__ __forceinline__ float dropout_factor(uint64_t seed, int64_t entry, int64_t head,
                                                float p) {
  if (p <= 0.f) return 1.f;
  return dropout_keep(seed, entry, static_cast<int>(head), p) ? 1.f / (1.f - p) : 0.f;
}

// A running softmax-weighted sum: m the largest score so far, l the sum of
// exp(score - m), acc the sum of exp(score - m) * factor * value.
template <int N>
struct SoftmaxState {
  float m = -INFINITY;
  float l = 0.f;
  float acc[N] = {};

  __device__ __forceinline__ void add(float score, float factor, const float (&value)[N]) {
    const float m_new = fmaxf(m, score);
    const float rescale = expf(m - m_new);  // 0 while m is -inf
    const float weight = expf(score - m_new);
    l = l * rescale + weight;
    const float w = weight * factor;
#pragma unroll
    for (int k = 0; k < N; ++k) acc[k] = acc[k] * rescale + w * value[k];
    m = m_new;
  }

  // Merges another state (m_o, l_o, acc_o) into this one.
  __device__ __forceinline__ void merge(float m_o, float l_o, const float (&acc_o)[N]) {
    const float m_new = fmaxf(m, m_o);
    const float a = m == -INFINITY ? 0.f : expf(m - m_new);
    const float b = m_o == -INFINITY ? 0.f : expf(m_o - m_new);
    l = l * a + l_o * b;
#pragma unroll
    for (int k = 0; k < N; ++k) acc[k] = acc[k] * a + acc_o[k] * b;
    m = m_new;
  }

  // Merges the states of the warp's groups: every group ends with the total.
  __device__ __forceinline__ void merge_groups(const WarpLayout& layout) {
    for (int offset = layout.lanes(); offset < kWarpSize; offset <<= 1) {
      float acc_o[N];
#pragma unroll
      for (int k = 0; k < N; ++k) acc_o[k] = __shfl_xor_sync(0xffffffffu, acc[k], offset);
      merge(__shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, l, offset),
            acc_o);
    }
  }

  // log sum exp of the scores (-inf for none).
  __device__ __forceinline__ float lse() const { return l > 0.f ? m + logf(l) : -INFINITY; }
};

}  // namespace pygio
