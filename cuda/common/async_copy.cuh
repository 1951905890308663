// Asynchronous copies of 16 (or 4) bytes from global to shared memory
// (cp.async, sm_80 and later): a thread issues copies, groups them, and
// later waits for all but its newest groups. A copy is visible to the
// thread that issued it once its group is waited for; loads in flight this
// way hold no registers, so a warp can keep many gathered rows on their
// way.
#pragma once

namespace pygio {

// Starts copying 16 bytes at `global` (16-byte aligned) to `shared`.
__device__ __forceinline__ void copy_async_16(void* shared, const void* global) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(global));
}

// Starts copying 4 bytes at `global` (4-byte aligned) to `shared` (through
// L1: cp.async takes only 16 bytes past it).
__device__ __forceinline__ void copy_async_4(void* shared, const void* global) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(address), "l"(global));
}

// Closes the group of the copies this thread started since the last call
// (an empty group where it started none).
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `kPending` of this thread's newest groups are still
// in flight.
template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace pygio
