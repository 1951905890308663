// The workspace of an attention-family backward (host side, shared by its
// members): a per (destination, head) fp32 scalar the source pass reads
// (GATv2's G, the transformer's Delta); then, where either pass splits hub
// rows, the two hub counters and both passes' fp32 accumulators (zeroed by
// one memset), then both hub lists. And the grid of its passes' row
// kernels.
#pragma once

#include <stdint.h>

#include "../common/grid.h"
#include "../common/status.h"
#include "gatv2_dispatch.cuh"
#include "gatv2_traits.cuh"

namespace pygio {
namespace attention {

// The grid of a backward pass's row kernel over `rows` rows (a warp a
// row): in 16-bit one wave of the kernel's own resident blocks (3 an SM
// where a lane holds one piece of a head), in fp32 the thread limit's
// (several waves). H200, one wave against several: bf16 GATv2 (2, 64)
// backward arxiv-like 1.44 -> 1.40 ms, pokec-like 20.0 -> 18.9, web-like
// 15.2 -> 14.7; transformer (4, 128) arxiv-like 3.71 -> 3.42, web-like 33.4
// -> 32.3. In fp32 one wave moved them by -2% to +2% (transformer
// arxiv-like 4.56 -> 4.63).
template <typename Traits, typename... Args>
int pass_grid(void (*kernel)(Args...), int64_t rows, int device, unsigned* grid,
              size_t shared_bytes = 0) {
  if constexpr (sizeof(typename Traits::scalar_t) == 2)
    return resident_grid(kernel, rows, Traits::kWarpsPerBlock, Traits::kThreadsPerBlock, device,
                         grid, shared_bytes);
  else
    return resident_grid(rows, Traits::kWarpsPerBlock, Traits::kThreadsPerBlock, device, grid);
}

// Hub slots of one pass over a structure of `rows` rows: at most max_hubs,
// and no more rows than can hold more than PYGIO_ATTENTION_MIN_HUB_DEGREE
// entries.
inline int64_t hub_slots(const int64_t* degree, int64_t max_hubs, int64_t nnz, int64_t rows) {
  if (degree == nullptr || nnz == 0) return 0;
  const int64_t bound = nnz / (PYGIO_ATTENTION_MIN_HUB_DEGREE + 1);
  const int64_t slots = max_hubs < bound ? max_hubs : bound;
  return slots < rows ? slots : rows;
}

// Byte offsets into the workspace of a backward over P (a, heads, channels,
// hub_degree, max_hubs, hub_degree_t, max_hubs_t) whose destination pass
// keeps `rows_rows` fp32 rows of heads * channels per hub and whose source
// pass keeps `source_rows`.
struct BackwardLayout {
  int64_t slots_a, slots_t;
  size_t counters, acc_a, acc_t, list_a, list_t, zeroed_bytes, total;

  template <typename P>
  BackwardLayout(const P& p, int rows_rows, int source_rows) {
    const size_t width = static_cast<size_t>(p.heads * p.channels);
    slots_a = hub_slots(p.hub_degree, p.max_hubs, p.a.nnz, p.a.num_rows);
    slots_t = hub_slots(p.hub_degree_t, p.max_hubs_t, p.a.nnz, p.a.num_cols);
    counters = gatv2::round_up(p.a.num_rows * p.heads * sizeof(float));
    acc_a = counters + gatv2::kAlign;
    acc_t = acc_a + gatv2::round_up(rows_rows * slots_a * width * sizeof(float));
    list_a = acc_t + gatv2::round_up(source_rows * slots_t * width * sizeof(float));
    list_t = list_a + gatv2::round_up(slots_a * sizeof(HubEntry));
    zeroed_bytes = list_a - counters;
    total = slots_a + slots_t == 0 ? counters
                                   : list_t + gatv2::round_up(slots_t * sizeof(HubEntry));
  }
};

// The workspace of a backward over P bound to its parts: the per (row,
// head) scalars and both passes' hub lists and accumulators (their
// counters and accumulators zeroed on `stream`; lists of capacity 0 where
// a pass splits no rows).
struct BackwardWorkspace {
  float* row_scalars;  // [num_rows, heads]
  GatGradHubs hubs_a;  // rows of a
  GatGradHubs hubs_t;  // rows of a_t
};

template <typename P>
int bind_backward_workspace(const P& p, const BackwardLayout& layout, cudaStream_t stream,
                            BackwardWorkspace* w) {
  auto* base = static_cast<char*>(p.workspace);
  w->row_scalars = reinterpret_cast<float*>(base);
  w->hubs_a = GatGradHubs{HubList{nullptr, nullptr, 0}, p.hub_degree, nullptr};
  w->hubs_t = GatGradHubs{HubList{nullptr, nullptr, 0}, p.hub_degree_t, nullptr};
  if (layout.slots_a + layout.slots_t == 0) return PYGIO_OK;
  auto* counters = reinterpret_cast<unsigned long long*>(base + layout.counters);
  if (layout.slots_a > 0) {
    w->hubs_a.list =
        HubList{counters, reinterpret_cast<HubEntry*>(base + layout.list_a), layout.slots_a};
    w->hubs_a.acc = reinterpret_cast<float*>(base + layout.acc_a);
  }
  if (layout.slots_t > 0) {
    w->hubs_t.list =
        HubList{counters + 1, reinterpret_cast<HubEntry*>(base + layout.list_t), layout.slots_t};
    w->hubs_t.acc = reinterpret_cast<float*>(base + layout.acc_t);
  }
  PYGIO_CHECK_CUDA(cudaMemsetAsync(base + layout.counters, 0, layout.zeroed_bytes, stream));
  return PYGIO_OK;
}

}  // namespace attention
}  // namespace pygio
