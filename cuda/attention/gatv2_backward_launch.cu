// Entry points of the GATv2 attention backward: checks, workspace (G per
// node and head, the two passes' hub lists and accumulators), the
// destination pass over a, then the source pass over a_t (each streamed
// where the forward's rows are and the pass's rows are short).
#include "../common/device_guard.h"
#include "../common/grid.h"
#include "attention_backward_layout.cuh"
#include "gatv2_backward_kernel.cuh"
#include "gatv2_dispatch.cuh"
#include "gatv2_streamed_backward.cuh"

namespace pygio {
namespace {

// Per-block grad_att sums live in shared memory up to this size; wider
// heads * channels add to grad_att in global memory directly.
constexpr size_t kMaxSharedAttBytes = 48 * 1024;

// The destination pass keeps A and B per hub, the source pass grad_x_l.
attention::BackwardLayout backward_layout(const pygio_gatv2_backward_params& p) {
  return attention::BackwardLayout(p, 2, 1);
}

int check_backward(const pygio_gatv2_backward_params& p, const char* entry) {
  PYGIO_TRY(gatv2::check_inputs(p, entry));
  PYGIO_TRY(gatv2::check_dropout(p.dropout_p, entry));
  PYGIO_TRY(check_csr(p.a_t, entry));
  PYGIO_CHECK_ARG(p.a_t.num_rows == p.a.num_cols && p.a_t.num_cols == p.a.num_rows &&
                      p.a_t.nnz == p.a.nnz && p.a_t.index_bits == p.a.index_bits,
                  entry_message(entry, "a_t must be the transpose of a"));
  PYGIO_CHECK_ARG(p.max_hubs >= 0 && p.max_hubs_t >= 0,
                  entry_message(entry, "max_hubs and max_hubs_t must be non-negative"));
  PYGIO_CHECK_ARG(p.grad_att != nullptr, entry_message(entry, "grad_att must not be NULL"));
  PYGIO_CHECK_ARG((p.edge == nullptr) == (p.grad_edge == nullptr),
                  entry_message(entry, "grad_edge must be given exactly when edge is"));
  if (p.a.num_rows > 0) {
    PYGIO_CHECK_ARG(p.lse != nullptr && p.grad_out != nullptr && p.grad_x_r != nullptr,
                    entry_message(entry, "lse, grad_out and grad_x_r must not be NULL"));
    PYGIO_TRY(check_row_stride(p.grad_x_r_row_stride, p.heads * p.channels, "grad_x_r", entry));
  }
  if (p.a.num_cols > 0) {
    PYGIO_CHECK_ARG(p.grad_x_l != nullptr && p.a_t.rowptr != nullptr && p.att != nullptr,
                    entry_message(entry, "grad_x_l, a_t.rowptr and att must not be NULL"));
    PYGIO_TRY(check_row_stride(p.grad_x_l_row_stride, p.heads * p.channels, "grad_x_l", entry));
  }
  PYGIO_CHECK_ARG(p.a.nnz == 0 || p.perm_t != nullptr,
                  entry_message(entry, "perm_t must not be NULL"));
  PYGIO_CHECK_ARG(backward_layout(p).total == 0 || p.workspace != nullptr,
                  entry_message(entry, "this call needs a workspace"));
  PYGIO_CHECK_ARG(gatv2::aligned(p.workspace),
                  entry_message(entry, "workspace must be 16-byte aligned"));
  return PYGIO_OK;
}

// The destination pass over the rows that are no hubs: streamed where the
// forward's rows are (streams_rows), else a warp per row.
template <typename Traits>
int launch_destination_rows(const pygio_gatv2_backward_params& p, const GatShape& shape,
                            const GatGradHubs& hubs, float* g, cudaStream_t stream) {
  if constexpr (kStreamTraits<Traits>) {
    if (streams_rows<Traits>(p, shape))
      return launch_streamed_backward_rows<Traits>(p, shape, hubs, g, stream);
  }
  unsigned grid = 0;
  PYGIO_TRY(attention::pass_grid<Traits>(gatv2_backward_rows_kernel<Traits>, p.a.num_rows,
                                         p.device, &grid));
  gatv2_backward_rows_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, shape,
                                                                                   hubs, g);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  return PYGIO_OK;
}

// The source pass over the sources that are no hubs: streamed where its
// shape and a_t's rows allow (streams_sources), else a warp per row.
template <typename Traits>
int launch_source_rows(const pygio_gatv2_backward_params& p, const GatShape& shape,
                       const GatGradHubs& hubs, const float* g, bool shared_att,
                       size_t shared_bytes, cudaStream_t stream) {
  if constexpr (kStreamTraits<Traits>) {
    if (streams_sources<Traits>(p, shape))
      return launch_streamed_backward_sources<Traits>(p, shape, hubs, g, stream);
  }
  unsigned grid = 0;
  PYGIO_TRY(attention::pass_grid<Traits>(gatv2_backward_sources_kernel<Traits>, p.a.num_cols,
                                         p.device, &grid, shared_bytes));
  gatv2_backward_sources_kernel<Traits><<<grid, Traits::kThreadsPerBlock, shared_bytes, stream>>>(
      p, shape, hubs, g, shared_att);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  return PYGIO_OK;
}

template <typename Traits>
int launch_backward(const pygio_gatv2_backward_params& p, const GatShape& shape,
                    cudaStream_t stream) {
  using scalar_t = typename Traits::scalar_t;
  constexpr int kThreads = Traits::kThreadsPerBlock;
  const attention::BackwardLayout layout = backward_layout(p);
  attention::BackwardWorkspace workspace;
  PYGIO_TRY(attention::bind_backward_workspace(p, layout, stream, &workspace));
  float* g = workspace.row_scalars;
  const GatGradHubs& hubs_a = workspace.hubs_a;
  const GatGradHubs& hubs_t = workspace.hubs_t;
  const size_t att_bytes = p.heads * p.channels * sizeof(float);
  const bool shared_att = att_bytes <= kMaxSharedAttBytes;
  const size_t shared_bytes = shared_att ? att_bytes : 0;
  PYGIO_CHECK_CUDA(cudaMemsetAsync(p.grad_att, 0, att_bytes, stream));
  unsigned grid = 0;
  // Destination pass: grad_x_r and G.
  if (p.a.num_rows > 0) PYGIO_TRY(launch_destination_rows<Traits>(p, shape, hubs_a, g, stream));
  if (layout.slots_a > 0) {
    PYGIO_TRY(resident_grid((p.a.nnz / kGatHubChunk + layout.slots_a) * shape.passes(), 1,
                            kThreads, p.device, &grid));  // for_each_hub_chunk's grid
    gatv2_backward_hub_rows_kernel<Traits><<<grid, kThreads, 0, stream>>>(p, shape, hubs_a, g);
    PYGIO_CHECK_CUDA(cudaGetLastError());
    PYGIO_TRY(resident_grid(layout.slots_a, Traits::kWarpsPerBlock, kThreads, p.device, &grid));
    gatv2_backward_hub_rows_finish_kernel<scalar_t>
        <<<grid, kThreads, 0, stream>>>(p, shape, hubs_a, g);
    PYGIO_CHECK_CUDA(cudaGetLastError());
  }
  // Source pass: grad_x_l, grad_edge and grad_att.
  if (p.a.num_cols > 0) {
    PYGIO_TRY(launch_source_rows<Traits>(p, shape, hubs_t, g, shared_att, shared_bytes, stream));
  }
  if (layout.slots_t > 0) {
    PYGIO_TRY(resident_grid((p.a.nnz / kGatHubChunk + layout.slots_t) * shape.passes(), 1,
                            kThreads, p.device, &grid));  // for_each_hub_chunk's grid
    gatv2_backward_hub_sources_kernel<Traits>
        <<<grid, kThreads, shared_bytes, stream>>>(p, shape, hubs_t, g, shared_att);
    PYGIO_CHECK_CUDA(cudaGetLastError());
    PYGIO_TRY(resident_grid(layout.slots_t, Traits::kWarpsPerBlock, kThreads, p.device, &grid));
    attention_hub_rows_finish_kernel<scalar_t><<<grid, kThreads, 0, stream>>>(
        hubs_t, p.heads * p.channels, 1,
        HubRowsOutput<scalar_t>{static_cast<scalar_t*>(p.grad_x_l), p.grad_x_l_row_stride},
        HubRowsOutput<scalar_t>{});
    PYGIO_CHECK_CUDA(cudaGetLastError());
  }
  return PYGIO_OK;
}

}  // namespace
}  // namespace pygio

extern "C" int pygio_gatv2_backward_workspace_size(const pygio_gatv2_backward_params* params,
                                                   size_t* bytes) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_CHECK_ARG(bytes != nullptr, entry_message(__func__, "bytes must not be NULL"));
  PYGIO_TRY(gatv2::check_inputs(*params, __func__));
  PYGIO_CHECK_ARG(params->max_hubs >= 0 && params->max_hubs_t >= 0,
                  entry_message(__func__, "max_hubs and max_hubs_t must be non-negative"));
  *bytes = backward_layout(*params).total;
  return ok();
}

extern "C" int pygio_gatv2_backward(const pygio_gatv2_backward_params* params) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_TRY(check_backward(*params, __func__));
  const pygio_gatv2_backward_params& p = *params;
  gatv2::Plan plan;
  PYGIO_TRY(gatv2::make_plan(
      p.dtype, p.heads, p.channels, gatv2::kGatv2WidePieces,
      {p.x_l_row_stride, p.x_r_row_stride, p.grad_x_l_row_stride, p.grad_x_r_row_stride,
       p.heads * p.channels},
      {p.x_l, p.x_r, p.edge, p.grad_out, p.grad_x_l, p.grad_x_r, p.grad_edge}, __func__,
      &plan));
  DeviceGuard guard;
  PYGIO_TRY(guard.set(p.device));
  const auto stream = static_cast<cudaStream_t>(p.stream);
  PYGIO_TRY((gatv2::dispatch<gatv2::kGatv2NoEdgePieces, gatv2::kGatv2NoEdgeSingles>(
      p, plan, [&](auto traits, const GatShape& s) {
        return launch_backward<decltype(traits)>(p, s, stream);
      })));
  return ok();
}
