// Hub rows: rows too long for one warp, registered by the kernel that meets
// them and split into fixed-size chunks of entries that a second kernel
// spreads over all SMs. Shared by the kernel families that split hubs.
//
// A hub list is a packed 64-bit counter ((hubs << kHubCountShift) | chunks)
// and an array of HubEntry. One atomicAdd on the counter gives a row its
// slot and the index of its first chunk, so the chunks of all hubs are
// numbered consecutively, in slot order, without a prefix sum.
#pragma once

#include <stdint.h>

#include "search.cuh"
#include "warp.cuh"

namespace pygio {

constexpr int kHubCountShift = 40;

// One registered hub: its row and the index of its first chunk.
struct HubEntry {
  int64_t row;
  int64_t first_chunk;
};

struct HubList {
  unsigned long long* counter;  // zeroed before the registering kernel
  HubEntry* hubs;               // capacity entries
  int64_t capacity;
};

// Registers `row` (`degree` entries, split into chunks of `chunk`) from
// lane `leader` and tells every lane of `mask` (the lanes working on the
// row: the whole warp by default) whether it was taken: false where the
// list is full (the caller then does the row itself; chunks counted for it
// are empty ranges, see hub_chunk_range). Every lane of `mask` must call it.
__device__ __forceinline__ bool register_hub(const HubList& list, int64_t row, int64_t degree,
                                             int64_t chunk, int lane,
                                             unsigned mask = 0xffffffffu, int leader = 0) {
  int taken = 0;
  if (lane == leader) {
    const unsigned long long chunks = (degree + chunk - 1) / chunk;
    const unsigned long long old = atomicAdd(list.counter, (1ull << kHubCountShift) + chunks);
    const int64_t slot = static_cast<int64_t>(old >> kHubCountShift);
    if (slot < list.capacity) {
      list.hubs[slot] = HubEntry{row, static_cast<int64_t>(old & ((1ull << kHubCountShift) - 1))};
      taken = 1;
    }
  }
  return __shfl_sync(mask, taken, leader) != 0;
}

// Hubs registered (at most the capacity) and chunks counted, read after
// the registering kernel has finished.
__device__ __forceinline__ int64_t hub_count(const HubList& list) {
  const int64_t hubs = static_cast<int64_t>(*list.counter >> kHubCountShift);
  return hubs < list.capacity ? hubs : list.capacity;
}
// Whether every row that asked was registered (the list never filled up),
// read after the registering kernel has finished.
__device__ __forceinline__ bool every_hub_registered(const HubList& list) {
  return static_cast<int64_t>(*list.counter >> kHubCountShift) <= list.capacity;
}
__device__ __forceinline__ int64_t hub_chunk_count(const HubList& list) {
  return static_cast<int64_t>(*list.counter & ((1ull << kHubCountShift) - 1));
}

// Chunk `chunk`'s hub slot and its entries [*begin, *end) (an empty range
// for a chunk counted for a row the full list refused). Needs num_hubs > 0.
template <typename index_t>
__device__ __forceinline__ int64_t hub_chunk_range(const HubList& list, int64_t num_hubs,
                                                   const index_t* __restrict__ rowptr,
                                                   int64_t chunk, int64_t chunk_size,
                                                   int64_t* begin, int64_t* end) {
  const int64_t slot = last_at_most(num_hubs, chunk,
                                    [&](int64_t s) { return list.hubs[s].first_chunk; });
  const HubEntry hub = list.hubs[slot];
  const int64_t row_end = rowptr[hub.row + 1];
  const int64_t first = rowptr[hub.row] + (chunk - hub.first_chunk) * chunk_size;
  *begin = first < row_end ? first : row_end;
  *end = first + chunk_size < row_end ? first + chunk_size : row_end;
  return slot;
}

// Work item `item` of a warp-per-item kernel over the rows of `rowptr`
// whose long rows go to chunks: kChunks false, the item is a row, and one
// of more than `chunk_size` entries is registered in `list` (*registered;
// the list full, the caller does the row itself); kChunks true (launched
// after), the item is a chunk of a registered row. Returns the row; its
// entries (the chunk's) in [*begin, *end). Every lane of the warp calls it
// alike.
template <bool kChunks, typename index_t>
__device__ __forceinline__ int64_t row_or_chunk(const HubList& list, int64_t num_hubs,
                                                const index_t* __restrict__ rowptr,
                                                int64_t item, int64_t chunk_size, int lane,
                                                int64_t* begin, int64_t* end,
                                                bool* registered) {
  *registered = false;
  if constexpr (kChunks) {
    return list.hubs[hub_chunk_range(list, num_hubs, rowptr, item, chunk_size, begin, end)].row;
  } else {
    *begin = rowptr[item], *end = rowptr[item + 1];
    *registered = *end - *begin > chunk_size &&
                  register_hub(list, item, *end - *begin, chunk_size, lane);
    return item;
  }
}

// How many work items row_or_chunk's kernel walks: the rows (kChunks
// false), or the chunks of the registered rows (none where none is).
template <bool kChunks>
__device__ __forceinline__ int64_t row_or_chunk_items(const HubList& list, int64_t num_hubs,
                                                      int64_t num_rows) {
  if constexpr (kChunks) {
    return num_hubs > 0 ? hub_chunk_count(list) : 0;
  } else {
    return num_rows;
  }
}

}  // namespace pygio
