// Entry points of graph-transformer attention: forward and attention
// weights (attention_forward_launch.cuh with TransformerFamily) and the
// backward (workspace: Delta per node and head, the two passes' hub lists
// and accumulators; the destination pass over a, then the source pass over
// a_t).
#include <math.h>

#include "../common/device_guard.h"
#include "attention_backward_layout.cuh"
#include "attention_forward_launch.cuh"
#include "gatv2_dispatch.cuh"
#include "transformer_backward_kernel.cuh"
#include "transformer_kernel.cuh"

namespace pygio {
namespace {

// The transformer forward's wide_pieces for gatv2::make_plan (attention
// weights too), every dtype: up to 4 pieces a lane where that puts more
// heads in one pass. H100, (4, 128)
// (one pass instead of four in fp32, two in 16-bit), ms fwd / bwd:
// arxiv-like fp32 2.50 / 6.10 -> 1.81 / 5.57, bf16 2.18 / 5.05 -> 1.83 /
// 4.11; pokec-like fp32 51.2 / 125.5 -> 48.4 / 115.3, bf16 38.3 / 84.9 ->
// 32.6 / 72.5 (2 pieces: the same but pokec-like fp32 forward 52.2).
constexpr int kTransformerWidePieces = 4;

// The backward's: 2 in fp32, 4 in 16-bit. With the backward kernels'
// register bound (transformer_backward_min_blocks), fp32 (4, 128) in two
// passes of 2 pieces a lane, 24 warps an SM, against one pass of 4 pieces
// at 8 (H200, ms: arxiv-like 4.87 -> 4.61, pokec-like 95.1 -> 82.3,
// web-like 51.9 -> 45.5; 4 pieces at 16 warps: 4.55, 94.8, -); 16-bit
// keeps one pass of 2 pieces a lane (bf16 3.69 -> 3.72, 66.0 -> 59.5,
// 36.1 -> 33.6 with its prefetch).
inline int transformer_backward_wide_pieces(int32_t dtype) {
  return dtype == PYGIO_FLOAT32 ? 2 : kTransformerWidePieces;
}

// kNoEdgePieces (gatv2::dispatch) of the forward and weights entries, and
// of the backward. (4, 128), the kernels without an edge path against those
// with it, no edge attributes: backward bf16 (four pieces a lane) H200
// pokec-like 57.0 -> 43.4 ms, web-like 32.2 -> 25.4, arxiv-like 3.40 ->
// 2.60; fp32 (two pieces) 82.4 -> 78.4, 45.5 -> 42.0, 4.52 -> 4.12. The
// forward (four pieces) went the other way in bf16 (H100: 28.1 -> 36.4 ms
// on pokec-like, 1.39 -> 1.57 on arxiv-like; fp32 1-2% faster), so it
// keeps the edge path: ncu (H200, pokec-like) counted 969M local-memory
// (spill) requests in its rows kernel without the path against 350M with
// it, though ptxas reports fewer spill bytes (436 against 708): its spills
// moved into the walk. kNoEdgeSingles of all three: one channel a load
// (odd head sizes, as a 7- or 47-class output layer) drops the path in
// every entry, faster in every case timed (H200, ms forward / backward,
// with the path -> without: arxiv-like (1, 47) fp32 0.56 / 1.19 -> 0.51 /
// 1.06, (2, 47) bf16 1.76 / 1.70 -> 0.96 / 1.32, web-like (2, 47) bf16
// 24.3 / 17.8 -> 10.9 / 14.7, (1, 7) fp32 3.93 / 6.04 -> 3.62 / 5.33).
constexpr int kTransformerNoEdgePieces = 0;
constexpr int kTransformerBackwardNoEdgePieces = 4;
constexpr int kTransformerNoEdgeSingles = gatv2::kMaxPieces;

// Checks of the fields the three entries share (no device access): the
// CSR, dtype, heads and channels, q and k with their row strides, scale.
template <typename P>
int check_shared(const P& p, const char* entry) {
  PYGIO_TRY(check_csr(p.a, entry));
  PYGIO_CHECK_ARG(p.dtype == PYGIO_FLOAT32 || p.dtype == PYGIO_FLOAT16 ||
                      p.dtype == PYGIO_BFLOAT16,
                  entry_message(entry, "dtype must be float32, float16 or bfloat16, got code " +
                                           std::to_string(p.dtype)));
  PYGIO_CHECK_ARG(p.heads > 0 && p.channels > 0,
                  entry_message(entry, "heads and channels must be positive"));
  PYGIO_CHECK_ARG(isfinite(p.scale), entry_message(entry, "scale must be finite"));
  if (p.a.num_rows > 0) {
    PYGIO_CHECK_ARG(p.a.rowptr != nullptr && p.q != nullptr,
                    entry_message(entry, "rowptr and q must not be NULL"));
    PYGIO_TRY(check_row_stride(p.q_row_stride, p.heads * p.channels, "q", entry));
  }
  if (p.a.nnz > 0) {
    PYGIO_CHECK_ARG(p.k != nullptr, entry_message(entry, "k must not be NULL"));
    PYGIO_TRY(check_row_stride(p.k_row_stride, p.heads * p.channels, "k", entry));
  }
  return PYGIO_OK;
}

// v, read by the forward and the backward.
template <typename P>
int check_values(const P& p, const char* entry) {
  if (p.a.nnz == 0) return PYGIO_OK;
  PYGIO_CHECK_ARG(p.v != nullptr, entry_message(entry, "v must not be NULL"));
  return check_row_stride(p.v_row_stride, p.heads * p.channels, "v", entry);
}

int check_forward(const pygio_transformer_params& p, const char* entry) {
  PYGIO_TRY(check_shared(p, entry));
  PYGIO_TRY(check_values(p, entry));
  PYGIO_TRY(gatv2::check_dropout(p.dropout_p, entry));
  return attention::check_forward_outputs(p, entry);
}

// The backward's workspace: Delta per (row, head); per hub, grad_q in the
// destination pass and grad_k, grad_v in the source pass.
attention::BackwardLayout backward_layout(const pygio_transformer_backward_params& p) {
  return attention::BackwardLayout(p, 1, 2);
}

int check_backward(const pygio_transformer_backward_params& p, const char* entry) {
  PYGIO_TRY(check_shared(p, entry));
  PYGIO_TRY(check_values(p, entry));
  PYGIO_TRY(gatv2::check_dropout(p.dropout_p, entry));
  PYGIO_TRY(check_csr(p.a_t, entry));
  PYGIO_CHECK_ARG(p.a_t.num_rows == p.a.num_cols && p.a_t.num_cols == p.a.num_rows &&
                      p.a_t.nnz == p.a.nnz && p.a_t.index_bits == p.a.index_bits,
                  entry_message(entry, "a_t must be the transpose of a"));
  PYGIO_CHECK_ARG((p.edge == nullptr) == (p.grad_edge == nullptr),
                  entry_message(entry, "grad_edge must be given exactly when edge is"));
  if (p.a.num_rows > 0) {
    PYGIO_CHECK_ARG(p.out != nullptr && p.lse != nullptr && p.grad_out != nullptr &&
                        p.grad_q != nullptr,
                    entry_message(entry, "out, lse, grad_out and grad_q must not be NULL"));
    PYGIO_TRY(check_row_stride(p.grad_q_row_stride, p.heads * p.channels, "grad_q", entry));
  }
  if (p.a.num_cols > 0) {
    PYGIO_CHECK_ARG(p.grad_k != nullptr && p.grad_v != nullptr && p.a_t.rowptr != nullptr &&
                        p.k != nullptr && p.v != nullptr,
                    entry_message(entry, "grad_k, grad_v, a_t.rowptr, k and v must not be NULL"));
    PYGIO_TRY(check_row_stride(p.k_row_stride, p.heads * p.channels, "k", entry));
    PYGIO_TRY(check_row_stride(p.v_row_stride, p.heads * p.channels, "v", entry));
    PYGIO_TRY(check_row_stride(p.grad_k_row_stride, p.heads * p.channels, "grad_k", entry));
    PYGIO_TRY(check_row_stride(p.grad_v_row_stride, p.heads * p.channels, "grad_v", entry));
  }
  PYGIO_CHECK_ARG(p.a.nnz == 0 || p.perm_t != nullptr,
                  entry_message(entry, "perm_t must not be NULL"));
  PYGIO_CHECK_ARG(p.max_hubs >= 0 && p.max_hubs_t >= 0,
                  entry_message(entry, "max_hubs and max_hubs_t must be non-negative"));
  PYGIO_CHECK_ARG(backward_layout(p).total == 0 || p.workspace != nullptr,
                  entry_message(entry, "this call needs a workspace"));
  PYGIO_CHECK_ARG(gatv2::aligned(p.workspace),
                  entry_message(entry, "workspace must be 16-byte aligned"));
  return PYGIO_OK;
}

template <typename Traits>
int launch_backward(const pygio_transformer_backward_params& p, const GatShape& shape,
                    cudaStream_t stream) {
  using scalar_t = typename Traits::scalar_t;
  constexpr int kThreads = Traits::kThreadsPerBlock;
  const attention::BackwardLayout layout = backward_layout(p);
  attention::BackwardWorkspace workspace;
  PYGIO_TRY(attention::bind_backward_workspace(p, layout, stream, &workspace));
  float* delta = workspace.row_scalars;
  const GatGradHubs& hubs_a = workspace.hubs_a;
  const GatGradHubs& hubs_t = workspace.hubs_t;
  const int64_t width = p.heads * p.channels;
  unsigned grid = 0;
  // Destination pass: grad_q and Delta.
  if (p.a.num_rows > 0) {
    PYGIO_TRY(attention::pass_grid<Traits>(transformer_backward_rows_kernel<Traits>, p.a.num_rows,
                                           p.device, &grid));
    transformer_backward_rows_kernel<Traits>
        <<<grid, kThreads, 0, stream>>>(p, shape, hubs_a, delta);
    PYGIO_CHECK_CUDA(cudaGetLastError());
  }
  if (layout.slots_a > 0) {
    PYGIO_TRY(resident_grid((p.a.nnz / kGatHubChunk + layout.slots_a) * shape.passes(), 1,
                            kThreads, p.device, &grid));  // for_each_hub_chunk's grid
    transformer_backward_hub_rows_kernel<Traits>
        <<<grid, kThreads, 0, stream>>>(p, shape, hubs_a, delta);
    PYGIO_CHECK_CUDA(cudaGetLastError());
    PYGIO_TRY(resident_grid(layout.slots_a, Traits::kWarpsPerBlock, kThreads, p.device, &grid));
    attention_hub_rows_finish_kernel<scalar_t><<<grid, kThreads, 0, stream>>>(
        hubs_a, width, 1,
        HubRowsOutput<scalar_t>{static_cast<scalar_t*>(p.grad_q), p.grad_q_row_stride},
        HubRowsOutput<scalar_t>{});
    PYGIO_CHECK_CUDA(cudaGetLastError());
  }
  // Source pass: grad_k, grad_v and grad_edge.
  if (p.a.num_cols > 0) {
    PYGIO_TRY(attention::pass_grid<Traits>(transformer_backward_sources_kernel<Traits>,
                                           p.a.num_cols, p.device, &grid));
    transformer_backward_sources_kernel<Traits>
        <<<grid, kThreads, 0, stream>>>(p, shape, hubs_t, delta);
    PYGIO_CHECK_CUDA(cudaGetLastError());
  }
  if (layout.slots_t > 0) {
    PYGIO_TRY(resident_grid((p.a.nnz / kGatHubChunk + layout.slots_t) * shape.passes(), 1,
                            kThreads, p.device, &grid));  // for_each_hub_chunk's grid
    transformer_backward_hub_sources_kernel<Traits>
        <<<grid, kThreads, 0, stream>>>(p, shape, hubs_t, delta);
    PYGIO_CHECK_CUDA(cudaGetLastError());
    PYGIO_TRY(resident_grid(layout.slots_t, Traits::kWarpsPerBlock, kThreads, p.device, &grid));
    attention_hub_rows_finish_kernel<scalar_t><<<grid, kThreads, 0, stream>>>(
        hubs_t, width, 2,
        HubRowsOutput<scalar_t>{static_cast<scalar_t*>(p.grad_k), p.grad_k_row_stride},
        HubRowsOutput<scalar_t>{static_cast<scalar_t*>(p.grad_v), p.grad_v_row_stride});
    PYGIO_CHECK_CUDA(cudaGetLastError());
  }
  return PYGIO_OK;
}

}  // namespace
}  // namespace pygio

extern "C" int pygio_transformer_workspace_size(const pygio_transformer_params* params,
                                                size_t* bytes) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_CHECK_ARG(bytes != nullptr, entry_message(__func__, "bytes must not be NULL"));
  PYGIO_TRY(check_shared(*params, __func__));
  PYGIO_CHECK_ARG(params->max_hubs >= 0,
                  entry_message(__func__, "max_hubs must be non-negative"));
  *bytes = attention::forward_workspace_bytes(*params);
  return ok();
}

extern "C" int pygio_transformer(const pygio_transformer_params* params) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_TRY(check_forward(*params, __func__));
  const pygio_transformer_params& p = *params;
  if (p.a.num_rows == 0) return ok();
  gatv2::Plan plan;
  PYGIO_TRY(gatv2::make_plan(p.dtype, p.heads, p.channels, kTransformerWidePieces,
                             {p.q_row_stride, p.k_row_stride, p.v_row_stride, p.heads * p.channels},
                             {p.q, p.k, p.v, p.edge, p.out}, __func__, &plan));
  DeviceGuard guard;
  PYGIO_TRY(guard.set(p.device));
  const auto stream = static_cast<cudaStream_t>(p.stream);
  PYGIO_TRY((gatv2::dispatch<kTransformerNoEdgePieces, kTransformerNoEdgeSingles>(
      p, plan, [&](auto traits, const GatShape& s) {
        return attention::launch_forward<TransformerFamily, decltype(traits)>(p, s, stream);
      })));
  return ok();
}

extern "C" int pygio_transformer_alpha(const pygio_transformer_alpha_params* params) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_TRY(check_shared(*params, __func__));
  PYGIO_TRY(attention::check_alpha_outputs(*params, __func__));
  const pygio_transformer_alpha_params& p = *params;
  if (p.a.nnz == 0) return ok();
  gatv2::Plan plan;
  PYGIO_TRY(gatv2::make_plan(p.dtype, p.heads, p.channels, kTransformerWidePieces,
                             {p.q_row_stride, p.k_row_stride, p.heads * p.channels},
                             {p.q, p.k, p.edge}, __func__, &plan));
  DeviceGuard guard;
  PYGIO_TRY(guard.set(p.device));
  const auto stream = static_cast<cudaStream_t>(p.stream);
  PYGIO_TRY((gatv2::dispatch<kTransformerNoEdgePieces, kTransformerNoEdgeSingles>(
      p, plan, [&](auto traits, const GatShape& s) {
        return attention::launch_alpha<TransformerFamily, decltype(traits)>(p, s, stream);
      })));
  return ok();
}

extern "C" int pygio_transformer_backward_workspace_size(
    const pygio_transformer_backward_params* params, size_t* bytes) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_CHECK_ARG(bytes != nullptr, entry_message(__func__, "bytes must not be NULL"));
  PYGIO_TRY(check_shared(*params, __func__));
  PYGIO_CHECK_ARG(params->max_hubs >= 0 && params->max_hubs_t >= 0,
                  entry_message(__func__, "max_hubs and max_hubs_t must be non-negative"));
  *bytes = backward_layout(*params).total;
  return ok();
}

extern "C" int pygio_transformer_backward(const pygio_transformer_backward_params* params) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_TRY(check_backward(*params, __func__));
  const pygio_transformer_backward_params& p = *params;
  if (p.a.num_rows == 0 && p.a.num_cols == 0) return ok();
  gatv2::Plan plan;
  PYGIO_TRY(gatv2::make_plan(
      p.dtype, p.heads, p.channels, transformer_backward_wide_pieces(p.dtype),
      {p.q_row_stride, p.k_row_stride, p.v_row_stride, p.grad_q_row_stride,
       p.grad_k_row_stride, p.grad_v_row_stride, p.heads * p.channels},
      {p.q, p.k, p.v, p.edge, p.out, p.grad_out, p.grad_q, p.grad_k, p.grad_v, p.grad_edge},
      __func__, &plan));
  DeviceGuard guard;
  PYGIO_TRY(guard.set(p.device));
  const auto stream = static_cast<cudaStream_t>(p.stream);
  PYGIO_TRY((gatv2::dispatch<kTransformerBackwardNoEdgePieces, kTransformerNoEdgeSingles>(
      p, plan, [&](auto traits, const GatShape& s) {
        return launch_backward<decltype(traits)>(p, s, stream);
      })));
  return ok();
}
