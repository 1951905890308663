// The SDDMM entry point: checks, grid choice, dtype / index dispatch.
#include <algorithm>
#include <string>

#include "../common/abi.h"
#include "../common/device_guard.h"
#include "sddmm_kernel.cuh"

namespace pygio {
namespace {

// Enough warps for every row, capped at the blocks the device holds resident
// at once (the kernel strides over the remaining rows).
template <typename Traits>
int sddmm_grid(int64_t num_rows, int device, unsigned* grid) {
  int sm_count = 0, threads_per_sm = 0;
  PYGIO_CHECK_CUDA(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  PYGIO_CHECK_CUDA(cudaDeviceGetAttribute(&threads_per_sm,
                                          cudaDevAttrMaxThreadsPerMultiProcessor, device));
  const int64_t blocks_needed =
      (num_rows + Traits::kWarpsPerBlock - 1) / Traits::kWarpsPerBlock;
  const int64_t blocks_resident =
      static_cast<int64_t>(sm_count) * (threads_per_sm / Traits::kThreadsPerBlock);
  *grid = static_cast<unsigned>(std::min(blocks_needed, blocks_resident));
  return PYGIO_OK;
}

template <typename Traits>
int launch_sddmm(const pygio_sddmm_params& params) {
  unsigned grid = 0;
  PYGIO_TRY(sddmm_grid<Traits>(params.a.num_rows, params.device, &grid));
  sddmm_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0,
                         static_cast<cudaStream_t>(params.stream)>>>(params);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  return PYGIO_OK;
}

int check_sddmm(const pygio_sddmm_params& p, const char* entry) {
  PYGIO_TRY(check_csr(p.a, entry));
  PYGIO_TRY(check_dtype(p.dtype, entry));
  PYGIO_CHECK_ARG(p.width >= 0, entry_message(entry, "width must be non-negative"));
  if (p.a.nnz == 0) return PYGIO_OK;
  PYGIO_CHECK_ARG(p.out != nullptr, entry_message(entry, "out must not be NULL"));
  if (p.width == 0) return PYGIO_OK;
  PYGIO_CHECK_ARG(p.g != nullptr && p.x != nullptr,
                  entry_message(entry, "g and x must not be NULL"));
  PYGIO_TRY(check_row_stride(p.g_row_stride, p.width, "g", entry));
  PYGIO_TRY(check_row_stride(p.x_row_stride, p.width, "x", entry));
  return PYGIO_OK;
}

}  // namespace
}  // namespace pygio

extern "C" int pygio_sddmm(const pygio_sddmm_params* params) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_TRY(check_sddmm(*params, __func__));
  if (params->a.nnz == 0) return ok();
  DeviceGuard guard;
  PYGIO_TRY(guard.set(params->device));
  PYGIO_TRY(PYGIO_DISPATCH_DTYPE(params->dtype, [&] {
    return PYGIO_DISPATCH_INDEX(params->a.index_bits, [&] {
      return launch_sddmm<SddmmTraits<scalar_t, index_t>>(*params);
    });
  }));
  return ok();
}
