// Warp-level helpers shared by kernels.
#pragma once

namespace pygio {

constexpr int kWarpSize = 32;

// Sum of `v` over the warp's 32 lanes, valid in lane 0 (all lanes active).
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1)
    v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace pygio
