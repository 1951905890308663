#include "grid.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <tuple>

#include <cuda_runtime.h>

namespace pygio {

namespace {

// SM count and resident threads per SM of each device, read once (every
// kernel launch asks).
constexpr int kMaxDevices = 64;
std::atomic<int64_t> device_shape[kMaxDevices];  // (sm_count << 32) | threads_per_sm; 0: unread

int read_device_shape(int device, int* sm_count, int* threads_per_sm) {
  const bool cacheable = device >= 0 && device < kMaxDevices;
  const int64_t known = cacheable ? device_shape[device].load(std::memory_order_relaxed) : 0;
  if (known != 0) {
    *sm_count = static_cast<int>(known >> 32);
    *threads_per_sm = static_cast<int>(known & 0xffffffff);
    return PYGIO_OK;
  }
  PYGIO_CHECK_CUDA(cudaDeviceGetAttribute(sm_count, cudaDevAttrMultiProcessorCount, device));
  PYGIO_CHECK_CUDA(cudaDeviceGetAttribute(threads_per_sm,
                                          cudaDevAttrMaxThreadsPerMultiProcessor, device));
  if (cacheable)
    device_shape[device].store((static_cast<int64_t>(*sm_count) << 32) | *threads_per_sm,
                               std::memory_order_relaxed);
  return PYGIO_OK;
}

// Resident blocks an SM of each (kernel, block size, dynamic shared
// memory, device), asked of the runtime once (a launch's host time counts
// on small graphs), for the current device: every launcher makes `device`
// current first.
using OccupancyKey = std::tuple<const void*, int, size_t, int>;
std::mutex occupancy_mutex;
std::map<OccupancyKey, int> occupancy;

int kernel_blocks_per_sm(const void* kernel, int threads_per_block, size_t shared_bytes,
                         int device, int* blocks) {
  const OccupancyKey key{kernel, threads_per_block, shared_bytes, device};
  {
    std::lock_guard<std::mutex> lock(occupancy_mutex);
    const auto known = occupancy.find(key);
    if (known != occupancy.end()) {
      *blocks = known->second;
      return PYGIO_OK;
    }
  }
  PYGIO_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, kernel,
                                                                 threads_per_block, shared_bytes));
  std::lock_guard<std::mutex> lock(occupancy_mutex);
  occupancy[key] = *blocks;
  return PYGIO_OK;
}

// min(ceil(work / items_per_block), resident), at least 1.
unsigned grid_of(int64_t work, int64_t items_per_block, int64_t resident) {
  const int64_t needed = (work + items_per_block - 1) / items_per_block;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(needed, resident)));
}

}  // namespace

int resident_grid(int64_t work, int64_t items_per_block, int threads_per_block, int device,
                  unsigned* grid) {
  int sm_count = 0, threads_per_sm = 0;
  PYGIO_TRY(read_device_shape(device, &sm_count, &threads_per_sm));
  *grid = grid_of(work, items_per_block,
                  static_cast<int64_t>(sm_count) * std::max(1, threads_per_sm / threads_per_block));
  return PYGIO_OK;
}

int resident_grid(const void* kernel, int64_t work, int64_t items_per_block,
                  int threads_per_block, int device, unsigned* grid, size_t shared_bytes) {
  int sm_count = 0, threads_per_sm = 0, blocks_per_sm = 0;
  PYGIO_TRY(read_device_shape(device, &sm_count, &threads_per_sm));
  PYGIO_TRY(kernel_blocks_per_sm(kernel, threads_per_block, shared_bytes, device,
                                 &blocks_per_sm));
  *grid =
      grid_of(work, items_per_block, static_cast<int64_t>(sm_count) * std::max(1, blocks_per_sm));
  return PYGIO_OK;
}

int l2_cache_bytes(int device, int64_t* bytes) {
  int value = 0;
  PYGIO_CHECK_CUDA(cudaDeviceGetAttribute(&value, cudaDevAttrL2CacheSize, device));
  *bytes = value;
  return PYGIO_OK;
}

}  // namespace pygio
