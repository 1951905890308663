// The grid-stride loop over CSR rows of the attention kernels (forward
// rows, backward destinations and sources). The SpMM row kernels keep
// their own copy of this loop: written through this helper, ptxas
// allocated their registers differently and the 16-bit narrow-row kernel
// spilled 24 bytes (none as a plain loop).
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

}  // namespace pygio
