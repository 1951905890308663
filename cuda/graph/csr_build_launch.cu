// Entry points of the CSR-from-edges kernels: checks, grids, dispatch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cub/device/device_scan.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

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

int check_grouped_csr_outputs(int64_t num_edges, int64_t num_rows, int32_t out_index_bits,
                              const void* out_rowptr, const void* out_col, const void* out_row,
                              const char* entry) {
  PYGIO_CHECK_ARG(out_index_bits == 32 || out_index_bits == 64,
                  entry_message(entry, "out_index_bits must be 32 or 64"));
  PYGIO_CHECK_ARG(num_rows >= 0, entry_message(entry, "num_rows must be non-negative"));
  PYGIO_CHECK_ARG(num_edges == 0 || num_rows > 0,
                  entry_message(entry, "edges need at least one row"));
  PYGIO_CHECK_ARG(out_rowptr != nullptr, entry_message(entry, "out_rowptr must not be NULL"));
  PYGIO_CHECK_ARG((out_col == nullptr) == (out_row == nullptr),
                  entry_message(entry, "out_col and out_row must be set together"));
  return PYGIO_OK;
}

int check_edge_stats(const pygio_edge_stats_params& p, const char* entry) {
  PYGIO_TRY(check_edges(p.edges, entry));
  PYGIO_CHECK_ARG(p.edges.num_edges > 0, entry_message(entry, "num_edges must be positive"));
  PYGIO_CHECK_ARG(p.stats != nullptr, entry_message(entry, "stats must not be NULL"));
  if (p.out_rowptr == nullptr) return PYGIO_OK;
  return check_grouped_csr_outputs(p.edges.num_edges, p.num_rows, p.out_index_bits,
                                   p.out_rowptr, p.out_col, p.out_row, entry);
}

int check_csr_from_grouped(const pygio_csr_from_grouped_params& p, const char* entry) {
  PYGIO_TRY(check_edges(p.edges, entry));
  PYGIO_TRY(check_grouped_csr_outputs(p.edges.num_edges, p.num_rows, p.out_index_bits,
                                      p.out_rowptr, p.out_col, p.out_row, entry));
  PYGIO_CHECK_ARG(p.edges.num_edges == 0 || p.out_col != nullptr,
                  entry_message(entry, "out_col and out_row must not be NULL"));
  return PYGIO_OK;
}

// The pointer the device writes `stats` through: itself for device memory,
// the mapped address of pinned host memory (the same under unified
// addressing); pageable host memory is refused.
int stats_device_pointer(int64_t* stats, int64_t** device_pointer, const char* entry) {
  cudaPointerAttributes attributes{};
  PYGIO_CHECK_CUDA(cudaPointerGetAttributes(&attributes, stats));
  PYGIO_CHECK_ARG(attributes.type == cudaMemoryTypeDevice ||
                      attributes.type == cudaMemoryTypeHost ||
                      attributes.type == cudaMemoryTypeManaged,
                  entry_message(entry, "stats must be device memory or pinned host memory"));
  *device_pointer = static_cast<int64_t*>(attributes.devicePointer);
  PYGIO_CHECK_ARG(*device_pointer != nullptr,
                  entry_message(entry, "stats is not mapped into the device's address space"));
  return PYGIO_OK;
}

template <typename Traits>
int launch_edge_stats(const pygio_edge_stats_params& p, const char* entry) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  int64_t* stats_rows = nullptr;
  PYGIO_TRY(stats_device_pointer(p.stats, &stats_rows, entry));
  static_assert(Traits::kThreadsPerBlock == PYGIO_EDGE_STATS_ITEMS_PER_BLOCK,
                "a block's first sweep covers the items of its row");
  const auto grid = static_cast<unsigned>(PYGIO_EDGE_STATS_ROWS(
      PYGIO_EDGE_STATS_ITEMS(p.edges.num_edges, p.num_rows, p.out_rowptr != nullptr)));
  if (p.out_rowptr == nullptr || p.out_index_bits == 64)
    edge_stats_kernel<Traits, int64_t>
        <<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, stats_rows);
  else
    edge_stats_kernel<Traits, int32_t>
        <<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, stats_rows);
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

int check_pyg_self_loops(const pygio_pyg_self_loops_params& p, const char* entry) {
  PYGIO_TRY(check_edges(p.edges, entry));
  PYGIO_CHECK_ARG(p.out_index_bits == 32 || p.out_index_bits == 64,
                  entry_message(entry, "out_index_bits must be 32 or 64"));
  PYGIO_CHECK_ARG(p.num_rows >= 0 && p.num_loops >= 0 && p.num_loops <= p.num_rows,
                  entry_message(entry, "num_loops must lie in [0, num_rows]"));
  PYGIO_CHECK_ARG(p.num_kept >= 0 && p.num_kept <= p.edges.num_edges,
                  entry_message(entry, "num_kept must lie in [0, num_edges]"));
  PYGIO_CHECK_ARG(p.edges.num_edges == 0 || p.num_rows > 0,
                  entry_message(entry, "edges need at least one row"));
  PYGIO_CHECK_ARG(p.out_rowptr != nullptr, entry_message(entry, "out_rowptr must not be NULL"));
  if (p.num_kept + p.num_loops > 0)
    PYGIO_CHECK_ARG(p.out_edges != nullptr && p.out_col != nullptr && p.out_row != nullptr &&
                        p.out_perm != nullptr,
                    entry_message(entry, "out_edges, out_col, out_row and out_perm must not "
                                         "be NULL"));
  PYGIO_CHECK_ARG(p.num_kept == 0 || p.out_kept != nullptr,
                  entry_message(entry, "out_kept must not be NULL"));
  PYGIO_CHECK_ARG(p.workspace != nullptr && reinterpret_cast<uintptr_t>(p.workspace) % 16 == 0,
                  entry_message(entry, "workspace must be a 16-byte aligned pointer"));
  return PYGIO_OK;
}

// cub's exclusive scan of the self-loop flags of the num_edges + 1 items
// (IsSelfLoop) into loops_before; with temp == nullptr only sizes *temp_bytes.
template <typename index_t>
cudaError_t scan_self_loops(void* temp, size_t* temp_bytes, const pygio_edges& edges,
                            int64_t* loops_before, cudaStream_t stream) {
  auto flags = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0),
                                               IsSelfLoop<index_t>{edges});
  return cub::DeviceScan::ExclusiveSum(temp, *temp_bytes, flags, loops_before,
                                       edges.num_edges + 1, stream);
}

// Workspace: loops_before [num_edges + 1] int64 (16-byte aligned), then the
// scan's scratch.
template <typename index_t>
int pyg_self_loops_workspace(const pygio_pyg_self_loops_params& p, size_t* counts_bytes,
                             size_t* scan_bytes) {
  *counts_bytes = (static_cast<size_t>(p.edges.num_edges + 1) * sizeof(int64_t) + 15) / 16 * 16;
  PYGIO_CHECK_CUDA(scan_self_loops<index_t>(nullptr, scan_bytes, p.edges, nullptr, nullptr));
  return PYGIO_OK;
}

template <typename Traits>
int launch_pyg_self_loops(const pygio_pyg_self_loops_params& p) {
  using index_t = typename Traits::index_t;
  const auto stream = static_cast<cudaStream_t>(p.stream);
  size_t counts_bytes = 0, scan_bytes = 0;
  PYGIO_TRY(pyg_self_loops_workspace<index_t>(p, &counts_bytes, &scan_bytes));
  auto* loops_before = static_cast<int64_t*>(p.workspace);
  PYGIO_CHECK_CUDA(scan_self_loops<index_t>(static_cast<char*>(p.workspace) + counts_bytes,
                                            &scan_bytes, p.edges, loops_before, stream));
  unsigned grid = 0;
  PYGIO_TRY(resident_grid(std::max(p.edges.num_edges, p.num_rows + 1), Traits::kThreadsPerBlock,
                          Traits::kThreadsPerBlock, p.device, &grid));
  if (p.out_index_bits == 32)
    pyg_self_loops_kernel<Traits, int32_t>
        <<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, loops_before);
  else
    pyg_self_loops_kernel<Traits, int64_t>
        <<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, loops_before);
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
    return launch_edge_stats<GraphTraits<index_t>>(*params, __func__);
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

extern "C" int pygio_csr_pyg_self_loops_workspace_size(const pygio_pyg_self_loops_params* params,
                                                       size_t* bytes) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_CHECK_ARG(bytes != nullptr, entry_message(__func__, "bytes must not be NULL"));
  PYGIO_TRY(check_edges(params->edges, __func__));
  DeviceGuard guard;  // cub sizes its scratch for the current device
  PYGIO_TRY(guard.set(params->device));
  size_t counts_bytes = 0, scan_bytes = 0;
  PYGIO_TRY(PYGIO_DISPATCH_INDEX(params->edges.index_bits, [&] {
    return pyg_self_loops_workspace<index_t>(*params, &counts_bytes, &scan_bytes);
  }));
  *bytes = counts_bytes + scan_bytes;
  return ok();
}

extern "C" int pygio_csr_pyg_self_loops(const pygio_pyg_self_loops_params* params) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_TRY(check_pyg_self_loops(*params, __func__));
  DeviceGuard guard;
  PYGIO_TRY(guard.set(params->device));
  PYGIO_TRY(PYGIO_DISPATCH_INDEX(params->edges.index_bits, [&] {
    return launch_pyg_self_loops<GraphTraits<index_t>>(*params);
  }));
  return ok();
}
