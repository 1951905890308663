// Warp-level helpers shared by kernels.
#pragma once

#include <stdint.h>

namespace pygio {

constexpr int kWarpSize = 32;
constexpr int kWarpShift = 5;  // log2(kWarpSize)
static_assert(kWarpSize == 1 << kWarpShift, "kWarpShift is log2(kWarpSize)");

// Sum of `v` over the warp's 32 lanes, valid in lane 0 (all lanes active).
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1)
    v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

// Minimum of `v` over the warp's 32 lanes, valid in every lane (all lanes
// active).
template <typename T>
__device__ __forceinline__ T warp_min(T v) {
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1)
    v = min(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// How a warp covers a row: `lanes` (a power of two) lanes span kPieces *
// lanes pieces of the row; the warp's 32 / lanes sub-groups take every
// (32 / lanes)-th entry and are summed with shuffles at the end.
struct WarpLayout {
  int shift;  // log2(lanes)
  __device__ int lanes() const { return 1 << shift; }
  __device__ int sub_group(int lane) const { return lane >> shift; }
  __device__ int sub_groups() const { return kWarpSize >> shift; }
  __device__ int lane_in_group(int lane) const { return lane & ((1 << shift) - 1); }
  // The lanes of `lane`'s sub-group, as a shuffle mask, and the first of them.
  __device__ unsigned group_mask(int lane) const {
    const unsigned lanes_mask = shift == 5 ? 0xffffffffu : (1u << (1 << shift)) - 1u;
    return lanes_mask << (sub_group(lane) << shift);
  }
  __device__ int group_leader(int lane) const { return sub_group(lane) << shift; }
  // The q-th piece `lane` holds in the pass starting at piece `base`.
  __device__ int64_t piece(int lane, int64_t base, int q) const {
    return base + lane_in_group(lane) + (static_cast<int64_t>(q) << shift);
  }
};

// The sum of `v` over lanes 0..lane of the warp (an inclusive prefix sum;
// all lanes active).
template <typename T>
__device__ __forceinline__ T warp_inclusive_sum(T v, int lane) {
  for (int offset = 1; offset < kWarpSize; offset <<= 1) {
    const T below = __shfl_up_sync(0xffffffffu, v, offset);
    if (lane >= offset) v += below;
  }
  return v;
}

// v[i] summed over the warp's sub-groups of `layout` (every lane gets its
// pieces' sums; all lanes active).
template <typename T, int N>
__device__ __forceinline__ void sum_over_sub_groups(WarpLayout layout, T (&v)[N]) {
  for (int offset = layout.lanes(); offset < kWarpSize; offset <<= 1)
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] += __shfl_xor_sync(0xffffffffu, v[i], offset);
}

}  // namespace pygio
