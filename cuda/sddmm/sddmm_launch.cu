// The SDDMM entry point: checks, grid choice, dtype / index dispatch.
#include <string>

#include "../common/abi.h"
#include "../common/device_guard.h"
#include "../common/grid.h"
#include "sddmm_kernel.cuh"

namespace pygio {
namespace {

template <typename Traits>
int launch_sddmm(const pygio_sddmm_params& params) {
  unsigned grid = 0;
  // A warp per row, grid-stride over the rows beyond the resident blocks.
  PYGIO_TRY(resident_grid(params.a.num_rows, Traits::kWarpsPerBlock, Traits::kThreadsPerBlock,
                          params.device, &grid));
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
