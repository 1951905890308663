// The workspace of an attention-family backward (host side, shared by its
// members): a per (destination, head) fp32 scalar the source pass reads
// (GATv2's G, the transformer's Delta); then, where either pass splits hub
// rows, the two hub counters and both passes' fp32 accumulators (zeroed by
// one memset), then both hub lists.
#pragma once

#include <stdint.h>

#include "../common/status.h"
#include "gatv2_dispatch.cuh"
#include "gatv2_traits.cuh"

namespace pygio {
namespace attention {

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
