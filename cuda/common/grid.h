// Grid sizes for grid-stride kernels: enough blocks for the work, capped at
// the blocks the device holds resident at once.
#pragma once

#include <stdint.h>

#include "status.h"

namespace pygio {

// *grid = min(ceil(work / items_per_block), resident blocks of
// threads_per_block threads on `device`), at least 1.
int resident_grid(int64_t work, int64_t items_per_block, int threads_per_block, int device,
                  unsigned* grid);

}  // namespace pygio
