// Host side of attention_forward.cuh, shared by the attention family's
// forward and attention-weights entries: the workspace layout (hub list,
// chunk states), the checks of the fields every forward has, and the
// launches. P: the member's params struct (a, heads, channels, hub_degree,
// max_hubs, out, lse, workspace, device; alpha params: a, lse, alpha).
#pragma once

#include "../common/abi.h"
#include "../common/grid.h"
#include "attention_backward_layout.cuh"
#include "attention_forward.cuh"
#include "gatv2_dispatch.cuh"

namespace pygio {
namespace attention {

using gatv2::round_up;

// Hub slots of a forward (over the rows of a).
template <typename P>
int64_t hub_slots(const P& p) {
  return hub_slots(p.hub_degree, p.max_hubs, p.a.nnz, p.a.num_rows);
}

// Chunks the hub list can count: every entry of a row that tried to
// register in a full chunk but one per such row (rows refused by a full
// list count theirs too, so the bound takes every row that can be a hub).
template <typename P>
int64_t max_chunks(const P& p) {
  return p.a.nnz / kGatHubChunk + p.a.nnz / (PYGIO_ATTENTION_MIN_HUB_DEGREE + 1) + 1;
}

// Layout: counter, hub list, chunk (m, l) stats, chunk accumulators.
template <typename P>
size_t stats_offset(const P& p) {
  return gatv2::kAlign + round_up(hub_slots(p) * sizeof(HubEntry));
}
template <typename P>
size_t partial_offset(const P& p) {
  return stats_offset(p) + round_up(max_chunks(p) * p.heads * 2 * sizeof(float));
}
template <typename P>
size_t forward_workspace_bytes(const P& p) {
  if (hub_slots(p) == 0) return 0;
  return partial_offset(p) + round_up(max_chunks(p) * p.heads * p.channels * sizeof(float));
}

// The checks of max_hubs, out, lse and the workspace (the member checks its inputs).
template <typename P>
int check_forward_outputs(const P& p, const char* entry) {
  PYGIO_CHECK_ARG(p.max_hubs >= 0, entry_message(entry, "max_hubs must be non-negative"));
  if (p.a.num_rows == 0) return PYGIO_OK;
  PYGIO_CHECK_ARG(p.out != nullptr && p.lse != nullptr,
                  entry_message(entry, "out and lse must not be NULL"));
  PYGIO_CHECK_ARG(forward_workspace_bytes(p) == 0 || p.workspace != nullptr,
                  entry_message(entry, "this call needs a workspace"));
  PYGIO_CHECK_ARG(gatv2::aligned(p.workspace),
                  entry_message(entry, "workspace must be 16-byte aligned"));
  return PYGIO_OK;
}

// Launches attention_rows_kernel: the rows of a forward that are no hubs.
template <typename Family, typename Traits, typename P>
int launch_rows(const P& p, const GatShape& shape, const GatHubs& hubs, cudaStream_t stream) {
  unsigned grid = 0;
  PYGIO_TRY(resident_grid(p.a.num_rows, Traits::kWarpsPerBlock, Traits::kThreadsPerBlock,
                          p.device, &grid));
  attention_rows_kernel<Family, Traits, P>
      <<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, shape, hubs);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  return PYGIO_OK;
}

// A forward: its rows by rows(hubs) (a launch like launch_rows, for a
// member with a rows kernel of its own), then the hub kernels.
template <typename Family, typename Traits, typename P, typename LaunchRows>
int launch_forward(const P& p, const GatShape& shape, cudaStream_t stream, LaunchRows rows) {
  const int64_t slots = hub_slots(p);
  GatHubs hubs{HubList{nullptr, nullptr, 0}, p.hub_degree, nullptr, nullptr};
  if (slots > 0) {
    auto* base = static_cast<char*>(p.workspace);
    hubs.list = HubList{reinterpret_cast<unsigned long long*>(base),
                        reinterpret_cast<HubEntry*>(base + gatv2::kAlign), slots};
    hubs.stats = reinterpret_cast<float*>(base + stats_offset(p));
    hubs.partial = reinterpret_cast<float*>(base + partial_offset(p));
    PYGIO_CHECK_CUDA(cudaMemsetAsync(base, 0, gatv2::kAlign, stream));
  }
  PYGIO_TRY(rows(hubs));
  if (slots == 0) return PYGIO_OK;
  unsigned grid = 0;
  PYGIO_TRY(resident_grid(max_chunks(p) * p.heads, 1, Traits::kThreadsPerBlock, p.device,
                          &grid));  // for_each_hub_chunk's grid, the same for both forms
  attention_hub_chunks_kernel<Family, Traits, P, false>
      <<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, shape, hubs);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  attention_hub_chunks_kernel<Family, Traits, P, true>
      <<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, shape, hubs);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  PYGIO_TRY(resident_grid(slots * p.heads, Traits::kWarpsPerBlock, Traits::kThreadsPerBlock,
                          p.device, &grid));
  attention_hub_finish_kernel<typename Traits::scalar_t, typename Traits::index_t, P>
      <<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, shape, hubs);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  return PYGIO_OK;
}

// A forward with attention_rows_kernel for its rows.
template <typename Family, typename Traits, typename P>
int launch_forward(const P& p, const GatShape& shape, cudaStream_t stream) {
  return launch_forward<Family, Traits>(p, shape, stream, [&](const GatHubs& hubs) {
    return launch_rows<Family, Traits>(p, shape, hubs, stream);
  });
}

template <typename P>
int check_alpha_outputs(const P& p, const char* entry) {
  if (p.a.nnz == 0) return PYGIO_OK;
  PYGIO_CHECK_ARG(p.lse != nullptr && p.alpha != nullptr,
                  entry_message(entry, "lse and alpha must not be NULL"));
  return PYGIO_OK;
}

template <typename Family, typename Traits, typename P>
int launch_alpha(const P& p, const GatShape& shape, cudaStream_t stream) {
  unsigned grid = 0;
  PYGIO_TRY(resident_grid((p.a.nnz + kGatAlphaChunk - 1) / kGatAlphaChunk, Traits::kWarpsPerBlock,
                          Traits::kThreadsPerBlock, p.device, &grid));
  attention_alpha_kernel<Family, Traits, P><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, shape);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  return PYGIO_OK;
}

}  // namespace attention
}  // namespace pygio
