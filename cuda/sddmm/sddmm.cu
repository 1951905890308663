// SDDMM: out[e] = <G[row(e), :], X[col(e), :]> over the entries of a CSR
// matrix; the gradient of SpMM with respect to the sparse values.
//
// One warp per row: the row's gradient row G[r, :] is read once per edge
// from L1/L2, each lane accumulates a strided slice of the dot product and a
// warp shuffle reduction finishes it. Accumulation is fp32 (fp64 for
// double). Only used when edge weights require grad, so it favours
// simplicity over peak bandwidth.
#include "../common/dtype.cuh"
#include "../common/status.h"

namespace pygio {
namespace {

constexpr int kWarpsPerBlock = 8;

template <typename acc_t>
__device__ acc_t warp_sum(acc_t v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

template <typename scalar_t, typename index_t>
__global__ void sddmm_kernel(const index_t* __restrict__ rowptr, const index_t* __restrict__ col,
                             const scalar_t* __restrict__ g, const scalar_t* __restrict__ x,
                             int64_t num_rows, int64_t width, scalar_t* __restrict__ out) {
  using Traits = DTypeTraits<scalar_t>;
  using acc_t = typename Traits::acc;
  const int lane = threadIdx.x % 32;
  const int64_t warps_total = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
       row < num_rows; row += warps_total) {
    const scalar_t* g_row = g + row * width;
    for (int64_t e = rowptr[row]; e < rowptr[row + 1]; ++e) {
      const scalar_t* x_row = x + static_cast<int64_t>(col[e]) * width;
      acc_t partial = 0;
      for (int64_t k = lane; k < width; k += 32)
        partial += Traits::load(g_row[k]) * Traits::load(x_row[k]);
      partial = warp_sum(partial);
      if (lane == 0) out[e] = Traits::store(partial);
    }
  }
}

}  // namespace
}  // namespace pygio

extern "C" int pygio_sddmm(const pygio_csr* a, const void* g, const void* x, int64_t width,
                           void* out, int32_t device, void* stream) {
  using namespace pygio;
  PYGIO_CHECK_ARG(a != nullptr, "null CSR");
  PYGIO_CHECK_ARG(width > 0 && a->num_rows >= 0 && a->nnz >= 0, "bad SDDMM sizes");
  if (a->num_rows == 0 || a->nnz == 0) return ok();
  PYGIO_CHECK_ARG(g != nullptr && x != nullptr && out != nullptr && a->rowptr != nullptr &&
                      a->col != nullptr,
                  "SDDMM buffers must not be null");
  int status = set_device(device);
  if (status != PYGIO_OK) return status;
  int sm_count = 0;
  PYGIO_CHECK_CUDA(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  const int64_t blocks_needed = (a->num_rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int64_t blocks_resident = static_cast<int64_t>(sm_count) * 16;
  const unsigned grid = static_cast<unsigned>(blocks_needed < blocks_resident ? blocks_needed
                                                                              : blocks_resident);
  auto cuda_stream = static_cast<cudaStream_t>(stream);
  status = PYGIO_DISPATCH_DTYPE(a->dtype, [&]() -> int {
    return PYGIO_DISPATCH_INDEX(a->index_bits, [&]() -> int {
      sddmm_kernel<scalar_t, index_t><<<grid, kWarpsPerBlock * 32, 0, cuda_stream>>>(
          static_cast<const index_t*>(a->rowptr), static_cast<const index_t*>(a->col),
          static_cast<const scalar_t*>(g), static_cast<const scalar_t*>(x), a->num_rows, width,
          static_cast<scalar_t*>(out));
      PYGIO_CHECK_CUDA(cudaGetLastError());
      return PYGIO_OK;
    });
  });
  return status == PYGIO_OK ? ok() : status;
}
