// Compile-time shape of the SpMM kernels of our own: element, edge-value
// and index types, the vector each lane loads (kVec elements, up to 16
// bytes), how many such pieces of a row a lane holds (kPieces) and how many
// entries it keeps in flight (kUnroll); plus the work-splitting constants.
#pragma once

#include <stdint.h>

#include "../common/dtype.cuh"
#include "../common/gather.cuh"
#include "../common/hubs.cuh"
#include "../common/vector.cuh"
#include "../common/warp.cuh"

namespace pygio {

template <typename scalar_t_, typename value_t_, typename index_t_, int kVec_, int kPieces_,
          typename out_t_ = scalar_t_>
struct SpmmTraits {
  using scalar_t = scalar_t_;  // X
  using value_t = value_t_;    // edge values and bias: scalar_t, or float for 16-bit scalar_t
  using out_t = out_t_;        // Y: scalar_t, or (float values) float <-> 16-bit
  using index_t = index_t_;    // int32_t or int64_t (rowptr and col)
  using acc_t = typename DTypeTraits<scalar_t>::acc;  // float, double for double
  using offset_t = EntryOffset<index_t>;  // entry positions (common/gather.cuh)

  static constexpr int kVec = kVec_;        // features per load
  static constexpr int kPieces = kPieces_;  // kVec-wide pieces of a row per lane
  // Entries in flight per lane: 4 / kPieces (at least 1), but 3 where a
  // lane holds one 16-byte piece of a 16-bit row (D=64 to 504 with 16-byte
  // loads). A warp then takes 12 entries a step at D=64 (four
  // sub-groups) instead of 16, so rows of 13-24 entries (pokec-like's 20 on
  // average) leave fewer slots empty. H200, bf16, share of copy bandwidth
  // of the forward A X, 4 -> 3 entries: D=64 pokec-like 74 -> 81%,
  // products-like 80 -> 86%, web-like 62 -> 63%; D=128 95 -> 98%, 98 ->
  // 101%, 86 -> 87%; D=256 within 1%. 2 entries lost (D=64 74 / 78 /
  // 60%, D=128 86 / 89 / 68%), 5 and 6 spilled and lost (D=64 pokec-like
  // 60% and 44%); so did two pieces a lane at D=64 (4 lanes a row: 69 /
  // 75 / 54% with 2 entries, 41 / 53 / 44% with 3) and four (2 lanes: 42
  // / 48 / 33%).
  static constexpr int kUnroll =
      kPieces >= 4 ? 1
      : kPieces == 1 && sizeof(scalar_t) == 2 && kVec * sizeof(scalar_t) == 16 ? 3
                                                                               : 4 / kPieces;
  static constexpr int kThreadsPerBlock = 256;
  static constexpr int kWarpsPerBlock = kThreadsPerBlock / kWarpSize;
  // Blocks an SM holds at least (__launch_bounds__): 4 (64 registers, 32
  // warps an SM) where a lane holds at most 32 bytes of a row, else 3 (80
  // registers, 24 warps). The kernels are latency-bound: 4 blocks instead
  // of 3 took D=64 from 80 / 75 / 86% of copy bandwidth to 94 / 88 / 101%
  // in fp32 and 56 / 51 / 62% to 60 / 55 / 66% in bf16 on pokec- / web- /
  // products-like (H200), and bf16 D=512 (32 bytes a lane, 76 bytes
  // spilled) from 93 / 89 / 93% to 94 / 92 / 94%; fp32 D=512 (64 bytes a
  // lane) spilled and lost 1-2 points; 5 blocks lost everywhere.
  static constexpr int kMinBlocksPerSm = kPieces * kVec * sizeof(scalar_t) <= 32 ? 4 : 3;
  // Whether a row's first step of column indices and values loads during
  // the row before (gather_entries: a row's last step loads the next row's
  // first), so a row's first gathers wait for no index load; else each row
  // (each pass over a row) loads its own. H200, share of copy bandwidth on
  // pokec- / web- / products-like: fp32 D=64 94 / 89 / 100% -> 102 / 99 /
  // 107%, D=512 95 / 101 / 93% -> 97 / 106 / 94%. 16-bit rows lost with it
  // (bf16 D=64 60 / 56 / 64% -> 55 / 61 / 59%, D=512 92% -> 86-87%: more
  // spilled; at 3 blocks an SM, no spills, D=64 60 / 53 / 63%), where
  // they still spill: with int64 indices or two pieces a lane. With int32
  // indices and 32-bit entry positions (offset_t) a one-piece 16-bit row
  // carries it without spilling.
  static constexpr bool kCarryAcrossRows =
      sizeof(scalar_t) >= 4 || (kPieces == 1 && sizeof(index_t) == 4);
  // (spmm_rows_grouped_kernel carries it in every dtype.)

  // Pieces a lane holds for wide rows: 16 accumulators at most (4 pieces
  // of 16-byte fp32 or fp64 loads, 2 of 16-bit), entries in flight as
  // kUnroll says.
  // 16-bit rows of 512 took two passes of one piece and 4 entries a lane
  // before: 2 pieces and 2 entries in one pass measured 79% -> 86% of copy
  // bandwidth on pokec-like (bf16, D=512, H200), 69% -> 84% on web-like,
  // 80% -> 87% on products-like; 2 pieces and 3 entries gave 87 / 83 /
  // 88%, 2 pieces and 4 entries or 4 pieces spilled registers and lost.
  static constexpr int wide_pieces() { return 16 / kVec < 4 ? 16 / kVec : 4; }

  static_assert(sizeof(scalar_t) * kVec <= 16, "a lane loads at most 16 bytes at once");
  static_assert(kPieces >= 1 && kPieces <= 4, "a lane holds 1 to 4 pieces");
  static_assert(sizeof(index_t) == 4 || sizeof(index_t) == 8, "index_t is int32 or int64");
};

// Rows with more entries than the hub degree are hubs: split into
// kHubChunk-entry chunks, one warp each, merged with atomics into one
// accumulator row per hub. The hub degree is kHubDegree, raised where
// needed so that the accumulators of every possible hub fit in
// kHubScratchBytes.
constexpr int64_t kHubDegree = 256;
constexpr int64_t kHubChunk = 128;
constexpr int64_t kHubScratchBytes = int64_t{64} << 20;
// Entries per warp in the transposed (scatter) kernel.
constexpr int64_t kScatterChunk = 64;

inline int64_t hub_threshold(int64_t nnz, int64_t width, int64_t acc_size) {
  const int64_t slots = kHubScratchBytes / (width * acc_size > 0 ? width * acc_size : 1);
  const int64_t by_scratch = nnz / (slots > 0 ? slots : 1);
  return by_scratch > kHubDegree ? by_scratch : kHubDegree;
}
// Rows that can exceed the threshold (each has more than threshold entries).
inline int64_t max_hubs(int64_t num_rows, int64_t nnz, int64_t threshold) {
  const int64_t bound = nnz / (threshold + 1);
  return bound < num_rows ? bound : num_rows;
}

// The forward kernels' workspace: the hub list (common/hubs.cuh) and one
// accumulator row per hub slot.
template <typename acc_t>
struct HubWorkspace {
  HubList list;
  acc_t* sums;  // [list.capacity, width]
  int64_t threshold;
};

}  // namespace pygio
