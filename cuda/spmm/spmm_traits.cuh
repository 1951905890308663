// Compile-time shape of the SpMM kernels of our own: element, edge-value
// and index types, the vector of features each lane loads (kVec elements,
// up to 16 bytes) and the block size; plus the work-splitting constants.
#pragma once

#include <stdint.h>

#include "../common/dtype.cuh"
#include "../common/vector.cuh"
#include "../common/warp.cuh"

namespace pygio {

template <typename scalar_t_, typename value_t_, typename index_t_, int kVec_>
struct SpmmTraits {
  using scalar_t = scalar_t_;  // X and Y
  using value_t = value_t_;    // edge values and bias: scalar_t, or float for 16-bit scalar_t
  using index_t = index_t_;    // int32_t or int64_t (rowptr and col)
  using acc_t = typename DTypeTraits<scalar_t>::acc;  // float, double for double

  static constexpr int kVec = kVec_;  // features per lane per load
  static constexpr int kThreadsPerBlock = 256;
  static constexpr int kWarpsPerBlock = kThreadsPerBlock / kWarpSize;
  static constexpr int kEdgeUnroll = 4;  // edges in flight per lane

  static_assert(sizeof(scalar_t) * kVec <= 16, "a lane loads at most 16 bytes at once");
  static_assert(sizeof(index_t) == 4 || sizeof(index_t) == 8, "index_t is int32 or int64");
};

// Rows with more entries than this (or than nnz / kMaxHubs, whichever is
// larger) are hubs: split into kHubChunk-entry chunks, one warp each.
constexpr int64_t kHubDegree = 512;
constexpr int64_t kHubChunk = 256;
constexpr int64_t kMaxHubs = 8192;
// Entries per lane group in the transposed (scatter) kernel.
constexpr int64_t kScatterChunk = 32;

// The hub-degree threshold for a matrix of nnz entries, and how many rows
// can exceed it (each has more than threshold entries).
inline int64_t hub_threshold(int64_t nnz) {
  const int64_t by_count = (nnz + kMaxHubs - 1) / kMaxHubs;
  return by_count > kHubDegree ? by_count : kHubDegree;
}
inline int64_t max_hubs(int64_t num_rows, int64_t nnz) {
  const int64_t bound = nnz / (hub_threshold(nnz) + 1);
  return bound < num_rows ? bound : num_rows;
}

// One registered hub: its row and the index of its first chunk in the
// global chunk list (slots are numbered in chunk order).
struct HubEntry {
  int64_t row;
  int64_t first_chunk;
};

// The forward kernels' workspace: a packed counter ((hubs << 40) | chunks),
// the hub list and one accumulator row per hub.
template <typename acc_t>
struct HubWorkspace {
  unsigned long long* counter;
  HubEntry* hubs;
  acc_t* sums;  // [max_hubs, width]
};

constexpr int kHubCountShift = 40;

}  // namespace pygio
