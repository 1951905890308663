// Host side shared by the GATv2 entries: the checks every entry applies to
// the inputs they share, the lane layout, and the dispatch from runtime
// dtype / index width / vector width / pieces per lane to GatTraits.
#pragma once

#include <string>
#include <type_traits>

#include "../common/abi.h"
#include "../common/vector_width.h"
#include "gatv2_traits.cuh"

namespace pygio {
namespace gatv2 {

constexpr size_t kAlign = 16;

inline size_t round_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
inline bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kAlign == 0; }

// Checks of the fields pygio_gatv2, _backward and _alpha share (no device
// access): the CSR, dtype (fp32 / fp16 / bf16), heads and channels, x_l
// and x_r with their row strides, att.
template <typename P>
int check_inputs(const P& p, const char* entry) {
  PYGIO_TRY(check_csr(p.a, entry));
  PYGIO_CHECK_ARG(p.dtype == PYGIO_FLOAT32 || p.dtype == PYGIO_FLOAT16 ||
                      p.dtype == PYGIO_BFLOAT16,
                  entry_message(entry, "dtype must be float32, float16 or bfloat16"));
  PYGIO_CHECK_ARG(p.heads > 0 && p.channels > 0,
                  entry_message(entry, "heads and channels must be positive"));
  if (p.a.num_rows > 0) {
    PYGIO_CHECK_ARG(p.x_r != nullptr && p.att != nullptr,
                    entry_message(entry, "x_r and att must not be NULL"));
    PYGIO_TRY(check_row_stride(p.x_r_row_stride, p.heads * p.channels, "x_r", entry));
  }
  if (p.a.nnz > 0) {
    PYGIO_CHECK_ARG(p.x_l != nullptr, entry_message(entry, "x_l must not be NULL"));
    PYGIO_TRY(check_row_stride(p.x_l_row_stride, p.heads * p.channels, "x_l", entry));
  }
  return PYGIO_OK;
}

inline int check_dropout(float p, const char* entry) {
  PYGIO_CHECK_ARG(p >= 0.f && p < 1.f, entry_message(entry, "dropout_p must lie in [0, 1)"));
  return PYGIO_OK;
}

// The lane layout for `channels` channels read kVec at a time: groups of
// lanes = the pieces rounded up to a power of two, at most 32.
inline WarpLayout channel_layout(int64_t channels, int vec) {
  const int64_t pieces = channels / vec;
  int shift = 0;
  while (shift < 5 && (int64_t{1} << shift) < pieces) ++shift;
  return WarpLayout{shift};
}

// Pieces per lane: ceil(pieces / lanes) rounded up to a power of two.
inline int pieces_per_lane(int64_t channels, int vec, const WarpLayout& layout) {
  const int64_t lanes = int64_t{1} << layout.shift;
  const int64_t needed = (channels / vec + lanes - 1) / lanes;
  int pieces = 1;
  while (pieces < needed) pieces <<= 1;
  return pieces;
}

// A lane holds at most this many channels (registers).
constexpr int kMaxElemsPerLane = 32;

// go(GatTraits<scalar_t, index_t, kVec, kPieces>{}) for runtime pieces.
template <typename scalar_t, typename index_t, int kVec, typename Go>
int with_pieces(int pieces, Go go) {
  if (pieces == 1) return go(GatTraits<scalar_t, index_t, kVec, 1>{});
  if (pieces == 2) return go(GatTraits<scalar_t, index_t, kVec, 2>{});
  if constexpr (kVec * 4 <= kMaxElemsPerLane) {
    if (pieces == 4) return go(GatTraits<scalar_t, index_t, kVec, 4>{});
  }
  if constexpr (kVec * 8 <= kMaxElemsPerLane) {
    if (pieces == 8) return go(GatTraits<scalar_t, index_t, kVec, 8>{});
  }
  return fail(PYGIO_ERR_UNSUPPORTED,
              "channels per head above " + std::to_string(kMaxElemsPerLane * kWarpSize) +
                  " (or above " + std::to_string(kMaxElemsPerLane / 4 * kWarpSize) +
                  " where rows are not 16-byte aligned) are not supported");
}

// Binds dtype, index width, vector width and pieces per lane, then calls
// go(traits, shape). `strides` and `pointers`: every row stride (elements)
// and base pointer the kernels read or write with vector accesses.
template <typename P, typename Go>
int dispatch(const P& p, std::initializer_list<int64_t> strides,
             std::initializer_list<const void*> pointers, Go go) {
  return PYGIO_DISPATCH_DTYPE(p.dtype, [&]() -> int {
    if constexpr (std::is_same_v<scalar_t, double>) {
      return fail(PYGIO_ERR_INVALID_ARGUMENT, "GATv2 kernels take no float64");
    } else {
    // The kernels are built for 16-byte pieces or single elements only.
    constexpr int kWide = 16 / sizeof(scalar_t);
    const int vec =
        widest_vector(sizeof(scalar_t), p.channels, strides, pointers) == kWide ? kWide : 1;
    const WarpLayout layout = channel_layout(p.channels, vec);
    const GatShape shape{layout, p.heads, p.channels};
    const int pieces = pieces_per_lane(p.channels, vec, layout);
    return PYGIO_DISPATCH_INDEX(p.a.index_bits, [&] {
      if (vec == kWide)
        return with_pieces<scalar_t, index_t, kWide>(pieces, [&](auto t) { return go(t, shape); });
      return with_pieces<scalar_t, index_t, 1>(pieces, [&](auto t) { return go(t, shape); });
    });
    }
  });
}

}  // namespace gatv2
}  // namespace pygio
