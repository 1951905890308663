// Entry points of the GATv2 attention backward: checks, workspace (G per
// node and head), the destination pass over a, then the source pass over a_t.
#include "../common/device_guard.h"
#include "../common/grid.h"
#include "gatv2_backward_kernel.cuh"
#include "gatv2_dispatch.cuh"

namespace pygio {
namespace {

// Per-block grad_att sums live in shared memory up to this size; wider
// heads * channels add to grad_att in global memory directly.
constexpr size_t kMaxSharedAttBytes = 48 * 1024;

size_t backward_workspace_bytes(const pygio_gatv2_backward_params& p) {
  return gatv2::round_up(p.a.num_rows * p.heads * sizeof(float));
}

int check_backward(const pygio_gatv2_backward_params& p, const char* entry) {
  PYGIO_TRY(gatv2::check_inputs(p, entry));
  PYGIO_TRY(gatv2::check_dropout(p.dropout_p, entry));
  PYGIO_TRY(check_csr(p.a_t, entry));
  PYGIO_CHECK_ARG(p.a_t.num_rows == p.a.num_cols && p.a_t.num_cols == p.a.num_rows &&
                      p.a_t.nnz == p.a.nnz && p.a_t.index_bits == p.a.index_bits,
                  entry_message(entry, "a_t must be the transpose of a"));
  PYGIO_CHECK_ARG(p.grad_att != nullptr, entry_message(entry, "grad_att must not be NULL"));
  PYGIO_CHECK_ARG((p.edge == nullptr) == (p.grad_edge == nullptr),
                  entry_message(entry, "grad_edge must be given exactly when edge is"));
  if (p.a.num_rows > 0) {
    PYGIO_CHECK_ARG(p.out != nullptr && p.lse != nullptr && p.grad_out != nullptr &&
                        p.grad_x_r != nullptr,
                    entry_message(entry, "out, lse, grad_out and grad_x_r must not be NULL"));
    PYGIO_CHECK_ARG(p.workspace != nullptr && gatv2::aligned(p.workspace),
                    entry_message(entry, "this call needs a 16-byte aligned workspace"));
  }
  if (p.a.num_cols > 0) {
    PYGIO_CHECK_ARG(p.grad_x_l != nullptr && p.a_t.rowptr != nullptr && p.att != nullptr,
                    entry_message(entry, "grad_x_l, a_t.rowptr and att must not be NULL"));
  }
  PYGIO_CHECK_ARG(p.a.nnz == 0 || p.perm_t != nullptr,
                  entry_message(entry, "perm_t must not be NULL"));
  return PYGIO_OK;
}

template <typename Traits>
int launch_backward(const pygio_gatv2_backward_params& p, const GatShape& shape,
                    cudaStream_t stream) {
  auto* g = static_cast<float*>(p.workspace);
  PYGIO_CHECK_CUDA(cudaMemsetAsync(p.grad_att, 0, p.heads * p.channels * sizeof(float), stream));
  unsigned grid = 0;
  if (p.a.num_rows > 0) {
    const size_t att_bytes = p.heads * p.channels * sizeof(float);
    const bool shared_att = att_bytes <= kMaxSharedAttBytes;
    PYGIO_TRY(resident_grid(p.a.num_rows, Traits::kWarpsPerBlock, Traits::kThreadsPerBlock,
                            p.device, &grid));
    gatv2_backward_rows_kernel<Traits>
        <<<grid, Traits::kThreadsPerBlock, shared_att ? att_bytes : 0, stream>>>(p, shape, g,
                                                                                 shared_att);
    PYGIO_CHECK_CUDA(cudaGetLastError());
  }
  if (p.a.num_cols > 0) {
    PYGIO_TRY(resident_grid(p.a.num_cols, Traits::kWarpsPerBlock, Traits::kThreadsPerBlock,
                            p.device, &grid));
    gatv2_backward_sources_kernel<Traits>
        <<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, shape, g);
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
  *bytes = backward_workspace_bytes(*params);
  return ok();
}

extern "C" int pygio_gatv2_backward(const pygio_gatv2_backward_params* params) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_TRY(check_backward(*params, __func__));
  const pygio_gatv2_backward_params& p = *params;
  DeviceGuard guard;
  PYGIO_TRY(guard.set(p.device));
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const int64_t width = p.heads * p.channels;
  PYGIO_TRY(gatv2::dispatch(
      p, {p.x_l_row_stride, p.x_r_row_stride, width},
      {p.x_l, p.x_r, p.edge, p.out, p.grad_out, p.grad_x_l, p.grad_x_r, p.grad_edge},
      [&](auto traits, const GatShape& s) {
        return launch_backward<decltype(traits)>(p, s, stream);
      }));
  return ok();
}
