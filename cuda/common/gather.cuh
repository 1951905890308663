// Column indices for the gather loops of the SpMM and min/max kernels.
//
// Those loops take U entries a step (e0, e0 + stride, ...) and gather the
// feature row x[col[e]] of each: the gather depends on the index load, so
// a step that loads its own indices waits for two round trips to memory.
// The loops load the next step's indices (load_sources) right after
// issuing this step's gathers, so each step waits for one.
#pragma once

#include <stdint.h>

namespace pygio {

// src[u] = col[e0 + stride * u] for the entries before end, -1 past it.
template <int U, typename index_t>
__device__ __forceinline__ void load_sources(const index_t* __restrict__ col, int64_t e0,
                                             int64_t end, int64_t stride, index_t (&src)[U]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t e = e0 + stride * u;
    src[u] = e < end ? col[e] : index_t(-1);
  }
}

}  // namespace pygio
