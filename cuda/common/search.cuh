// Binary search over a monotone predicate, shared by the kernels that find
// rows in row pointers, edges in grouped edge lists and hub chunks in hub
// lists.
#pragma once

#include <stdint.h>

namespace pygio {

// The first index i in [low, high) where pred(i) holds (high where none);
// pred is false, then true, over [low, high).
template <typename Pred>
__device__ __forceinline__ int64_t first_true(int64_t low, int64_t high, Pred pred) {
  while (low < high) {
    const int64_t mid = low + (high - low) / 2;
    if (pred(mid)) high = mid; else low = mid + 1;
  }
  return low;
}

// The last index i in [0, count) with key(i) <= target (key non-decreasing,
// key(0) <= target).
template <typename Key>
__device__ __forceinline__ int64_t last_at_most(int64_t count, int64_t target, Key key) {
  return first_true(1, count, [&](int64_t i) { return key(i) > target; }) - 1;
}

}  // namespace pygio
