// Grid sizes for grid-stride kernels: enough blocks for the work, capped at
// the blocks the device holds resident at once.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "status.h"

namespace pygio {

// *grid = min(ceil(work / items_per_block), resident blocks of
// threads_per_block threads on `device` by its thread limit), at least 1.
// A kernel that fits fewer blocks an SM (registers) then runs in several
// waves, a block of a later wave starting where one of an earlier wave
// ended: the balance the row kernels of the forwards want, whose rows vary
// in cost (H200, one wave of their own resident blocks: min D=512 forward
// arxiv-like 0.79 -> 0.87 ms, GATv2 (2, 64) 0.45 -> 0.48, SpMM D=512 fp32
// 0.64 -> 0.70).
int resident_grid(int64_t work, int64_t items_per_block, int threads_per_block, int device,
                  unsigned* grid);

// The same capped at the blocks of `kernel` resident at once (its
// registers and shared memory counted, shared_bytes of it dynamic): one
// wave, for kernels that gain from it.
int resident_grid(const void* kernel, int64_t work, int64_t items_per_block,
                  int threads_per_block, int device, unsigned* grid, size_t shared_bytes = 0);

template <typename... Args>
int resident_grid(void (*kernel)(Args...), int64_t work, int64_t items_per_block,
                  int threads_per_block, int device, unsigned* grid, size_t shared_bytes = 0) {
  return resident_grid(reinterpret_cast<const void*>(kernel), work, items_per_block,
                       threads_per_block, device, grid, shared_bytes);
}

// *bytes = the L2 cache size of `device`.
int l2_cache_bytes(int device, int64_t* bytes);

}  // namespace pygio
