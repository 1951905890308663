// Entry points of the CSR-from-edges kernels: checks, grids, dispatch.
#include <cuda_runtime.h>

#include <algorithm>

#include "../common/abi.h"
#include "../common/device_guard.h"
#include "../common/grid.h"
#include "csr_build_kernel.cuh"

namespace pygio {
namespace {

int check_edges(const pygio_edges& edges, const char* entry) {
  PYGIO_CHECK_ARG(edges.index_bits == 32 || edges.index_bits == 64,
                  entry_message(entry, "index_bits must be 32 or 64"));
  PYGIO_CHECK_ARG(edges.num_edges >= 0, entry_message(entry, "num_edges must be non-negative"));
  PYGIO_CHECK_ARG(edges.num_edges == 0 || (edges.src != nullptr && edges.dst != nullptr),
                  entry_message(entry, "src and dst must not be NULL"));
  PYGIO_CHECK_ARG(edges.src_stride >= 0 && edges.dst_stride >= 0,
                  entry_message(entry, "strides must be non-negative"));
  return PYGIO_OK;
}

int check_edge_stats(const pygio_edge_stats_params& p, const char* entry) {
  PYGIO_TRY(check_edges(p.edges, entry));
  PYGIO_CHECK_ARG(p.edges.num_edges > 0, entry_message(entry, "num_edges must be positive"));
  PYGIO_CHECK_ARG(p.stats != nullptr, entry_message(entry, "stats must not be NULL"));
  return PYGIO_OK;
}

int check_csr_from_grouped(const pygio_csr_from_grouped_params& p, const char* entry) {
  PYGIO_TRY(check_edges(p.edges, entry));
  PYGIO_CHECK_ARG(p.out_index_bits == 32 || p.out_index_bits == 64,
                  entry_message(entry, "out_index_bits must be 32 or 64"));
  PYGIO_CHECK_ARG(p.num_rows >= 0, entry_message(entry, "num_rows must be non-negative"));
  PYGIO_CHECK_ARG(p.edges.num_edges == 0 || p.num_rows > 0,
                  entry_message(entry, "edges need at least one row"));
  PYGIO_CHECK_ARG(p.out_rowptr != nullptr, entry_message(entry, "out_rowptr must not be NULL"));
  PYGIO_CHECK_ARG(p.edges.num_edges == 0 || (p.out_col != nullptr && p.out_row != nullptr),
                  entry_message(entry, "out_col and out_row must not be NULL"));
  return PYGIO_OK;
}

template <typename Traits>
int launch_edge_stats(const pygio_edge_stats_params& p) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  PYGIO_CHECK_CUDA(
      cudaMemsetAsync(p.stats, kStatsInitByte, kNumStats * sizeof(int64_t), stream));
  unsigned grid = 0;
  PYGIO_TRY(resident_grid(p.edges.num_edges, Traits::kThreadsPerBlock, Traits::kThreadsPerBlock,
                          p.device, &grid));
  edge_stats_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  return PYGIO_OK;
}

template <typename Traits>
int launch_csr_from_grouped(const pygio_csr_from_grouped_params& p) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  unsigned grid = 0;
  PYGIO_TRY(resident_grid(std::max(p.edges.num_edges, p.num_rows + 1), Traits::kThreadsPerBlock,
                          Traits::kThreadsPerBlock, p.device, &grid));
  if (p.out_index_bits == 32)
    csr_from_grouped_kernel<Traits, int32_t><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p);
  else
    csr_from_grouped_kernel<Traits, int64_t><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  return PYGIO_OK;
}

}  // namespace
}  // namespace pygio

extern "C" int pygio_edge_index_stats(const pygio_edge_stats_params* params) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_TRY(check_edge_stats(*params, __func__));
  DeviceGuard guard;
  PYGIO_TRY(guard.set(params->device));
  PYGIO_TRY(PYGIO_DISPATCH_INDEX(params->edges.index_bits, [&] {
    return launch_edge_stats<GraphTraits<index_t>>(*params);
  }));
  return ok();
}

extern "C" int pygio_csr_from_grouped(const pygio_csr_from_grouped_params* params) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_TRY(check_csr_from_grouped(*params, __func__));
  DeviceGuard guard;
  PYGIO_TRY(guard.set(params->device));
  PYGIO_TRY(PYGIO_DISPATCH_INDEX(params->edges.index_bits, [&] {
    return launch_csr_from_grouped<GraphTraits<index_t>>(*params);
  }));
  return ok();
}
