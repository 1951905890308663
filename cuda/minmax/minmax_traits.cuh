// Compile-time shape of the neighbour min / max kernels and the value
// order they share: a 32-bit rank where larger wins, and the 64-bit word
// hub chunks merge with atomicMax.
#pragma once

#include <stdint.h>

#include "../common/dtype.cuh"
#include "../common/hubs.cuh"
#include "../common/vector.cuh"
#include "../common/warp.cuh"

namespace pygio {

template <typename scalar_t_, typename index_t_, int kVec_, bool kMax_>
struct MinMaxTraits {
  using scalar_t = scalar_t_;  // x and out
  using index_t = index_t_;    // rowptr and col
  using acc_t = typename DTypeTraits<scalar_t>::acc;  // values compared in float (double)

  static constexpr bool kMax = kMax_;
  static constexpr int kVec = kVec_;  // features per load (16 bytes where alignment allows)
  static constexpr int kUnroll = 4;   // entries in flight per lane
  static constexpr int kThreadsPerBlock = 256;
  static constexpr int kWarpsPerBlock = kThreadsPerBlock / kWarpSize;
  static_assert(sizeof(scalar_t) * kVec <= 16, "a lane loads at most 16 bytes at once");
};

// Hub rows are split into chunks of this many entries.
constexpr int64_t kMinMaxHubChunk = 256;
static_assert(kMinMaxHubChunk == PYGIO_MINMAX_MIN_HUB_DEGREE,
              "a hub spans at least one full chunk");

// Rank of a value for the hub merge word: larger wins, for min and max
// alike. The fp32 bits made order-preserving as unsigned, -0.0 folded onto
// +0.0, every NaN above every number; min ranks by the complement. 16-bit
// values rank by their exact fp32 widening. (fp64 rows are never split: a
// double does not fit the word.) rank_of(a) > rank_of(b) exactly where
// better_value(a, b), and equal exactly where same_value(a, b).
template <bool kMax>
__device__ __forceinline__ uint32_t rank_of(float v) {
  if (v != v) return 0xffffffffu;
  const uint32_t bits = v == 0.0f ? 0u : __float_as_uint(v);
  const uint32_t key = bits ^ ((bits >> 31) ? 0xffffffffu : 0x80000000u);
  return kMax ? key : ~key;
}

// Whether two values tie (equal, -0.0 equal to +0.0, NaN equal to NaN)
// and whether a beats b (NaN beats every number, for min and max alike).
template <typename acc_t>
__device__ __forceinline__ bool same_value(acc_t a, acc_t b) {
  return a == b || (a != a && b != b);
}
template <bool kMax, typename acc_t>
__device__ __forceinline__ bool better_value(acc_t a, acc_t b) {
  if (a != a) return b == b;  // NaN beats every number
  if (b != b) return false;
  return kMax ? a > b : a < b;
}

// The arg code of a winner: plain where the whole gradient goes to it, else
// ~source (a tie, a zero or a NaN result: resolved in backward).
template <typename acc_t>
__device__ __forceinline__ int32_t arg_code(int32_t source, bool tied, acc_t value) {
  const bool walk = tied || value == acc_t(0) || value != value;
  return walk ? ~source : source;
}

// A hub element's merge word: rank, then the smaller source, then a tie
// bit, so that atomicMax keeps the winner; 0 is below every real word.
__device__ __forceinline__ unsigned long long merge_word(uint32_t rank, int32_t source,
                                                         bool tied) {
  const uint32_t low = (static_cast<uint32_t>(~source) & 0x7fffffffu) << 1 | (tied ? 1u : 0u);
  return static_cast<unsigned long long>(rank) << 32 | low;
}
__device__ __forceinline__ uint32_t word_rank(unsigned long long w) {
  return static_cast<uint32_t>(w >> 32);
}
__device__ __forceinline__ int32_t word_source(unsigned long long w) {
  return static_cast<int32_t>(~(static_cast<uint32_t>(w) >> 1) & 0x7fffffffu);
}
__device__ __forceinline__ bool word_tied(unsigned long long w) { return (w & 1ull) != 0; }

// The forward's hub workspace: the hub list and one merge word per hub
// element.
struct MinMaxHubs {
  HubList list;
  unsigned long long* words;  // [list.capacity, width], zeroed
  const int64_t* degree;      // device scalar: rows above max(*degree, chunk) are hubs
};

}  // namespace pygio
