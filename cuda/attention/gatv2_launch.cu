// Entry points of the GATv2 attention forward and attention weights:
// checks, workspace layout (hub list and chunk states), launches.
#include "../common/device_guard.h"
#include "../common/grid.h"
#include "gatv2_dispatch.cuh"
#include "gatv2_kernel.cuh"

namespace pygio {
namespace {

using gatv2::round_up;

// Hub slots of a forward: at most max_hubs, and no more rows than can hold
// more than PYGIO_ATTENTION_MIN_HUB_DEGREE entries.
int64_t hub_slots(const pygio_gatv2_params& p) {
  if (p.hub_degree == nullptr || p.a.nnz == 0) return 0;
  const int64_t bound = p.a.nnz / (PYGIO_ATTENTION_MIN_HUB_DEGREE + 1);
  const int64_t slots = p.max_hubs < bound ? p.max_hubs : bound;
  return slots < p.a.num_rows ? slots : p.a.num_rows;
}

// Chunks the hub list can count: every entry of a row that tried to
// register in a full chunk but one per such row (rows refused by a full
// list count theirs too, so the bound takes every row that can be a hub).
int64_t max_chunks(const pygio_gatv2_params& p) {
  return p.a.nnz / kGatHubChunk + p.a.nnz / (PYGIO_ATTENTION_MIN_HUB_DEGREE + 1) + 1;
}

// Layout: counter, hub list, chunk (m, l) stats, chunk accumulators.
size_t stats_offset(const pygio_gatv2_params& p) {
  return gatv2::kAlign + round_up(hub_slots(p) * sizeof(HubEntry));
}
size_t partial_offset(const pygio_gatv2_params& p) {
  return stats_offset(p) + round_up(max_chunks(p) * p.heads * 2 * sizeof(float));
}
size_t forward_workspace_bytes(const pygio_gatv2_params& p) {
  if (hub_slots(p) == 0) return 0;
  return partial_offset(p) + round_up(max_chunks(p) * p.heads * p.channels * sizeof(float));
}

int check_forward(const pygio_gatv2_params& p, const char* entry) {
  PYGIO_TRY(gatv2::check_inputs(p, entry));
  PYGIO_TRY(gatv2::check_dropout(p.dropout_p, entry));
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

template <typename Traits>
int launch_forward(const pygio_gatv2_params& p, const GatShape& shape, cudaStream_t stream) {
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
  unsigned grid = 0;
  PYGIO_TRY(resident_grid(p.a.num_rows, Traits::kWarpsPerBlock, Traits::kThreadsPerBlock,
                          p.device, &grid));
  gatv2_rows_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, shape, hubs);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  if (slots == 0) return PYGIO_OK;
  PYGIO_TRY(resident_grid(max_chunks(p) * p.heads, Traits::kWarpsPerBlock,
                          Traits::kThreadsPerBlock, p.device, &grid));
  gatv2_hub_chunks_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, shape, hubs);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  PYGIO_TRY(resident_grid(slots * p.heads, Traits::kWarpsPerBlock, Traits::kThreadsPerBlock,
                          p.device, &grid));
  gatv2_hub_finish_kernel<typename Traits::scalar_t, typename Traits::index_t>
      <<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, shape, hubs);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  return PYGIO_OK;
}

int check_alpha(const pygio_gatv2_alpha_params& p, const char* entry) {
  PYGIO_TRY(gatv2::check_inputs(p, entry));
  if (p.a.nnz == 0) return PYGIO_OK;
  PYGIO_CHECK_ARG(p.lse != nullptr && p.alpha != nullptr,
                  entry_message(entry, "lse and alpha must not be NULL"));
  return PYGIO_OK;
}

template <typename Traits>
int launch_alpha(const pygio_gatv2_alpha_params& p, const GatShape& shape, cudaStream_t stream) {
  unsigned grid = 0;
  PYGIO_TRY(resident_grid((p.a.nnz + kGatAlphaChunk - 1) / kGatAlphaChunk, Traits::kWarpsPerBlock,
                          Traits::kThreadsPerBlock, p.device, &grid));
  gatv2_alpha_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, shape);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  return PYGIO_OK;
}

}  // namespace
}  // namespace pygio

extern "C" int pygio_gatv2_workspace_size(const pygio_gatv2_params* params, size_t* bytes) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_CHECK_ARG(bytes != nullptr, entry_message(__func__, "bytes must not be NULL"));
  PYGIO_TRY(gatv2::check_inputs(*params, __func__));
  PYGIO_CHECK_ARG(params->max_hubs >= 0,
                  entry_message(__func__, "max_hubs must be non-negative"));
  *bytes = forward_workspace_bytes(*params);
  return ok();
}

extern "C" int pygio_gatv2(const pygio_gatv2_params* params) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_TRY(check_forward(*params, __func__));
  const pygio_gatv2_params& p = *params;
  if (p.a.num_rows == 0) return ok();
  gatv2::Plan plan;
  PYGIO_TRY(gatv2::make_plan(p.dtype, p.heads, p.channels,
                             {p.x_l_row_stride, p.x_r_row_stride, p.heads * p.channels},
                             {p.x_l, p.x_r, p.edge, p.out}, __func__, &plan));
  DeviceGuard guard;
  PYGIO_TRY(guard.set(p.device));
  const auto stream = static_cast<cudaStream_t>(p.stream);
  PYGIO_TRY(gatv2::dispatch(p, plan, [&](auto traits, const GatShape& s) {
    return launch_forward<decltype(traits)>(p, s, stream);
  }));
  return ok();
}

extern "C" int pygio_gatv2_alpha(const pygio_gatv2_alpha_params* params) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_TRY(check_alpha(*params, __func__));
  const pygio_gatv2_alpha_params& p = *params;
  if (p.a.nnz == 0) return ok();
  gatv2::Plan plan;
  PYGIO_TRY(gatv2::make_plan(p.dtype, p.heads, p.channels,
                             {p.x_l_row_stride, p.x_r_row_stride, p.heads * p.channels},
                             {p.x_l, p.x_r, p.edge}, __func__, &plan));
  DeviceGuard guard;
  PYGIO_TRY(guard.set(p.device));
  const auto stream = static_cast<cudaStream_t>(p.stream);
  PYGIO_TRY(gatv2::dispatch(p, plan, [&](auto traits, const GatShape& s) {
    return launch_alpha<decltype(traits)>(p, s, stream);
  }));
  return ok();
}
