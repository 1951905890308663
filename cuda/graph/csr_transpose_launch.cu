// Entry points of the CSR^T build: checks, workspace layout, the sort and
// the two kernels around it.
#include <cuda_runtime.h>

#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#include <type_traits>

#include "../common/abi.h"
#include "../common/device_guard.h"
#include "../common/grid.h"
#include "csr_transpose_kernel.cuh"

namespace pygio {
namespace {

constexpr size_t kAlign = 16;

size_t round_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Bits of the largest column index (at least one): the sort looks at no more.
int column_bits(int64_t num_cols) {
  int bits = 1;
  while (bits < 63 && (int64_t{1} << bits) < num_cols) ++bits;
  return bits;
}

// cub::DeviceRadixSort::SortPairs of (column, position) over the columns as
// unsigned keys (columns are non-negative): stable, so positions stay in
// order within a column. With temp == nullptr only sizes *temp_bytes.
// 32-bit item counts where they fit (cub's faster offsets).
template <typename index_t>
cudaError_t sort_by_column(void* temp, size_t* temp_bytes, const pygio_csr_transpose_params& p,
                           const index_t* positions, cudaStream_t stream) {
  using key_t = std::make_unsigned_t<index_t>;
  const auto* keys_in = static_cast<const key_t*>(p.a.col);
  auto* keys_out = static_cast<key_t*>(p.out_row);
  auto* values_out = static_cast<index_t*>(p.out_perm);
  const int end_bit = column_bits(p.a.num_cols);
  if (p.a.nnz <= INT32_MAX)
    return cub::DeviceRadixSort::SortPairs(temp, *temp_bytes, keys_in, keys_out, positions,
                                           values_out, static_cast<int32_t>(p.a.nnz), 0,
                                           end_bit, stream);
  return cub::DeviceRadixSort::SortPairs(temp, *temp_bytes, keys_in, keys_out, positions,
                                         values_out, p.a.nnz, 0, end_bit, stream);
}

// Workspace: the positions [nnz] (16-byte aligned), then the sort's scratch.
template <typename index_t>
int transpose_workspace(const pygio_csr_transpose_params& p, size_t* positions_bytes,
                        size_t* sort_bytes) {
  *positions_bytes = round_up(p.a.nnz * sizeof(index_t));
  *sort_bytes = 0;
  if (p.a.nnz == 0) return PYGIO_OK;
  PYGIO_CHECK_CUDA(sort_by_column<index_t>(nullptr, sort_bytes, p, nullptr, nullptr));
  return PYGIO_OK;
}

template <typename Traits>
int launch_transpose(const pygio_csr_transpose_params& p) {
  using index_t = typename Traits::index_t;
  const auto stream = static_cast<cudaStream_t>(p.stream);
  unsigned grid = 0;
  if (p.a.nnz > 0) {
    size_t positions_bytes = 0, sort_bytes = 0;
    PYGIO_TRY(transpose_workspace<index_t>(p, &positions_bytes, &sort_bytes));
    auto* positions = static_cast<index_t*>(p.workspace);
    PYGIO_TRY(resident_grid(p.a.nnz, Traits::kThreadsPerBlock, Traits::kThreadsPerBlock,
                            p.device, &grid));
    entry_positions_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(positions,
                                                                                 p.a.nnz);
    PYGIO_CHECK_CUDA(cudaGetLastError());
    void* sort_scratch = static_cast<char*>(p.workspace) + positions_bytes;
    PYGIO_CHECK_CUDA(sort_by_column<index_t>(sort_scratch, &sort_bytes, p, positions, stream));
  }
  PYGIO_TRY(resident_grid(std::max(p.a.nnz, p.a.num_cols + 1), Traits::kThreadsPerBlock,
                          Traits::kThreadsPerBlock, p.device, &grid));
  transpose_rows_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  return PYGIO_OK;
}

int check_transpose(const pygio_csr_transpose_params& p, const char* entry) {
  PYGIO_TRY(check_csr(p.a, entry));
  PYGIO_CHECK_ARG(p.out_rowptr != nullptr, entry_message(entry, "out_rowptr must not be NULL"));
  if (p.a.nnz == 0) return PYGIO_OK;
  PYGIO_CHECK_ARG(p.row != nullptr, entry_message(entry, "row must not be NULL"));
  PYGIO_CHECK_ARG(p.out_col != nullptr && p.out_row != nullptr && p.out_perm != nullptr,
                  entry_message(entry, "out_col, out_row and out_perm must not be NULL"));
  PYGIO_CHECK_ARG(p.workspace != nullptr && reinterpret_cast<uintptr_t>(p.workspace) % kAlign == 0,
                  entry_message(entry, "workspace must be a 16-byte aligned pointer"));
  return PYGIO_OK;
}

}  // namespace
}  // namespace pygio

extern "C" int pygio_csr_transpose_workspace_size(const pygio_csr_transpose_params* params,
                                                  size_t* bytes) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_CHECK_ARG(bytes != nullptr, entry_message(__func__, "bytes must not be NULL"));
  PYGIO_TRY(check_csr(params->a, __func__));
  *bytes = 0;
  if (params->a.nnz == 0) return ok();
  DeviceGuard guard;  // cub sizes its scratch for the current device
  PYGIO_TRY(guard.set(params->device));
  size_t positions_bytes = 0, sort_bytes = 0;
  PYGIO_TRY(PYGIO_DISPATCH_INDEX(params->a.index_bits, [&] {
    return transpose_workspace<index_t>(*params, &positions_bytes, &sort_bytes);
  }));
  *bytes = positions_bytes + sort_bytes;
  return ok();
}

extern "C" int pygio_csr_transpose(const pygio_csr_transpose_params* params) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_TRY(check_transpose(*params, __func__));
  DeviceGuard guard;
  PYGIO_TRY(guard.set(params->device));
  PYGIO_TRY(PYGIO_DISPATCH_INDEX(params->a.index_bits, [&] {
    return launch_transpose<GraphTraits<index_t>>(*params);
  }));
  return ok();
}
