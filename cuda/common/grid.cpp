#include "grid.h"

#include <algorithm>

#include <cuda_runtime.h>

namespace pygio {

int resident_grid(int64_t work, int64_t items_per_block, int threads_per_block, int device,
                  unsigned* grid) {
  int sm_count = 0, threads_per_sm = 0;
  PYGIO_CHECK_CUDA(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  PYGIO_CHECK_CUDA(cudaDeviceGetAttribute(&threads_per_sm,
                                          cudaDevAttrMaxThreadsPerMultiProcessor, device));
  const int64_t needed = (work + items_per_block - 1) / items_per_block;
  const int64_t resident =
      static_cast<int64_t>(sm_count) * std::max(1, threads_per_sm / threads_per_block);
  *grid = static_cast<unsigned>(std::max<int64_t>(1, std::min(needed, resident)));
  return PYGIO_OK;
}

}  // namespace pygio
