// Binary searches over a non-decreasing sequence given by key(i), shared by
// the kernels that find rows in row pointers, edges in grouped edge lists
// and hub chunks in hub lists.
#pragma once

#include <stdint.h>

namespace pygio {

// The last index i in [0, count) with key(i) <= target (key non-decreasing,
// key(0) <= target).
template <typename Key>
__device__ __forceinline__ int64_t last_at_most(int64_t count, int64_t target, Key key) {
  int64_t lo = 0, hi = count - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (key(mid) <= target) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// The first index i in [low, high) with key(i) >= target (high where none;
// key non-decreasing there).
template <typename Key>
__device__ __forceinline__ int64_t first_at_least(int64_t low, int64_t high, long long target,
                                                  Key key) {
  while (low < high) {
    const int64_t mid = low + (high - low) / 2;
    if (key(mid) < target) low = mid + 1; else high = mid;
  }
  return low;
}

// The first index i in [low, high) with key(i) > target (high where none;
// key non-decreasing there).
template <typename Key>
__device__ __forceinline__ int64_t first_above(int64_t low, int64_t high, long long target,
                                               Key key) {
  while (low < high) {
    const int64_t mid = low + (high - low) / 2;
    if (key(mid) <= target) low = mid + 1; else high = mid;
  }
  return low;
}

}  // namespace pygio
