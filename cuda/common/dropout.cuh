// Counter-based dropout: the keep/drop decision for (edge, head) is a pure
// function of (seed, edge, head), so a backward pass regenerates the
// forward's mask instead of storing it.
//
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC'11) with key = (seed low, seed high) and counter = (edge low, edge
// high, head, 0); the first output word u gives the uniform
// (u >> 8) * 2^-24 in [0, 1), and the entry is kept where it is >= p.
// `edge` is the entry's position in the CSR (destination-major) order, in
// every pass. pyg_ioaware.ops.dropout.keep_mask is the same function in
// plain torch (the CPU path and the tests' oracle).
#pragma once

#include <stdint.h>

namespace pygio {

struct Philox4x32 {
  uint32_t x[4];
};

__host__ __device__ __forceinline__ uint32_t mulhilo32(uint32_t a, uint32_t b, uint32_t* hi) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(product >> 32);
  return static_cast<uint32_t>(product);
}

// Ten rounds of Philox4x32 on `counter` under `key`.
__host__ __device__ __forceinline__ Philox4x32 philox4x32_10(Philox4x32 counter, uint32_t key0,
                                                             uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = mulhilo32(kMul0, counter.x[0], &hi0);
    const uint32_t lo1 = mulhilo32(kMul1, counter.x[2], &hi1);
    counter = {{hi1 ^ counter.x[1] ^ key0, lo1, hi0 ^ counter.x[3] ^ key1, lo0}};
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return counter;
}

// Whether entry `edge` (CSR position) of head `head` survives dropout with
// drop probability `p` under `seed`.
__host__ __device__ __forceinline__ bool dropout_keep(uint64_t seed, int64_t edge, int head,
                                                      float p) {
  const uint64_t e = static_cast<uint64_t>(edge);
  const Philox4x32 out = philox4x32_10(
      {{static_cast<uint32_t>(e), static_cast<uint32_t>(e >> 32), static_cast<uint32_t>(head), 0u}},
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  const float uniform = static_cast<float>(out.x[0] >> 8) * (1.0f / 16777216.0f);
  return uniform >= p;
}

}  // namespace pygio
