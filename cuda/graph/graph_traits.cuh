// Compile-time shape of the graph-structure kernels: one thread per entry or
// row (self loops, GCN values), one warp per row (degrees).
#pragma once

#include <stdint.h>

#include "../common/dtype.cuh"
#include "../common/warp.cuh"

namespace pygio {

// Input-edge codes of a self-loop graph's entries that carry no input edge
// (pyg_ioaware.graph.NEW_LOOP / DROPPED_LOOP).
constexpr int64_t kNewLoop = -1;
constexpr int64_t kDroppedLoop = -2;

template <typename index_t_, int kThreadsPerBlock_ = 256>
struct GraphTraits {
  using index_t = index_t_;  // int32_t or int64_t
  static constexpr int kThreadsPerBlock = kThreadsPerBlock_;
  static constexpr int kWarpsPerBlock = kThreadsPerBlock / kWarpSize;
  static_assert(kThreadsPerBlock % kWarpSize == 0 && kThreadsPerBlock <= 1024,
                "a block holds whole warps, at most 1024 threads");
  static_assert(sizeof(index_t) == 4 || sizeof(index_t) == 8, "index_t is int32 or int64");
};

}  // namespace pygio
