// Entry points of the SpMM kernels of our own: checks, workspace layout,
// vector width and lane-group choice, dtype / index dispatch.
#include <string>
#include <type_traits>

#include "../common/abi.h"
#include "../common/device_guard.h"
#include "../common/grid.h"
#include "../common/vector_width.h"
#include "../common/zero_fill.h"
#include "spmm_kernel.cuh"

namespace pygio {
namespace {

constexpr size_t kAlign = 16;

size_t round_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

size_t element_size(int32_t dtype) {
  switch (dtype) {
    case PYGIO_FLOAT64: return 8;
    case PYGIO_FLOAT32: return 4;
    default: return 2;
  }
}

size_t accumulator_size(int32_t dtype) { return dtype == PYGIO_FLOAT64 ? 8 : 4; }

int64_t output_rows(const pygio_spmm_csr_params& p) {
  return p.transpose ? p.a.num_cols : p.a.num_rows;
}

// Hub path of the forward: only where a row can exceed the hub threshold.
int64_t forward_hub_threshold(const pygio_spmm_csr_params& p) {
  return hub_threshold(p.a.nnz, p.width, accumulator_size(p.dtype));
}
int64_t forward_hub_slots(const pygio_spmm_csr_params& p) {
  if (p.transpose || p.deterministic || p.width == 0) return 0;
  const int64_t threshold = forward_hub_threshold(p);
  if (p.degree_bound >= 0 && p.degree_bound <= threshold) return 0;  // no row can be a hub
  return max_hubs(p.a.num_rows, p.a.nnz, threshold);
}

size_t workspace_bytes(const pygio_spmm_csr_params& p) {
  const size_t acc = accumulator_size(p.dtype);
  if (p.transpose)  // 16-bit Y: an fp32 accumulator of Y's shape
    return element_size(p.y_dtype) == 2 ? round_up(output_rows(p) * p.width * acc) : 0;
  const int64_t slots = forward_hub_slots(p);
  if (slots == 0) return 0;
  return kAlign + round_up(slots * p.width * acc) + round_up(slots * sizeof(HubEntry));
}

// The widest load the width, both row strides and both base pointers
// allow: as many elements of X as one load takes, stored to Y in one
// store, or in 16-byte stores where Y's elements are wider (store_pack).
int vector_elements(const pygio_spmm_csr_params& p) {
  if (p.y_dtype == p.dtype)
    return widest_vector(element_size(p.dtype), p.width, {p.x_row_stride, p.y_row_stride},
                         {p.x, p.y});
  const int x_vec = widest_vector(element_size(p.dtype), p.width, {p.x_row_stride}, {p.x});
  const int y_vec = widest_vector(element_size(p.y_dtype), p.width, {p.y_row_stride}, {p.y});
  const int y_chunk = static_cast<int>(16 / element_size(p.y_dtype));  // one 16-byte store
  return y_vec >= x_vec || y_vec == y_chunk ? x_vec : y_vec;
}

// Whether a lane holds several pieces of a row (Traits::wide_pieces()):
// rows of 64 pieces or more.
bool wide_row(int64_t pieces) { return pieces >= 64; }

// Lanes spanning a row: enough for its pieces, at most a warp.
WarpLayout warp_layout(int64_t pieces, int per_lane) {
  const int64_t needed = (pieces + per_lane - 1) / per_lane;
  int shift = 0;
  while (shift < 5 && (int64_t{1} << shift) < needed) ++shift;
  return WarpLayout{shift};
}

// Whether the forward gives each sub-group a row of its own
// (spmm_rows_grouped_kernel) rather than a warp a row: for narrow rows of
// 4-byte and wider elements, and for narrow 16-bit rows where the average
// row is shorter than the entries one warp step takes (sub-groups x
// kUnroll). Measured at D=64 on an H200 (share of copy bandwidth, warp per
// row -> sub-group per row): fp32 pokec-like 81% -> 84%, web-like 56% ->
// 82%, products-like 85% -> 91%; bf16 web-like (4.5 entries a row) 27% ->
// 46%, but pokec-like (19) 52% -> 43% and products-like (25) 56% -> 48%: a
// 16-bit row costs twice the instructions per byte (conversion and FMA per
// element), and diverged sub-groups issue them apart.
template <typename Traits>
bool grouped_rows(const pygio_spmm_csr_params& p, WarpLayout layout) {
  const int sub_groups = kWarpSize >> layout.shift;
  if (sub_groups == 1) return false;
  if (sizeof(typename Traits::scalar_t) >= 4) return true;
  return p.a.nnz < p.a.num_rows * sub_groups * Traits::kUnroll;
}

// Grouped rows in batches of consecutive rows (spmm_row_batches_kernel)
// where the grid's sub-groups take at least this many batches each, with
// int32 indices (with int64 ones it spills 48-160 bytes; the fp32 D=64
// kernel spills 52 and gains all the same). H200, share of
// copy bandwidth of the forward A X, sub-group per row -> row batches:
// bf16 D=64 web-like (77% of rows hold only their self loop; about 11
// batches a sub-group) 66% -> 75%, D=128 90% -> 104%; fp32 D=64 pokec- /
// web- / products-like (6 to 11 batches) 103 / 104 / 108% -> 107 / 113 /
// 110%. Where the rows fill the grid once (a batch or none a sub-group) it
// lost: arxiv-like bf16 / fp32 D=64 43 / 78% -> 39 / 69%, roads-like 82 /
// 99% -> 68 / 76%. A sub-group's one batch waits for its extents, then its
// first indices, then its gathers, with nothing to overlap them, where the
// sub-group-per-row kernel's sub-groups take 4 to 10 rows, each row's
// extents and first indices loading during the row before. For 16-bit
// rows that grouped_rows leaves to a warp (pokec-, products-like) batches
// lost too: 83 / 89% -> 75 / 82%.
constexpr int64_t kMinBatchesPerSubGroup = 4;

// Whether grouped rows (sub_groups > 1) go in batches, and then the grid.
template <typename Traits>
bool row_batches(const pygio_spmm_csr_params& p, WarpLayout layout, int sub_groups,
                 unsigned* grid) {
  if (sub_groups == 1) return false;
  const int64_t batch_rows = int64_t{1} << layout.shift;
  const int64_t batches = (p.a.num_rows + batch_rows - 1) / batch_rows;
  const int64_t per_block = Traits::kWarpsPerBlock * sub_groups;
  if (resident_grid(batches, per_block, Traits::kThreadsPerBlock, p.device, grid) != PYGIO_OK)
    return false;  // the other kernels' grid reports it
  return batches >= kMinBatchesPerSubGroup * per_block * *grid;
}

template <typename Traits>
int launch_forward(const pygio_spmm_csr_params& p, cudaStream_t stream) {
  using acc_t = typename Traits::acc_t;
  HubWorkspace<acc_t> ws{HubList{nullptr, nullptr, 0}, nullptr, forward_hub_threshold(p)};
  const int64_t slots = forward_hub_slots(p);
  if (slots > 0) {
    // Layout: counter, hub accumulators (both zeroed by one memset), hub list.
    auto* base = static_cast<char*>(p.workspace);
    const size_t zeroed = kAlign + round_up(slots * p.width * sizeof(acc_t));
    ws.list = HubList{reinterpret_cast<unsigned long long*>(base),
                      reinterpret_cast<HubEntry*>(base + zeroed), slots};
    ws.sums = reinterpret_cast<acc_t*>(base + kAlign);
    PYGIO_CHECK_CUDA(cudaMemsetAsync(base, 0, zeroed, stream));
  }
  const WarpLayout layout = warp_layout(p.width / Traits::kVec, Traits::kPieces);
  const int sub_groups = grouped_rows<Traits>(p, layout) ? kWarpSize >> layout.shift : 1;
  unsigned grid = 0;
  bool batched = false;
  if constexpr (sizeof(typename Traits::index_t) == 4) {  // int32 indices only: see above
    batched = row_batches<Traits>(p, layout, sub_groups, &grid);
    if (batched)
      spmm_row_batches_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, layout,
                                                                                     ws);
  }
  if (!batched) {
    PYGIO_TRY(resident_grid(p.a.num_rows, Traits::kWarpsPerBlock * sub_groups,
                            Traits::kThreadsPerBlock, p.device, &grid));
    if (sub_groups > 1)
      spmm_rows_grouped_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, layout,
                                                                                      ws);
    else
      spmm_rows_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, layout, ws);
  }
  PYGIO_CHECK_CUDA(cudaGetLastError());
  if (slots == 0) return PYGIO_OK;
  // Every hub chunk is a warp's work; at most nnz / kHubChunk + slots chunks.
  PYGIO_TRY(resident_grid(p.a.nnz / kHubChunk + slots, Traits::kWarpsPerBlock,
                          Traits::kThreadsPerBlock, p.device, &grid));
  spmm_hub_chunks_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, layout,
                                                                                 ws);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  PYGIO_TRY(resident_grid(slots, Traits::kWarpsPerBlock, Traits::kThreadsPerBlock, p.device,
                          &grid));
  spmm_hub_finish_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, ws);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  return PYGIO_OK;
}

template <typename Traits>
int launch_transposed(const pygio_spmm_csr_params& p, cudaStream_t stream) {
  using acc_t = typename Traits::acc_t;
  using out_t = typename Traits::out_t;
  const int64_t num_out = output_rows(p);
  const bool direct = sizeof(out_t) == sizeof(acc_t);  // Y is its own accumulator
  acc_t* acc = direct ? static_cast<acc_t*>(p.y) : static_cast<acc_t*>(p.workspace);
  const int64_t acc_stride = direct ? p.y_row_stride : p.width;
  PYGIO_TRY(zero_rows(acc, num_out, p.width * sizeof(acc_t), acc_stride * sizeof(acc_t), stream));
  if (p.a.nnz > 0) {
    const WarpLayout layout = warp_layout(p.width / Traits::kVec, Traits::kPieces);
    unsigned grid = 0;
    PYGIO_TRY(resident_grid((p.a.nnz + kScatterChunk - 1) / kScatterChunk,
                            Traits::kWarpsPerBlock, Traits::kThreadsPerBlock, p.device, &grid));
    spmm_scatter_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, layout, acc,
                                                                              acc_stride);
    PYGIO_CHECK_CUDA(cudaGetLastError());
  }
  if (direct) return PYGIO_OK;
  unsigned grid = 0;
  PYGIO_TRY(resident_grid(num_out * p.width, Traits::kThreadsPerBlock, Traits::kThreadsPerBlock,
                          p.device, &grid));
  spmm_cast_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, num_out, acc);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  return PYGIO_OK;
}

template <typename scalar_t, typename value_t, typename index_t, typename out_t>
int launch(const pygio_spmm_csr_params& p) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const int vec = vector_elements(p);
  const bool wide = wide_row(p.width / vec);
  auto run = [&](auto vec_constant) {
    constexpr int kVec = decltype(vec_constant)::value;
    auto go = [&](auto traits) {
      using Traits = decltype(traits);
      return p.transpose ? launch_transposed<Traits>(p, stream)
                         : launch_forward<Traits>(p, stream);
    };
    using Narrow = SpmmTraits<scalar_t, value_t, index_t, kVec, 1, out_t>;
    if (wide)
      return go(SpmmTraits<scalar_t, value_t, index_t, kVec, Narrow::wide_pieces(), out_t>{});
    return go(Narrow{});
  };
  constexpr int kWide = 16 / sizeof(scalar_t), kHalf = 8 / sizeof(scalar_t);
  if (vec == kWide) return run(std::integral_constant<int, kWide>{});
  if (kHalf > 1 && vec == kHalf) return run(std::integral_constant<int, kHalf>{});
  return run(std::integral_constant<int, 1>{});
}

// Binds value_t (the features' type, or float for 16-bit features) and
// out_t (the features' type, or with float values float for 16-bit
// features and a 16-bit type for float features).
template <typename scalar_t>
int dispatch_values(const pygio_spmm_csr_params& p) {
  return PYGIO_DISPATCH_INDEX(p.a.index_bits, [&] {
    if constexpr (sizeof(scalar_t) == 2) {
      if (p.values_dtype != p.dtype) {
        if (p.y_dtype != p.dtype) return launch<scalar_t, float, index_t, float>(p);
        return launch<scalar_t, float, index_t, scalar_t>(p);
      }
    } else if constexpr (std::is_same_v<scalar_t, float>) {
      if (p.y_dtype == PYGIO_BFLOAT16) return launch<float, float, index_t, __nv_bfloat16>(p);
      if (p.y_dtype == PYGIO_FLOAT16) return launch<float, float, index_t, __half>(p);
    }
    return launch<scalar_t, scalar_t, index_t, scalar_t>(p);
  });
}

// Whether (dtype, values_dtype, y_dtype) is a combination the kernels take.
bool supported_y_dtype(const pygio_spmm_csr_params& p) {
  if (p.y_dtype == p.dtype) return true;
  const auto half = [](int32_t dtype) {
    return dtype == PYGIO_FLOAT16 || dtype == PYGIO_BFLOAT16;
  };
  return p.values_dtype == PYGIO_FLOAT32 &&
         ((half(p.dtype) && p.y_dtype == PYGIO_FLOAT32) ||
          (p.dtype == PYGIO_FLOAT32 && half(p.y_dtype)));
}

int check_spmm_csr(const pygio_spmm_csr_params& p, const char* entry) {
  PYGIO_TRY(check_csr(p.a, entry));
  PYGIO_TRY(check_dtype(p.dtype, entry));
  const bool half = element_size(p.dtype) == 2;
  PYGIO_CHECK_ARG(p.values_dtype == p.dtype || (half && p.values_dtype == PYGIO_FLOAT32),
                  entry_message(entry, "values_dtype must be dtype, or float32 for 16-bit "
                                       "dtypes"));
  PYGIO_CHECK_ARG(supported_y_dtype(p),
                  entry_message(entry, "y_dtype must be dtype, or with float32 values float32 "
                                       "for a 16-bit dtype or 16-bit for float32"));
  PYGIO_CHECK_ARG(p.transpose == 0 || p.transpose == 1,
                  entry_message(entry, "transpose must be 0 or 1"));
  PYGIO_CHECK_ARG(!(p.transpose && (p.deterministic || p.bias != nullptr)),
                  entry_message(entry, "the transposed SpMM takes no bias and uses atomics"));
  PYGIO_CHECK_ARG(p.width >= 0, entry_message(entry, "width must be non-negative"));
  if (output_rows(p) == 0 || p.width == 0) return PYGIO_OK;
  PYGIO_CHECK_ARG(p.y != nullptr, entry_message(entry, "y must not be NULL"));
  // The forward reads every row's extent, entries or not.
  PYGIO_CHECK_ARG(p.transpose || p.a.rowptr != nullptr,
                  entry_message(entry, "rowptr must not be NULL"));
  PYGIO_TRY(check_row_stride(p.y_row_stride, p.width, "y", entry));
  PYGIO_CHECK_ARG(workspace_bytes(p) == 0 || p.workspace != nullptr,
                  entry_message(entry, "this call needs a workspace"));
  PYGIO_CHECK_ARG(reinterpret_cast<uintptr_t>(p.workspace) % kAlign == 0,
                  entry_message(entry, "workspace must be 16-byte aligned"));
  if (p.a.nnz == 0) return PYGIO_OK;
  PYGIO_CHECK_ARG(p.values != nullptr && p.x != nullptr,
                  entry_message(entry, "values and x must not be NULL"));
  PYGIO_TRY(check_row_stride(p.x_row_stride, p.width, "x", entry));
  return PYGIO_OK;
}

}  // namespace
}  // namespace pygio

extern "C" int pygio_spmm_csr_workspace_size(const pygio_spmm_csr_params* params,
                                             size_t* bytes) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_CHECK_ARG(bytes != nullptr, entry_message(__func__, "bytes must not be NULL"));
  PYGIO_TRY(check_csr(params->a, __func__));
  PYGIO_TRY(check_dtype(params->dtype, __func__));
  PYGIO_CHECK_ARG(supported_y_dtype(*params),
                  entry_message(__func__, "y_dtype must be dtype, or with float32 values "
                                          "float32 for a 16-bit dtype or 16-bit for float32"));
  PYGIO_CHECK_ARG(params->width >= 0, entry_message(__func__, "width must be non-negative"));
  *bytes = workspace_bytes(*params);
  return ok();
}

extern "C" int pygio_spmm_csr(const pygio_spmm_csr_params* params) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_TRY(check_spmm_csr(*params, __func__));
  if (output_rows(*params) == 0 || params->width == 0) return ok();
  DeviceGuard guard;
  PYGIO_TRY(guard.set(params->device));
  PYGIO_TRY(PYGIO_DISPATCH_DTYPE(params->dtype,
                                 [&] { return dispatch_values<scalar_t>(*params); }));
  return ok();
}
