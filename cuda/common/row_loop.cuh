// Grid-stride loops over CSR rows: for_each_row, the attention kernels'
// (forward rows, backward destinations and sources), which loads each
// row's extent one row ahead; RowExtents, the SpMM row kernels', one or
// two rows ahead (two where a row's first entries load during the row
// before, which then needs the row's extent).
#pragma once

#include <stdint.h>

namespace pygio {

// Calls visit(row, begin, end) for rows first, first + stride, ... below
// num_rows, [begin, end) the row's entries (rowptr[row], rowptr[row + 1]).
// The next row's extent is loaded before this row's work, so its latency
// hides behind it.
template <typename index_t, typename Visit>
__device__ __forceinline__ void for_each_row(const index_t* __restrict__ rowptr,
                                             int64_t num_rows, int64_t first, int64_t stride,
                                             Visit visit) {
  int64_t next_begin = 0, next_end = 0;
  if (first < num_rows) next_begin = rowptr[first], next_end = rowptr[first + 1];
  for (int64_t row = first; row < num_rows; row += stride) {
    const int64_t begin = next_begin, end = next_end;
    if (row + stride < num_rows)
      next_begin = rowptr[row + stride], next_end = rowptr[row + stride + 1];
    visit(row, begin, end);
  }
}

// The extents [begin, end) of a grid-stride loop's row (begin, end), of
// the next row (next_begin, next_end) and, with kAhead == 2, of the one
// after (after_*); (0, 0) past num_rows. advance() moves on a row and
// loads the extent kAhead rows ahead of the new one, so every extent loads
// a row before the loop reads it (as begin / end with kAhead == 1, as
// next_begin / next_end with kAhead == 2).
template <typename index_t, int kAhead>
struct RowExtents {
  static_assert(kAhead == 1 || kAhead == 2, "extents load one or two rows ahead");
  index_t begin, end, next_begin, next_end, after_begin, after_end;  // after_*: kAhead == 2

  __device__ RowExtents(const index_t* __restrict__ rowptr, int64_t num_rows, int64_t row,
                        int64_t stride) {
    load(rowptr, num_rows, row, begin, end);
    load(rowptr, num_rows, row + stride, next_begin, next_end);
    if (kAhead == 2) load(rowptr, num_rows, row + 2 * stride, after_begin, after_end);
  }
  // To the extents of `row`, the loop's new row.
  __device__ void advance(const index_t* __restrict__ rowptr, int64_t num_rows, int64_t row,
                          int64_t stride) {
    begin = next_begin, end = next_end;
    if (kAhead == 1) {
      load(rowptr, num_rows, row + stride, next_begin, next_end);
    } else {
      next_begin = after_begin, next_end = after_end;
      load(rowptr, num_rows, row + 2 * stride, after_begin, after_end);
    }
  }

 private:
  __device__ static void load(const index_t* __restrict__ rowptr, int64_t num_rows, int64_t row,
                              index_t& row_begin, index_t& row_end) {
    row_begin = row < num_rows ? rowptr[row] : index_t(0);
    row_end = row < num_rows ? rowptr[row + 1] : index_t(0);
  }
};

}  // namespace pygio
