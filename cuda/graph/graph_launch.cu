// Entry points of the graph-structure kernels: checks, grids, dispatch.
#include "../common/abi.h"
#include "../common/device_guard.h"
#include "../common/grid.h"
#include "graph_kernel.cuh"

namespace pygio {
namespace {

template <typename Traits>
int launch_self_loops(const pygio_self_loops_params& p) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  unsigned grid = 0;
  if (p.out_gcn_values != nullptr) {  // no input self loop (the contract): one launch
    PYGIO_TRY(resident_grid(p.num_nodes + 1 + p.nnz, Traits::kThreadsPerBlock,
                            Traits::kThreadsPerBlock, p.device, &grid));
    self_loops_without_input_loops_kernel<Traits>
        <<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p);
    PYGIO_CHECK_CUDA(cudaGetLastError());
    return PYGIO_OK;
  }
  PYGIO_TRY(resident_grid(p.num_nodes + 1, Traits::kThreadsPerBlock, Traits::kThreadsPerBlock,
                          p.device, &grid));
  self_loop_rows_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  if (p.nnz == 0) return PYGIO_OK;
  PYGIO_TRY(resident_grid(p.nnz, Traits::kThreadsPerBlock, Traits::kThreadsPerBlock, p.device,
                          &grid));
  self_loop_entries_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  return PYGIO_OK;
}

template <typename Traits, typename scalar_t>
int launch_gcn_norm(const pygio_gcn_norm_params& p) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  unsigned grid = 0;
  // Every entry weighing 1, the row lengths are the degrees: one launch.
  const bool unit_weights = p.weight == nullptr && p.origin == nullptr;
  if (!unit_weights) {
    PYGIO_TRY(resident_grid(p.a.num_rows, Traits::kWarpsPerBlock, Traits::kThreadsPerBlock,
                            p.device, &grid));
    gcn_degree_kernel<Traits, scalar_t><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p);
    PYGIO_CHECK_CUDA(cudaGetLastError());
  }
  if (p.a.nnz == 0) return PYGIO_OK;
  PYGIO_TRY(resident_grid(p.a.nnz, Traits::kThreadsPerBlock, Traits::kThreadsPerBlock,
                          p.device, &grid));
  if (unit_weights)
    gcn_values_kernel<Traits, scalar_t, true><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p);
  else
    gcn_values_kernel<Traits, scalar_t, false><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  return PYGIO_OK;
}

template <typename Traits, typename scalar_t>
int launch_mean_norm(const pygio_mean_norm_params& p) {
  unsigned grid = 0;
  PYGIO_TRY(resident_grid(p.a.nnz, Traits::kThreadsPerBlock, Traits::kThreadsPerBlock,
                          p.device, &grid));
  mean_values_kernel<Traits, scalar_t>
      <<<grid, Traits::kThreadsPerBlock, 0, static_cast<cudaStream_t>(p.stream)>>>(p);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  return PYGIO_OK;
}

int check_self_loops(const pygio_self_loops_params& p, const char* entry) {
  PYGIO_CHECK_ARG(p.index_bits == 32 || p.index_bits == 64,
                  entry_message(entry, "index_bits must be 32 or 64"));
  PYGIO_CHECK_ARG(p.num_nodes >= 0 && p.nnz >= 0,
                  entry_message(entry, "sizes must be non-negative"));
  PYGIO_CHECK_ARG(p.rowptr != nullptr && p.out_rowptr != nullptr,
                  entry_message(entry, "rowptr and out_rowptr must not be NULL"));
  if (p.num_nodes + p.nnz == 0) return PYGIO_OK;
  PYGIO_CHECK_ARG(p.out_col != nullptr && p.out_row != nullptr && p.out_origin != nullptr,
                  entry_message(entry, "outputs must not be NULL"));
  PYGIO_CHECK_ARG(p.nnz == 0 || (p.col != nullptr && p.row != nullptr),
                  entry_message(entry, "col and row must not be NULL"));
  return PYGIO_OK;
}

int check_gcn_norm(const pygio_gcn_norm_params& p, const char* entry) {
  PYGIO_TRY(check_csr(p.a, entry));
  PYGIO_TRY(check_dtype(p.dtype, entry));
  PYGIO_CHECK_ARG(p.a.num_rows == p.a.num_cols,
                  entry_message(entry, "GCN normalization needs a square graph"));
  if (p.a.num_rows == 0) return PYGIO_OK;
  PYGIO_CHECK_ARG(p.deg_inv_sqrt != nullptr,
                  entry_message(entry, "deg_inv_sqrt must not be NULL"));
  PYGIO_CHECK_ARG(p.a.nnz == 0 || (p.row != nullptr && p.values != nullptr),
                  entry_message(entry, "row and values must not be NULL"));
  return PYGIO_OK;
}

int check_mean_norm(const pygio_mean_norm_params& p, const char* entry) {
  PYGIO_TRY(check_csr(p.a, entry));
  PYGIO_TRY(check_dtype(p.dtype, entry));
  PYGIO_CHECK_ARG(p.a.nnz == 0 || (p.row != nullptr && p.values != nullptr),
                  entry_message(entry, "row and values must not be NULL"));
  return PYGIO_OK;
}

}  // namespace
}  // namespace pygio

extern "C" int pygio_csr_add_self_loops(const pygio_self_loops_params* params) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_TRY(check_self_loops(*params, __func__));
  DeviceGuard guard;
  PYGIO_TRY(guard.set(params->device));
  PYGIO_TRY(PYGIO_DISPATCH_INDEX(params->index_bits, [&] {
    return launch_self_loops<GraphTraits<index_t>>(*params);
  }));
  return ok();
}

extern "C" int pygio_gcn_norm(const pygio_gcn_norm_params* params) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_TRY(check_gcn_norm(*params, __func__));
  if (params->a.num_rows == 0) return ok();
  DeviceGuard guard;
  PYGIO_TRY(guard.set(params->device));
  PYGIO_TRY(PYGIO_DISPATCH_DTYPE(params->dtype, [&] {
    return PYGIO_DISPATCH_INDEX(params->a.index_bits, [&] {
      return launch_gcn_norm<GraphTraits<index_t>, scalar_t>(*params);
    });
  }));
  return ok();
}

extern "C" int pygio_mean_norm(const pygio_mean_norm_params* params) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_TRY(check_mean_norm(*params, __func__));
  if (params->a.nnz == 0) return ok();
  DeviceGuard guard;
  PYGIO_TRY(guard.set(params->device));
  PYGIO_TRY(PYGIO_DISPATCH_DTYPE(params->dtype, [&] {
    return PYGIO_DISPATCH_INDEX(params->a.index_bits, [&] {
      return launch_mean_norm<GraphTraits<index_t>, scalar_t>(*params);
    });
  }));
  return ok();
}
