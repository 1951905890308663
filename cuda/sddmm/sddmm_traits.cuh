// Compile-time shape of the SDDMM kernel: one warp per CSR row, a fixed
// number of warps per block, element and accumulator types.
#pragma once

#include <stdint.h>

#include "../common/dtype.cuh"
#include "../common/warp.cuh"

namespace pygio {

template <typename scalar_t_, typename index_t_, int kWarpsPerBlock_ = 8>
struct SddmmTraits {
  using scalar_t = scalar_t_;  // storage type of G, X and out
  using index_t = index_t_;    // int32_t or int64_t (rowptr and col)
  using dtype = DTypeTraits<scalar_t>;
  using acc_t = typename dtype::acc;  // float, double for double

  static constexpr int kWarpsPerBlock = kWarpsPerBlock_;
  static constexpr int kThreadsPerBlock = kWarpsPerBlock * kWarpSize;

  static_assert(kWarpsPerBlock >= 1 && kThreadsPerBlock <= 1024,
                "a block holds 1 to 32 warps");
  static_assert(sizeof(index_t) == 4 || sizeof(index_t) == 8, "index_t is int32 or int64");
};

}  // namespace pygio
