// Entry points of the neighbour min / max kernels: checks, workspace
// layout, vector width and lane layout, dtype / index / reduce dispatch.
#include <algorithm>
#include <string>
#include <type_traits>

#include "../common/abi.h"
#include "../common/device_guard.h"
#include "../common/grid.h"
#include "../common/vector_width.h"
#include "../common/zero_fill.h"
#include "minmax_kernel.cuh"

namespace pygio {
namespace {

constexpr size_t kAlign = 16;
// The backward's widest vector, in features a lane (see pygio_minmax_backward).
constexpr int kMaxBackwardVec = 4;

// Whether the backward of scalar_t accumulates in grad_x itself (float32,
// float64), else in a float32 workspace that the cast kernel copies out.
template <typename scalar_t>
constexpr bool grad_x_is_accumulator() {
  return sizeof(scalar_t) == sizeof(typename DTypeTraits<scalar_t>::acc);
}

size_t round_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

size_t element_size(int32_t dtype) {
  switch (dtype) {
    case PYGIO_FLOAT64: return 8;
    case PYGIO_FLOAT32: return 4;
    default: return 2;
  }
}

size_t accumulator_size(int32_t dtype) { return dtype == PYGIO_FLOAT64 ? 8 : 4; }

// Hub slots of a forward: none for fp64 (its values do not fit the merge word).
int64_t hub_slots(const pygio_minmax_params& p) {
  if (p.hub_degree == nullptr || p.dtype == PYGIO_FLOAT64 || p.width == 0) return 0;
  const int64_t bound = p.a.nnz / (PYGIO_MINMAX_MIN_HUB_DEGREE + 1);
  const int64_t slots = p.max_hubs < bound ? p.max_hubs : bound;
  return slots < p.a.num_rows ? slots : p.a.num_rows;
}

// Layout: counter, the two merge words of every hub element (all zeroed by
// one memset), hub list.
size_t forward_zeroed_bytes(const pygio_minmax_params& p) {
  return kAlign + round_up(2 * hub_slots(p) * p.width * sizeof(unsigned long long));
}
size_t forward_workspace_bytes(const pygio_minmax_params& p) {
  const int64_t slots = hub_slots(p);
  return slots == 0 ? 0 : forward_zeroed_bytes(p) + round_up(slots * sizeof(HubEntry));
}

// Whether grad_x is gathered per source over a_t.
bool gathered(const pygio_minmax_backward_params& p) { return p.deterministic != 0; }

// Hub slots of a backward (as its forward's, fp64 included: the
// backward's hub words are match counts).
int64_t backward_hub_slots(const pygio_minmax_backward_params& p) {
  if (gathered(p) || p.hub_degree == nullptr || p.width == 0) return 0;
  const int64_t bound = p.a.nnz / (PYGIO_MINMAX_MIN_HUB_DEGREE + 1);
  const int64_t slots = p.max_hubs < bound ? p.max_hubs : bound;
  return slots < p.a.num_rows ? slots : p.a.num_rows;
}

// Sources of more than the chunk's entries, which the bucket sums and the
// gather register (row_or_chunk): at most nnz / (chunk + 1); their chunks:
// at most nnz / chunk + one a source.
int64_t source_hub_slots(const pygio_minmax_backward_params& p) {
  const int64_t bound = p.a.nnz / (PYGIO_MINMAX_BUCKET_SOURCE_CHUNK + 1);
  return bound < p.a.num_cols ? bound : p.a.num_cols;
}
int64_t source_chunk_slots(const pygio_minmax_backward_params& p) {
  return p.a.nnz / PYGIO_MINMAX_BUCKET_SOURCE_CHUNK + source_hub_slots(p);
}
// Layout, gathered: the walking elements' shares (an accumulator an
// element of out), a counter and the source hub list, the chunks' sums.
// Otherwise: the fp32 accumulator of 16-bit grad_x, then counter, hub
// matches (zeroed by one memset), hub list, then with buckets their groups
// (zeroed), features, gradients, two counters (zeroed), the source hub
// list and the deferred rows.
struct GatherLayout {
  size_t counter, source_hubs, chunk_sums, end;  // offsets
};
GatherLayout gather_layout(const pygio_minmax_backward_params& p) {
  const size_t acc = accumulator_size(p.dtype);
  const int64_t slots = source_hub_slots(p);
  GatherLayout l{};
  l.counter = round_up(p.a.num_rows * p.width * acc);
  l.source_hubs = l.counter + (slots == 0 ? 0 : kAlign);
  l.chunk_sums = l.source_hubs + round_up(slots * sizeof(HubEntry));
  l.end = l.chunk_sums + (slots == 0 ? 0 : round_up(source_chunk_slots(p) * p.width * acc));
  return l;
}
size_t backward_accumulator_bytes(const pygio_minmax_backward_params& p) {
  const size_t acc = accumulator_size(p.dtype);
  return element_size(p.dtype) == 2 ? round_up(p.a.num_cols * p.width * acc) : 0;
}
size_t backward_zeroed_bytes(const pygio_minmax_backward_params& p) {
  return kAlign + round_up(backward_hub_slots(p) * p.width * accumulator_size(p.dtype));
}
size_t backward_hubs_bytes(const pygio_minmax_backward_params& p) {
  const int64_t slots = backward_hub_slots(p);
  return slots == 0 ? 0 : backward_zeroed_bytes(p) + round_up(slots * sizeof(HubEntry));
}

bool buckets(const pygio_minmax_backward_params& p) {
  return !gathered(p) && p.perm_t != nullptr;
}
struct BucketLayout {
  // offsets: groups, features, gradients, the two counters (source hubs,
  // deferred rows), the source hub list, the deferred rows, the end
  size_t groups, features, grads, counters, source_hubs, deferred_rows, end;
};
BucketLayout bucket_layout(const pygio_minmax_backward_params& p) {
  BucketLayout l{};
  l.groups = backward_accumulator_bytes(p) + backward_hubs_bytes(p);
  l.features = l.groups + round_up(p.a.nnz * sizeof(uint32_t));
  l.grads = l.features + round_up(p.a.num_rows * p.width * sizeof(uint16_t));
  l.counters = l.grads + round_up(p.a.num_rows * p.width * element_size(p.dtype));
  l.source_hubs = l.counters + kAlign;
  l.deferred_rows = l.source_hubs + round_up(source_hub_slots(p) * sizeof(HubEntry));
  l.end = l.deferred_rows + round_up(p.a.num_rows * sizeof(int64_t));
  return l;
}
size_t backward_workspace_bytes(const pygio_minmax_backward_params& p) {
  if (gathered(p)) return gather_layout(p).end;
  if (buckets(p)) return bucket_layout(p).end;
  return backward_accumulator_bytes(p) + backward_hubs_bytes(p);
}

// Lanes spanning a row of `pieces` vectors: enough for them, at most a warp.
WarpLayout warp_layout(int64_t pieces) {
  int shift = 0;
  while (shift < 5 && (int64_t{1} << shift) < pieces) ++shift;
  return WarpLayout{shift};
}

// Calls go(std::integral_constant<int, kVec>) for the vector width `vec`:
// the 16- or 8-byte width where `vec` is one of them (each capped at
// kMaxVec, so that no wider kernel is instantiated), else 1 element.
template <typename scalar_t, int kMaxVec, typename Go>
int with_vector(int vec, Go go) {
  constexpr int kWide = std::min<int>(16 / sizeof(scalar_t), kMaxVec);
  constexpr int kHalf = std::min<int>(8 / sizeof(scalar_t), kMaxVec);
  if (vec == kWide) return go(std::integral_constant<int, kWide>{});
  if constexpr (kHalf > 1 && kHalf < kWide) {
    if (vec == kHalf) return go(std::integral_constant<int, kHalf>{});
  }
  return go(std::integral_constant<int, 1>{});
}

// Calls go(std::bool_constant<is max>) for the reduce code.
template <typename Go>
int with_reduce(int32_t reduce, Go go) {
  return reduce == 1 ? go(std::true_type{}) : go(std::false_type{});
}

// Entries a hub chunk takes: kMinMaxHubChunk, halved (down to
// kMinMaxMinHubChunk) while the structure's nnz entries would make fewer
// than two chunks a resident warp of blocks of `threads_per_block`. The
// hub chunks run after the rows kernel, alone on the GPU: arxiv-like's 927
// hubs (34% of its 1.17M entries) made 1541 chunks of 256 for 8448 warps
// on an H200.
int hub_chunk(int64_t nnz, int threads_per_block, int device, int64_t* chunk) {
  unsigned grid = 0;
  PYGIO_TRY(resident_grid(nnz, 1, threads_per_block, device, &grid));
  const int64_t warps = static_cast<int64_t>(grid) * (threads_per_block / kWarpSize);
  *chunk = kMinMaxHubChunk;
  while (*chunk > kMinMaxMinHubChunk && nnz / *chunk < 2 * warps) *chunk /= 2;
  return PYGIO_OK;
}

// Column slabs of the forward. Where x is many times larger than L2 and
// rows are long, a source row is gathered by many rows far apart in the
// launch and leaves L2 between them. The rows kernel and the hub chunks
// then run a slab of kSlabBytes a row at a time: a slab's gathered rows
// take a fraction of the bytes, and more of them hit. H200, min D=512
// forward with arg (scripts/kernel_bandwidth.py, ms, one launch / slabs,
// the same call): pokec-like fp32 16.50 / 15.80-15.90 (128 columns), bf16
// 10.37 / 10.35 (256); products-like fp32 33.39 / 31.81-31.84, bf16 20.53
// / 20.27-20.29. Slabs of 256 fp32 columns gave pokec-like 16.05, of 128
// bf16 columns 12.4; 128 fp32 columns lost on web-like (4.5 entries a row:
// 7.9 -> 8.9) and gave nothing on arxiv-like (x 7 times L2); two pieces a
// lane on 16 lanes, two rows' entries at a time, lost (pokec-like 17.4).
constexpr int64_t kSlabBytes = 512;
constexpr int64_t kSlabMinL2Multiple = 32;  // x bytes over L2 bytes
constexpr int64_t kSlabMinDegree = 8;       // average entries a row

// The pieces (of `vec` elements) of a row that one launch of the rows
// kernel takes: a slab of kSlabBytes where the rule above applies, else
// the whole row.
int slab_pieces(const pygio_minmax_params& p, size_t element_size, int vec, int64_t* pieces) {
  const int64_t row_pieces = p.width / vec;
  *pieces = row_pieces;
  const int64_t slab = kSlabBytes / (vec * static_cast<int64_t>(element_size));
  if (element_size > 4 || slab >= row_pieces || p.a.nnz < kSlabMinDegree * p.a.num_rows)
    return PYGIO_OK;
  int64_t l2 = 0;
  PYGIO_TRY(l2_cache_bytes(p.device, &l2));
  const int64_t x_bytes = p.a.num_cols * p.width * static_cast<int64_t>(element_size);
  if (x_bytes >= kSlabMinL2Multiple * l2) *pieces = slab;
  return PYGIO_OK;
}

template <typename Traits>
int launch_forward(const pygio_minmax_params& p, int64_t slab, cudaStream_t stream) {
  MinMaxHubs hubs{HubList{nullptr, nullptr, 0}, nullptr, nullptr, p.hub_degree,
                  kMinMaxHubChunk};
  const int64_t slots = hub_slots(p);
  if (slots > 0) {
    auto* base = static_cast<char*>(p.workspace);
    hubs.list = HubList{reinterpret_cast<unsigned long long*>(base),
                        reinterpret_cast<HubEntry*>(base + forward_zeroed_bytes(p)), slots};
    hubs.words = reinterpret_cast<unsigned long long*>(base + kAlign);
    hubs.last_words = hubs.words + slots * p.width;
    PYGIO_CHECK_CUDA(cudaMemsetAsync(base, 0, forward_zeroed_bytes(p), stream));
    PYGIO_TRY(hub_chunk(p.a.nnz, Traits::kThreadsPerBlock, p.device, &hubs.chunk));
  }
  const int64_t pieces = p.width / Traits::kVec;
  const WarpLayout layout = warp_layout(slab);
  unsigned rows_grid = 0, chunks_grid = 0;
  PYGIO_TRY(resident_grid(p.a.num_rows, Traits::kWarpsPerBlock, Traits::kThreadsPerBlock,
                          p.device, &rows_grid));
  constexpr bool kHubs = sizeof(typename Traits::acc_t) == 4;  // words of 32-bit values
  if (slots > 0)
    PYGIO_TRY(resident_grid(p.a.nnz / hubs.chunk + slots, Traits::kWarpsPerBlock,
                            Traits::kThreadsPerBlock, p.device, &chunks_grid));
  // A slab's rows, then its hubs' chunks, while the slab's source rows are in L2.
  for (int64_t first = 0; first < pieces; first += slab) {
    const PieceRange range{first, std::min(first + slab, pieces)};
    minmax_rows_kernel<Traits><<<rows_grid, Traits::kThreadsPerBlock, 0, stream>>>(
        p, layout, hubs, range);
    PYGIO_CHECK_CUDA(cudaGetLastError());
    if constexpr (kHubs) {
      if (slots > 0) {
        minmax_hub_chunks_kernel<Traits><<<chunks_grid, Traits::kThreadsPerBlock, 0, stream>>>(
            p, layout, hubs, range);
        PYGIO_CHECK_CUDA(cudaGetLastError());
      }
    }
  }
  if (slots == 0) return PYGIO_OK;
  if constexpr (kHubs) {
    unsigned grid = 0;
    PYGIO_TRY(resident_grid(slots * p.width, Traits::kThreadsPerBlock, Traits::kThreadsPerBlock,
                            p.device, &grid));
    minmax_hub_finish_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, hubs);
    PYGIO_CHECK_CUDA(cudaGetLastError());
  }
  return PYGIO_OK;
}

// The bucket path up to its deferred rows (pyg_ioaware.h): the bucket rows
// kernel (its groups and the deferred rows, *deferred), then a warp per
// source storing every row of acc, then a warp per chunk of the long
// sources it registered; the source kernels' sums in dynamic shared memory.
template <typename Traits>
int launch_bucket_sums(const pygio_minmax_backward_params& p, WarpLayout layout,
                       typename Traits::acc_t* acc, int64_t acc_stride, DeferredRows* deferred,
                       cudaStream_t stream) {
  using scalar_t = typename Traits::scalar_t;
  auto* base = static_cast<char*>(p.workspace);
  const BucketLayout l = bucket_layout(p);
  const GradBuckets<scalar_t> state{reinterpret_cast<uint32_t*>(base + l.groups),
                                    reinterpret_cast<uint16_t*>(base + l.features),
                                    reinterpret_cast<scalar_t*>(base + l.grads)};
  auto* counters = reinterpret_cast<unsigned long long*>(base + l.counters);
  const HubList source_hubs{counters, reinterpret_cast<HubEntry*>(base + l.source_hubs),
                            source_hub_slots(p)};
  *deferred = DeferredRows{counters + 1, reinterpret_cast<int64_t*>(base + l.deferred_rows)};
  PYGIO_CHECK_CUDA(cudaMemsetAsync(base + l.groups, 0, l.features - l.groups, stream));
  PYGIO_CHECK_CUDA(cudaMemsetAsync(counters, 0, kAlign, stream));
  unsigned grid = 0;
  PYGIO_TRY(resident_grid(minmax_grad_bucket_rows_kernel<Traits>, p.a.num_rows,
                          Traits::kWarpsPerBlock, Traits::kThreadsPerBlock, p.device, &grid));
  minmax_grad_bucket_rows_kernel<Traits>
      <<<grid, Traits::kThreadsPerBlock,
         Traits::kWarpsPerBlock * p.width * kStagedSlotBytes<scalar_t>, stream>>>(
          p, layout, state, *deferred);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  const size_t sums = Traits::kWarpsPerBlock * p.width * sizeof(typename Traits::acc_t);
  PYGIO_TRY(resident_grid(p.a.num_cols, Traits::kWarpsPerBlock, Traits::kThreadsPerBlock,
                          p.device, &grid));
  minmax_grad_bucket_sums_kernel<Traits, false><<<grid, Traits::kThreadsPerBlock, sums, stream>>>(
      p, state, source_hubs, acc, acc_stride);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  if (source_hubs.capacity == 0) return PYGIO_OK;
  PYGIO_TRY(resident_grid(source_chunk_slots(p), Traits::kWarpsPerBlock,
                          Traits::kThreadsPerBlock, p.device, &grid));
  minmax_grad_bucket_sums_kernel<Traits, true><<<grid, Traits::kThreadsPerBlock, sums, stream>>>(
      p, state, source_hubs, acc, acc_stride);
  PYGIO_CHECK_CUDA(cudaGetLastError());
  return PYGIO_OK;
}

// The gathered backward (pyg_ioaware.h): the walking elements' shares
// (minmax_walk_share_kernel), a warp per source storing its grad_x row and
// registering the sources of more than PYGIO_MINMAX_BUCKET_SOURCE_CHUNK
// entries, a warp per chunk of those storing its sums, then each
// registered source's chunks summed in order.
template <typename Traits>
int launch_gather(const pygio_minmax_backward_params& p, cudaStream_t stream) {
  using acc_t = typename Traits::acc_t;
  const GatherLayout l = gather_layout(p);
  auto* base = static_cast<char*>(p.workspace);
  auto* share = reinterpret_cast<acc_t*>(base);
  auto* chunk_sums = reinterpret_cast<acc_t*>(base + l.chunk_sums);
  const HubList source_hubs{reinterpret_cast<unsigned long long*>(base + l.counter),
                            reinterpret_cast<HubEntry*>(base + l.source_hubs),
                            source_hub_slots(p)};
  unsigned grid = 0;
  if (p.a.num_rows * p.width > 0) {
    PYGIO_TRY(resident_grid(p.a.num_rows * p.width, Traits::kThreadsPerBlock,
                            Traits::kThreadsPerBlock, p.device, &grid));
    minmax_walk_share_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, share);
    PYGIO_CHECK_CUDA(cudaGetLastError());
  }
  if (source_hubs.capacity > 0)
    PYGIO_CHECK_CUDA(cudaMemsetAsync(source_hubs.counter, 0, kAlign, stream));
  const int64_t pieces = p.width / Traits::kVec;
  const WarpLayout layout = warp_layout((pieces + kGatherPieces - 1) / kGatherPieces);
  auto gather = [&](auto by_position) -> int {
    constexpr bool kByPosition = decltype(by_position)::value;
    PYGIO_TRY(resident_grid(p.a_t.num_rows, Traits::kWarpsPerBlock, Traits::kThreadsPerBlock,
                            p.device, &grid));
    minmax_gather_grad_kernel<Traits, kByPosition, false>
        <<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, layout, share, source_hubs,
                                                        chunk_sums);
    PYGIO_CHECK_CUDA(cudaGetLastError());
    if (source_hubs.capacity == 0) return PYGIO_OK;
    PYGIO_TRY(resident_grid(source_chunk_slots(p), Traits::kWarpsPerBlock,
                            Traits::kThreadsPerBlock, p.device, &grid));
    minmax_gather_grad_kernel<Traits, kByPosition, true>
        <<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, layout, share, source_hubs,
                                                        chunk_sums);
    PYGIO_CHECK_CUDA(cudaGetLastError());
    PYGIO_TRY(resident_grid(source_hubs.capacity * p.width, Traits::kThreadsPerBlock,
                            Traits::kThreadsPerBlock, p.device, &grid));
    minmax_gather_hub_finish_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(
        p, source_hubs, chunk_sums);
    PYGIO_CHECK_CUDA(cudaGetLastError());
    return PYGIO_OK;
  };
  return p.perm_t != nullptr ? gather(std::true_type{}) : gather(std::false_type{});
}

template <typename Traits>
int launch_backward(const pygio_minmax_backward_params& p, cudaStream_t stream) {
  using acc_t = typename Traits::acc_t;
  using scalar_t = typename Traits::scalar_t;
  unsigned grid = 0;
  if (gathered(p)) return launch_gather<Traits>(p, stream);
  constexpr bool kDirect = grad_x_is_accumulator<scalar_t>();
  acc_t* acc = kDirect ? static_cast<acc_t*>(p.grad_x) : static_cast<acc_t*>(p.workspace);
  const int64_t acc_stride = kDirect ? p.grad_x_row_stride : p.width;
  // The bucket path's source kernel stores every row of acc; else it is zeroed.
  const bool bucketed = buckets(p) && p.a.num_rows > 0 && p.a.nnz > 0;
  if (!bucketed) {
    PYGIO_TRY(zero_rows(acc, p.a.num_cols, p.width * sizeof(acc_t), acc_stride * sizeof(acc_t),
                        stream));
  }
  GradHubs<acc_t> hubs{HubList{nullptr, nullptr, 0}, nullptr, kMinMaxHubChunk};
  const int64_t slots = backward_hub_slots(p);
  if (slots > 0) {
    auto* base = static_cast<char*>(p.workspace) + backward_accumulator_bytes(p);
    hubs.list = HubList{reinterpret_cast<unsigned long long*>(base),
                        reinterpret_cast<HubEntry*>(base + backward_zeroed_bytes(p)), slots};
    hubs.matches = reinterpret_cast<acc_t*>(base + kAlign);
    PYGIO_CHECK_CUDA(cudaMemsetAsync(base, 0, backward_zeroed_bytes(p), stream));
    PYGIO_TRY(hub_chunk(p.a.nnz, Traits::kThreadsPerBlock, p.device, &hubs.chunk));
  }
  if (p.a.num_rows > 0 && p.a.nnz > 0) {
    const WarpLayout layout = warp_layout(p.width / Traits::kVec);
    // fp32: one wave of the kernel's own resident blocks (80 registers at
    // D=512: 3 blocks an SM, where the thread limit's grid made 2.67 waves).
    // H200, min backward: D=512 arxiv-like 0.545-0.576 -> 0.519-0.537 ms,
    // web-like 7.87-7.97 -> 7.58-7.60; D=64 roads-like 0.114-0.118 -> 0.107,
    // web-like 1.80-1.84 -> 1.66-1.68; pokec-like within 2% either way.
    // 16-bit rows keep the thread limit's grid: their ties make walks of
    // uneven cost, which the later waves' blocks balanced (one wave:
    // arxiv-like bf16 D=512 1.90 -> 2.03, though pokec-like 30.5 -> 29.5).
    auto rows = [&](auto kernel, const DeferredRows& deferred) -> int {
      if constexpr (std::is_same_v<scalar_t, float>)
        PYGIO_TRY(resident_grid(kernel, p.a.num_rows, Traits::kWarpsPerBlock,
                                Traits::kThreadsPerBlock, p.device, &grid));
      else
        PYGIO_TRY(resident_grid(p.a.num_rows, Traits::kWarpsPerBlock, Traits::kThreadsPerBlock,
                                p.device, &grid));
      kernel<<<grid, Traits::kThreadsPerBlock, 0, stream>>>(p, layout, hubs, deferred, acc,
                                                            acc_stride);
      PYGIO_CHECK_CUDA(cudaGetLastError());
      return PYGIO_OK;
    };
    if (bucketed) {
      if constexpr (sizeof(scalar_t) <= 4) {  // check_backward refuses float64
        DeferredRows deferred{};
        PYGIO_TRY(launch_bucket_sums<Traits>(p, layout, acc, acc_stride, &deferred, stream));
        PYGIO_TRY(rows(minmax_grad_rows_kernel<Traits, true>, deferred));
      }
    } else {
      PYGIO_TRY(rows(minmax_grad_rows_kernel<Traits, false>, DeferredRows{}));
    }
    if (slots > 0) {
      PYGIO_TRY(resident_grid(p.a.nnz / hubs.chunk + slots, Traits::kWarpsPerBlock,
                              Traits::kThreadsPerBlock, p.device, &grid));
      minmax_grad_hub_count_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(
          p, layout, hubs);
      PYGIO_CHECK_CUDA(cudaGetLastError());
      minmax_grad_hub_share_kernel<Traits><<<grid, Traits::kThreadsPerBlock, 0, stream>>>(
          p, layout, hubs, acc, acc_stride);
      PYGIO_CHECK_CUDA(cudaGetLastError());
    }
  }
  if constexpr (!kDirect) {
    // Four features a thread (16 bytes of fp32 read) where grad_x allows.
    auto cast = [&](auto vec_constant) -> int {
      constexpr int V = decltype(vec_constant)::value;
      PYGIO_TRY(resident_grid(p.a.num_cols * (p.width / V), kCastThreadsPerBlock,
                              kCastThreadsPerBlock, p.device, &grid));
      minmax_cast_kernel<scalar_t, acc_t, V><<<grid, kCastThreadsPerBlock, 0, stream>>>(p, acc);
      PYGIO_CHECK_CUDA(cudaGetLastError());
      return PYGIO_OK;
    };
    const bool four = widest_vector(sizeof(scalar_t), p.width, {p.grad_x_row_stride},
                                    {p.grad_x}) >= 4;
    PYGIO_TRY(four ? cast(std::integral_constant<int, 4>{})
                   : cast(std::integral_constant<int, 1>{}));
  }
  return PYGIO_OK;
}

// Binds the index type, the reduce and the vector width (at most
// kMaxVec), then calls launch(Traits) for a params struct P.
template <typename scalar_t, int kMaxVec, typename P, typename Launch>
int dispatch(const P& p, int vec, Launch launch) {
  return PYGIO_DISPATCH_INDEX(p.a.index_bits, [&] {
    return with_reduce(p.reduce, [&](auto is_max) {
      return with_vector<scalar_t, kMaxVec>(vec, [&](auto vec_constant) {
        return launch(MinMaxTraits<scalar_t, index_t, decltype(vec_constant)::value,
                                   decltype(is_max)::value>{});
      });
    });
  });
}

int check_common(int32_t dtype, int32_t reduce, const pygio_csr& a, int64_t width,
                 const char* entry) {
  PYGIO_TRY(check_csr(a, entry));
  PYGIO_TRY(check_dtype(dtype, entry));
  PYGIO_CHECK_ARG(reduce == 0 || reduce == 1, entry_message(entry, "reduce must be 0 or 1"));
  PYGIO_CHECK_ARG(width >= 0, entry_message(entry, "width must be non-negative"));
  PYGIO_CHECK_ARG(a.num_cols <= INT32_MAX,
                  entry_message(entry, "sources are int32: num_cols must be below 2^31"));
  return PYGIO_OK;
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

int check_forward(const pygio_minmax_params& p, const char* entry) {
  PYGIO_TRY(check_common(p.dtype, p.reduce, p.a, p.width, entry));
  PYGIO_CHECK_ARG(p.max_hubs >= 0, entry_message(entry, "max_hubs must be non-negative"));
  if (p.a.num_rows == 0 || p.width == 0) return PYGIO_OK;
  PYGIO_CHECK_ARG(p.a.rowptr != nullptr && p.out != nullptr,
                  entry_message(entry, "rowptr and out must not be NULL"));
  PYGIO_TRY(check_row_stride(p.out_row_stride, p.width, "out", entry));
  PYGIO_CHECK_ARG(aligned(p.arg, kAlign), entry_message(entry, "arg must be 16-byte aligned"));
  PYGIO_CHECK_ARG(p.arg == nullptr || p.arg_bytes == 1 || p.arg_bytes == 2,
                  entry_message(entry, "arg_bytes must be 1 or 2"));
  PYGIO_CHECK_ARG(forward_workspace_bytes(p) == 0 || p.workspace != nullptr,
                  entry_message(entry, "this call needs a workspace"));
  PYGIO_CHECK_ARG(aligned(p.workspace, kAlign),
                  entry_message(entry, "workspace must be 16-byte aligned"));
  if (p.a.nnz == 0) return PYGIO_OK;
  PYGIO_CHECK_ARG(p.x != nullptr, entry_message(entry, "x must not be NULL"));
  PYGIO_TRY(check_row_stride(p.x_row_stride, p.width, "x", entry));
  return PYGIO_OK;
}

int check_backward(const pygio_minmax_backward_params& p, const char* entry) {
  PYGIO_TRY(check_common(p.dtype, p.reduce, p.a, p.width, entry));
  PYGIO_CHECK_ARG(p.deterministic == 0 || p.deterministic == 1,
                  entry_message(entry, "deterministic must be 0 or 1"));
  const bool transposed = gathered(p) || buckets(p);
  if (transposed) {
    PYGIO_TRY(check_csr(p.a_t, entry));
    PYGIO_CHECK_ARG(p.a_t.num_rows == p.a.num_cols && p.a_t.num_cols == p.a.num_rows &&
                        p.a_t.nnz == p.a.nnz && p.a_t.index_bits == p.a.index_bits,
                    entry_message(entry, "a_t must be the transpose of a"));
  }
  if (buckets(p)) {
    PYGIO_CHECK_ARG(element_size(p.dtype) != 8,
                    entry_message(entry, "buckets take float32, float16 or bfloat16"));
    PYGIO_CHECK_ARG(p.width <= PYGIO_MINMAX_BUCKET_MAX_WIDTH,
                    entry_message(entry, "buckets take at most PYGIO_MINMAX_BUCKET_MAX_WIDTH "
                                         "features"));
  }
  if (p.a.num_cols == 0 || p.width == 0) return PYGIO_OK;
  PYGIO_CHECK_ARG(p.grad_x != nullptr, entry_message(entry, "grad_x must not be NULL"));
  PYGIO_TRY(check_row_stride(p.grad_x_row_stride, p.width, "grad_x", entry));
  PYGIO_CHECK_ARG(backward_workspace_bytes(p) == 0 || p.workspace != nullptr,
                  entry_message(entry, "this call needs a workspace"));
  PYGIO_CHECK_ARG(aligned(p.workspace, kAlign),
                  entry_message(entry, "workspace must be 16-byte aligned"));
  // A gather reads every source's row extent, entries or not.
  PYGIO_CHECK_ARG(!transposed || p.a_t.rowptr != nullptr,
                  entry_message(entry, "a_t.rowptr must not be NULL"));
  if (p.a.num_rows == 0) return PYGIO_OK;
  PYGIO_CHECK_ARG(p.a.rowptr != nullptr && p.arg != nullptr && p.grad_out != nullptr &&
                      p.out != nullptr && aligned(p.arg, kAlign),
                  entry_message(entry, "rowptr, out, arg and grad_out must not be NULL, arg "
                                       "16-byte aligned"));
  PYGIO_CHECK_ARG(p.arg_bytes == 1 || p.arg_bytes == 2,
                  entry_message(entry, "arg_bytes must be 1 or 2"));
  PYGIO_TRY(check_row_stride(p.out_row_stride, p.width, "out", entry));
  PYGIO_TRY(check_row_stride(p.grad_out_row_stride, p.width, "grad_out", entry));
  PYGIO_CHECK_ARG(!transposed || p.a.nnz == 0 || p.a_t.col != nullptr,
                  entry_message(entry, "a_t.col must not be NULL"));
  if (p.a.nnz == 0) return PYGIO_OK;
  PYGIO_CHECK_ARG(p.x != nullptr, entry_message(entry, "x must not be NULL"));
  PYGIO_TRY(check_row_stride(p.x_row_stride, p.width, "x", entry));
  return PYGIO_OK;
}

}  // namespace
}  // namespace pygio

extern "C" int pygio_minmax_workspace_size(const pygio_minmax_params* params, size_t* bytes) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_CHECK_ARG(bytes != nullptr, entry_message(__func__, "bytes must not be NULL"));
  PYGIO_TRY(check_common(params->dtype, params->reduce, params->a, params->width, __func__));
  PYGIO_CHECK_ARG(params->max_hubs >= 0,
                  entry_message(__func__, "max_hubs must be non-negative"));
  *bytes = forward_workspace_bytes(*params);
  return ok();
}

extern "C" int pygio_minmax(const pygio_minmax_params* params) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_TRY(check_forward(*params, __func__));
  const pygio_minmax_params& p = *params;
  if (p.a.num_rows == 0 || p.width == 0) return ok();
  DeviceGuard guard;
  PYGIO_TRY(guard.set(p.device));
  const auto stream = static_cast<cudaStream_t>(p.stream);
  PYGIO_TRY(PYGIO_DISPATCH_DTYPE(p.dtype, [&] {
    const int vec = widest_vector(sizeof(scalar_t), p.width, {p.x_row_stride, p.out_row_stride},
                                  {p.x, p.out});
    int64_t slab = 0;
    PYGIO_TRY(slab_pieces(p, sizeof(scalar_t), vec, &slab));
    // fp32 slabs (rows) of more than one pass of a warp take two pieces a
    // lane (H200, min D=512 forward with arg: roads-like 0.32 -> 0.28 ms,
    // arxiv-like 0.84 -> 0.80, tolokers-like 0.367 -> 0.352, pokec-like
    // 16.9 -> 16.6); 16-bit rows spilled with two and lost 0-6%.
    return dispatch<scalar_t, 16 / sizeof(scalar_t)>(p, vec, [&](auto traits) {
      using Traits = decltype(traits);
      if constexpr (sizeof(scalar_t) == 4) {
        if (slab > kWarpSize) return launch_forward<typename Traits::TwoPieces>(p, slab, stream);
      }
      return launch_forward<Traits>(p, slab, stream);
    });
  }));
  return ok();
}

extern "C" int pygio_minmax_backward_workspace_size(const pygio_minmax_backward_params* params,
                                                    size_t* bytes) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_CHECK_ARG(bytes != nullptr, entry_message(__func__, "bytes must not be NULL"));
  PYGIO_TRY(check_common(params->dtype, params->reduce, params->a, params->width, __func__));
  *bytes = backward_workspace_bytes(*params);
  return ok();
}

extern "C" int pygio_minmax_backward(const pygio_minmax_backward_params* params) {
  using namespace pygio;
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_TRY(check_backward(*params, __func__));
  const pygio_minmax_backward_params& p = *params;
  if (p.a.num_cols == 0 || p.width == 0) return ok();
  DeviceGuard guard;
  PYGIO_TRY(guard.set(p.device));
  const auto stream = static_cast<cudaStream_t>(p.stream);
  PYGIO_TRY(PYGIO_DISPATCH_DTYPE(p.dtype, [&] {
    // At most kMaxBackwardVec features a lane: the walks keep code,
    // gradient and result per feature, and 8 of each spilled (16-bit
    // rows). grad_x counts where it is its own accumulator: float32 walks
    // add a lane's piece to it with one vector atomic. 16-bit gradients
    // reach it through the cast kernel, which picks its own width.
    int vec = std::min(kMaxBackwardVec,
                       widest_vector(sizeof(scalar_t), p.width,
                                     {p.grad_out_row_stride, p.out_row_stride, p.x_row_stride},
                                     {p.grad_out, p.out, p.x}));
    if constexpr (grad_x_is_accumulator<scalar_t>())
      vec = std::min(vec, widest_vector(sizeof(scalar_t), p.width, {p.grad_x_row_stride},
                                        {p.grad_x}));
    return dispatch<scalar_t, kMaxBackwardVec>(p, vec, [&](auto traits) {
      return launch_backward<decltype(traits)>(p, stream);
    });
  }));
  return ok();
}
