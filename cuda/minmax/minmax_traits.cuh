// Compile-time shape of the neighbour min / max kernels and the value
// order they share: a rank where larger wins, and the winner word (rank,
// smaller position in the row, tie bit) that rows merge in registers and
// hub chunks with a 64-bit atomicMax; the arg codes the forward leaves for
// the backward.
#pragma once

#include <stdint.h>

#include "../common/dtype.cuh"
#include "../common/gather.cuh"
#include "../common/hubs.cuh"
#include "../common/vector.cuh"
#include "../common/warp.cuh"

namespace pygio {

// Threads a block of the backward's cast of the fp32 gradient to 16 bits.
constexpr int kCastThreadsPerBlock = 256;

// Hub rows are split into chunks of this many entries, or of fewer (down
// to kMinMaxMinHubChunk) on structures whose entries would not make
// enough chunks for the GPU's warps (minmax_launch.cu, hub_chunk).
constexpr int64_t kMinMaxHubChunk = 256;
static_assert(kMinMaxHubChunk == PYGIO_MINMAX_MIN_HUB_DEGREE,
              "a hub spans at least one full chunk");
constexpr int64_t kMinMaxMinHubChunk = 32;

// Rank of a value: larger wins, for min and max alike; never 0. max ranks
// v and min ranks -v, by the fp32 bits made order-preserving as unsigned.
// The add of zero first folds -0.0 onto +0.0 and turns every NaN into the
// canonical NaN 0x7fffffff (GPU arithmetic keeps no NaN payload or sign),
// which ranks above every number. 16-bit values rank by their exact fp32
// widening. The forward ranks a lane's winner once, when the lane is
// done (LaneWinner).
template <bool kMax>
__device__ __forceinline__ uint32_t rank_of(float v) {
  const uint32_t bits = __float_as_uint(kMax ? v + 0.0f : 0.0f - v);
  return bits ^ (static_cast<uint32_t>(static_cast<int32_t>(bits) >> 31) | 0x80000000u);
}

// The same order for fp64, on 64 bits (fp64 rows are never split: the hub
// merge word holds a 32-bit rank).
template <bool kMax>
__device__ __forceinline__ uint64_t rank_of(double v) {
  if (v != v) return ~0ull;
  const uint64_t bits = v == 0.0 ? 0ull : static_cast<uint64_t>(__double_as_longlong(v));
  const uint64_t key = bits ^ ((bits >> 63) ? ~0ull : (1ull << 63));
  return kMax ? key : ~key;
}

// The value of a rank: rank_of's inverse (-0.0 comes back as +0.0, every
// NaN as the canonical NaN).
template <bool kMax>
__device__ __forceinline__ float value_of_rank(uint32_t rank) {
  const float ranked = __uint_as_float(rank ^ ((rank >> 31) ? 0x80000000u : 0xffffffffu));
  return kMax ? ranked : 0.0f - ranked;
}
template <bool kMax>
__device__ __forceinline__ double value_of_rank(uint64_t rank) {
  if (rank == ~0ull) return __longlong_as_double(0x7ff8000000000000ll);
  const uint64_t key = kMax ? rank : ~rank;
  const uint64_t sign = 1ull << 63;
  return __longlong_as_double(static_cast<long long>((key & sign) ? key ^ sign : ~key));
}

// One element's winner so far as a word that orders like (rank, smaller
// position in the row) and carries a tie bit: merge keeps the larger word
// and sets the tie bit where the ranks are equal, whatever the order of
// merging. The
// all-zero word (rank 0) means no entry yet. For 32-bit ranks it is the
// 64-bit word the hub chunks merge with atomicMax.
template <typename rank_t>
struct WinnerWord;

template <>
struct WinnerWord<uint32_t> {
  using type = unsigned long long;  // rank << 32 | (~position & 0x7fffffff) << 1 | tie bit
  static __device__ __forceinline__ type none() { return 0; }
  static __device__ __forceinline__ type make(uint32_t rank, int32_t position) {
    return static_cast<type>(rank) << 32 | low_of(position);
  }
  // The low half of the word of the entry at `position` (no tie).
  static __device__ __forceinline__ uint32_t low_of(int32_t position) {
    return (static_cast<uint32_t>(~position) & 0x7fffffffu) << 1;
  }
  static __device__ __forceinline__ uint32_t rank(type w) { return static_cast<uint32_t>(w >> 32); }
  static __device__ __forceinline__ int32_t position(type w) {
    return static_cast<int32_t>(~(static_cast<uint32_t>(w) >> 1) & 0x7fffffffu);
  }
  static __device__ __forceinline__ bool tied(type w) { return (w & 1ull) != 0; }
  static __device__ __forceinline__ type merge(type w, type n) {
    return (n > w ? n : w) | (rank(n) == rank(w) ? 1ull : 0ull);
  }
  static __device__ __forceinline__ type shfl_xor(type w, int offset) {
    return __shfl_xor_sync(0xffffffffu, w, offset);
  }
};

template <>
struct WinnerWord<uint64_t> {
  struct type {
    uint64_t rank;
    uint32_t low;  // (~position & 0x7fffffff) << 1 | tie bit, as above
  };
  static __device__ __forceinline__ type none() { return type{0, 0}; }
  static __device__ __forceinline__ type make(uint64_t rank, int32_t position) {
    return type{rank, WinnerWord<uint32_t>::low_of(position)};
  }
  static __device__ __forceinline__ uint64_t rank(type w) { return w.rank; }
  static __device__ __forceinline__ int32_t position(type w) {
    return static_cast<int32_t>(~(w.low >> 1) & 0x7fffffffu);
  }
  static __device__ __forceinline__ bool tied(type w) { return (w.low & 1u) != 0; }
  static __device__ __forceinline__ type merge(type w, type n) {
    const bool equal = n.rank == w.rank;
    type best = (n.rank > w.rank || (equal && n.low > w.low)) ? n : w;
    best.low |= equal ? 1u : 0u;
    return best;
  }
  static __device__ __forceinline__ type shfl_xor(type w, int offset) {
    return type{__shfl_xor_sync(0xffffffffu, w.rank, offset),
                __shfl_xor_sync(0xffffffffu, w.low, offset)};
  }
};

// The better of two floats for min (kMax false) or max, NaN if either is
// (PTX min.NaN / max.NaN, sm_80 on; a select before).
template <bool kMax>
__device__ __forceinline__ float best_keeping_nan(float a, float b) {
  float r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kMax) asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  else asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
#else
  r = a != a || b != b ? __int_as_float(0x7fffffff) : kMax ? fmaxf(a, b) : fminf(a, b);
#endif
  return r;
}

// One element's winner over the entries one lane takes, in increasing
// position (warp_winners' loop), made a winner word when the lane is done.
// For float values: the best value so far (NaN kept), starting from the
// worst infinity, and the low half of its first entry's word (an entry's
// is at least 2), whose tie bit a later equal entry sets and a better one
// clears. An entry equal to the starting value only sets the tie bit (low
// 1); a result equal to the worst infinity walks anyway (arg_code), so the
// loop needs no first-entry test. Two compares, two selects and a min an
// element, where ranking each value and merging 64-bit words took about
// ten instructions (H200, min D=512 fp32 forward with arg: tolokers-like
// 0.49 -> 0.37 ms, arxiv-like 0.96 -> 0.85, pokec-like 18.8 -> 16.9;
// roads-like, rows of two entries, 0.32 either way). double keeps the word.
template <typename acc_t, bool kMax>
struct LaneWinner {
  using Word = WinnerWord<uint64_t>;
  Word::type word_so_far;
  static __device__ __forceinline__ LaneWinner none() { return LaneWinner{Word::none()}; }
  __device__ __forceinline__ void take(acc_t v, uint32_t low) {
    word_so_far = Word::merge(word_so_far, Word::type{rank_of<kMax>(v), low});
  }
  __device__ __forceinline__ Word::type word() const { return word_so_far; }
};

template <bool kMax>
struct LaneWinner<float, kMax> {
  float value;
  uint32_t low;
  static __device__ __forceinline__ LaneWinner none() {
    return LaneWinner{kMax ? -INFINITY : INFINITY, 0u};
  }
  __device__ __forceinline__ void take(float v, uint32_t entry_low) {
    // Comparisons with NaN are false: once the value is NaN it stays.
    const bool better = kMax ? v > value : v < value;
    low = better ? entry_low : low | static_cast<uint32_t>(v == value);
    value = best_keeping_nan<kMax>(value, v);
  }
  __device__ __forceinline__ unsigned long long word() const { return word_of(value, low); }
  // The word of (value, low): none for a lane without entries (low 0 and
  // the starting value); a NaN value's word carries the tie bit, also
  // where a NaN came first and left low 0.
  static __device__ __forceinline__ unsigned long long word_of(float value, uint32_t low) {
    const bool nan = value != value;
    if (low == 0 && !nan) return WinnerWord<uint32_t>::none();
    return static_cast<unsigned long long>(rank_of<kMax>(value)) << 32 | low | (nan ? 1u : 0u);
  }
};

// The winners of the V elements of a lane's piece: a LaneWinner each.
template <typename scalar_t, bool kMax, int V, typename = void>
struct LaneWinners {
  using acc_t = typename DTypeTraits<scalar_t>::acc;
  LaneWinner<acc_t, kMax> element[V];
  __device__ __forceinline__ void init() {
#pragma unroll
    for (int i = 0; i < V; ++i) element[i] = LaneWinner<acc_t, kMax>::none();
  }
  __device__ __forceinline__ void take(const Pack<scalar_t, V>& pack, uint32_t low) {
#pragma unroll
    for (int i = 0; i < V; ++i) element[i].take(DTypeTraits<scalar_t>::load(pack.v[i]), low);
  }
  template <typename word_t>
  __device__ __forceinline__ void words(word_t (&out)[V]) const {
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = element[i].word();
  }
};

// 16-bit pieces on sm_90 and newer: the same rule on pairs of elements in
// their packed 32-bit words (setp and min.NaN / max.NaN on bf16x2 or
// f16x2: seven instructions a pair, where widening and comparing each
// element took twelve); the values are widened (exactly) once, for word().
// H200, min D=512 bf16 forward with arg: tolokers-like 0.326 -> 0.231 ms,
// arxiv-like 0.693 -> 0.592, pokec-like 12.2 -> 10.3, web-like 6.62 ->
// 5.52; fp16 alike.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
constexpr bool kPackedCompares = false;
#else
constexpr bool kPackedCompares = true;
#endif

template <typename scalar_t, bool kMax, int V>
struct LaneWinners<scalar_t, kMax, V,
                   std::enable_if_t<sizeof(scalar_t) == 2 && V % 2 == 0 && kPackedCompares>> {
  static constexpr bool kBf16 = std::is_same_v<scalar_t, __nv_bfloat16>;
  unsigned value[V / 2];  // pairs of 16-bit values
  uint32_t low[V];
  __device__ __forceinline__ void init() {
    // The worst infinity in both halves.
    const unsigned worst = kBf16 ? (kMax ? 0xff80ff80u : 0x7f807f80u)
                                 : (kMax ? 0xfc00fc00u : 0x7c007c00u);
#pragma unroll
    for (int w = 0; w < V / 2; ++w) value[w] = worst;
#pragma unroll
    for (int i = 0; i < V; ++i) low[i] = 0;
  }
  __device__ __forceinline__ void take(const Pack<scalar_t, V>& pack, uint32_t entry_low) {
    unsigned words[V / 2];
    memcpy(words, &pack, sizeof(words));
#pragma unroll
    for (int w = 0; w < V / 2; ++w) take_pair(words[w], entry_low, value[w], low[2 * w],
                                              low[2 * w + 1]);
  }
  __device__ __forceinline__ void words(unsigned long long (&out)[V]) const {
    Pack<scalar_t, V> pack;
    memcpy(&pack, value, sizeof(pack));
    float widened[V];
    widen_pack(pack, widened);
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = LaneWinner<float, kMax>::word_of(widened[i], low[i]);
  }

 private:
  // LaneWinner<float>::take on the two halves of `pair` at once.
  static __device__ __forceinline__ void take_pair(unsigned pair, uint32_t entry_low,
                                                   unsigned& best, uint32_t& low0,
                                                   uint32_t& low1) {
#define PYGIO_TAKE_PAIR(T, BETTER, BEST)                                            \
  asm("{\n\t.reg .pred b0, b1, e0, e1;\n\t"                                        \
      "setp." BETTER "." T " b0|b1, %2, %3;\n\t"                                     \
      "setp.eq." T " e0|e1, %2, %3;\n\t"                                             \
      "@e0 or.b32 %0, %0, 1;\n\t"                                                    \
      "@e1 or.b32 %1, %1, 1;\n\t"                                                    \
      "@b0 mov.b32 %0, %4;\n\t"                                                      \
      "@b1 mov.b32 %1, %4;\n\t"                                                      \
      BEST ".NaN." T " %2, %2, %3;\n\t}"                                             \
      : "+r"(low0), "+r"(low1), "+r"(best)                                           \
      : "r"(pair), "r"(entry_low))
    // min: the entry is better where best > it; max: where best < it.
    if constexpr (kBf16 && kMax) PYGIO_TAKE_PAIR("bf16x2", "lt", "max");
    else if constexpr (kBf16) PYGIO_TAKE_PAIR("bf16x2", "gt", "min");
    else if constexpr (kMax) PYGIO_TAKE_PAIR("f16x2", "lt", "max");
    else PYGIO_TAKE_PAIR("f16x2", "gt", "min");
#undef PYGIO_TAKE_PAIR
  }
};

template <typename scalar_t_, typename index_t_, int kVec_, bool kMax_, int kPieces_ = 1>
struct MinMaxTraits {
  using scalar_t = scalar_t_;  // x and out
  using index_t = index_t_;    // rowptr and col
  using offset_t = EntryOffset<index_t>;  // entry positions (common/gather.cuh)
  using acc_t = typename DTypeTraits<scalar_t>::acc;  // values compared in float (double)
  using rank_t = decltype(rank_of<kMax_>(acc_t()));   // uint32_t (uint64_t for double)
  using Word = WinnerWord<rank_t>;

  static constexpr bool kMax = kMax_;
  static constexpr int kVec = kVec_;  // features per load (16 bytes where alignment allows)
  // Entries in flight per lane (forward), the next step's sources loaded
  // meanwhile (common/gather.cuh): 4, or 2 for eight features a lane or
  // 64-bit indices, which spilled at 4 within 64 registers. Pipelined, the
  // min forward at D=512 (H200) measured pokec-like fp32 24.2 -> 23.4 ms,
  // bf16 23.3 -> 22.6 ms (2 in flight, 4 before), web-like 11.3 -> 11.1
  // and 14.8 -> 13.7 ms.
  // Pieces of kVec features a lane holds in the forward (1, or 2 for wide
  // fp32 rows: minmax_launch.cu): the entries in flight divide among them.
  static constexpr int kPieces = kPieces_;
  static constexpr int kUnroll = (kVec >= 8 || sizeof(index_t_) == 8 ? 2 : 4) / kPieces;
  using TwoPieces = MinMaxTraits<scalar_t_, index_t_, kVec_, kMax_, 2>;
  // Entries in flight per lane in backward walks: 4 (2 before; H200, min
  // D=512 bf16 backward with one walk, pokec-like 33.9 -> 31.2 ms, arxiv-like
  // 2.47 -> 2.23 ms, web-like 20.8 -> 21.2 ms).
  static constexpr int kWalkUnroll = 4;
  static constexpr int kThreadsPerBlock = 256;
  static constexpr int kWarpsPerBlock = kThreadsPerBlock / kWarpSize;
  // Caps registers at 64 a thread (1/2 occupancy): the forward kernels are
  // bound by instruction issue and latency more than by bandwidth.
  static constexpr int kMinBlocksPerSm = 4;
  static_assert(sizeof(scalar_t) * kVec <= 16, "a lane loads at most 16 bytes at once");
  static_assert(kPieces == 1 || kPieces == 2, "one or two pieces a lane");
};

// Whether two values tie: equal, -0.0 equal to +0.0, NaN equal to NaN
// (exactly where their ranks are equal).
template <typename acc_t>
__device__ __forceinline__ bool same_value(acc_t a, acc_t b) {
  return a == b || (a != a && b != b);
}

// Entry e's position in the row whose first entry is row_begin, as the 31
// bits a winner word holds (saturated at 2^31 - 2, so that every entry's
// low half is nonzero: such a position walks anyway).
template <typename offset_t>
__device__ __forceinline__ int32_t position_in_row(offset_t e, int64_t row_begin) {
  if constexpr (sizeof(offset_t) == 4) {
    return static_cast<int32_t>(e - static_cast<offset_t>(row_begin));
  } else {
    const int64_t position = static_cast<int64_t>(e) - row_begin;
    return position < INT32_MAX - 1 ? static_cast<int32_t>(position) : INT32_MAX - 1;
  }
}

// Arg codes (pyg_ioaware.h), decoded into int32 registers: a position in
// the row (the one entry that takes the whole gradient), kCodeWalk (the
// backward walks the row) or kCodeEmpty (a row without entries). Stored as
// unsigned codes of arg_bytes (1 or 2) bytes: the position below W =
// 2^(8 arg_bytes) - 2, W for a walk, W + 1 for an empty row.
constexpr int32_t kCodeWalk = -1;
constexpr int32_t kCodeEmpty = -2;

// W of codes of `bytes` bytes: the stored walk code, one above the last
// position a code holds.
__device__ __forceinline__ uint32_t walk_code(int bytes) { return bytes == 1 ? 0xfeu : 0xfffeu; }

// The decoded code of a winner: its position where the whole gradient goes
// to it, else kCodeWalk (a tie, a zero, NaN or worst-infinity result: +inf
// for min, -inf for max, or a position the stored code cannot hold:
// resolved in backward by walking the row).
template <bool kMax, typename acc_t>
__device__ __forceinline__ int32_t arg_code(int32_t position, bool tied, acc_t value,
                                            int bytes) {
  const acc_t worst = kMax ? -acc_t(INFINITY) : acc_t(INFINITY);
  const bool walk = tied || value == acc_t(0) || value != value || value == worst ||
                    static_cast<uint32_t>(position) >= walk_code(bytes);
  return walk ? kCodeWalk : position;
}

// A decoded code <-> its stored form, for codes whose walk code is `walk`.
__device__ __forceinline__ uint32_t encode_code(int32_t code, uint32_t walk) {
  return code >= 0 ? static_cast<uint32_t>(code) : code == kCodeWalk ? walk : walk + 1;
}
__device__ __forceinline__ int32_t decode_code(uint32_t stored, uint32_t walk) {
  return stored < walk ? static_cast<int32_t>(stored) : stored == walk ? kCodeWalk : kCodeEmpty;
}

// codes[0, V) <-> the V stored codes of arg (`bytes` bytes each) from
// element `index` on, in one load / store (index a multiple of V, arg
// 16-byte aligned).
template <typename code_t, int V, bool kStreaming>
__device__ __forceinline__ void store_codes_as(void* arg, int64_t index,
                                               const int32_t (&codes)[V]) {
  using raw_t = typename RawBits<sizeof(code_t) * V>::type;
  const uint32_t walk = walk_code(sizeof(code_t));
  Pack<code_t, V> pack;
#pragma unroll
  for (int i = 0; i < V; ++i) pack.v[i] = static_cast<code_t>(encode_code(codes[i], walk));
  raw_t raw;
  memcpy(&raw, &pack, sizeof(raw));
  store_raw<kStreaming>(reinterpret_cast<raw_t*>(static_cast<code_t*>(arg) + index), raw);
}
// kStreaming: evict-first stores (store_raw), for the forward's codes.
template <int V, bool kStreaming = false>
__device__ __forceinline__ void store_codes(void* arg, int bytes, int64_t index,
                                            const int32_t (&codes)[V]) {
  if (bytes == 1) store_codes_as<uint8_t, V, kStreaming>(arg, index, codes);
  else store_codes_as<uint16_t, V, kStreaming>(arg, index, codes);
}
template <typename code_t, int V>
__device__ __forceinline__ void load_codes_as(const void* arg, int64_t index,
                                              int32_t (&codes)[V]) {
  const uint32_t walk = walk_code(sizeof(code_t));
  const Pack<code_t, V> pack = load_pack<V>(static_cast<const code_t*>(arg) + index);
#pragma unroll
  for (int i = 0; i < V; ++i) codes[i] = decode_code(pack.v[i], walk);
}
template <int V>
__device__ __forceinline__ void load_codes(const void* arg, int bytes, int64_t index,
                                           int32_t (&codes)[V]) {
  if (bytes == 1) load_codes_as<uint8_t, V>(arg, index, codes);
  else load_codes_as<uint16_t, V>(arg, index, codes);
}
__device__ __forceinline__ int32_t load_code(const void* arg, int bytes, int64_t index) {
  int32_t code[1];
  load_codes<1>(arg, bytes, index, code);
  return code[0];
}
__device__ __forceinline__ void store_code(void* arg, int bytes, int64_t index, int32_t code) {
  const int32_t codes[1] = {code};
  store_codes<1>(arg, bytes, index, codes);
}

// Pieces [first, last) of a row: the column slab one launch of the
// forward's rows kernel or hub chunks kernel takes.
struct PieceRange {
  int64_t first, last;
};

// The forward's hub workspace: the hub list and two merge words per hub
// element, both taken with atomicMax by every chunk: `words` orders like
// (rank, smaller position) (a chunk's winner word), `last_words` like
// (rank, larger position) (last_position_word). Two entries share the
// best rank exactly where their positions differ (hub_winner).
struct MinMaxHubs {
  HubList list;
  unsigned long long* words;       // [list.capacity, width], zeroed
  unsigned long long* last_words;  // [list.capacity, width], zeroed
  const int64_t* degree;  // device scalar: rows above max(*degree, 256) are hubs
  int64_t chunk;          // entries a chunk takes (at most kMinMaxHubChunk)
};

// A chunk's offer to `last_words`: rank << 32 | position << 1 of its winner
// word, the position one further where the chunk's own best is tied (a
// stand-in for its other entry at that rank; saturated at 2^31 - 1, where
// the position walks anyway).
__device__ __forceinline__ unsigned long long last_position_word(unsigned long long best) {
  using Word = WinnerWord<uint32_t>;
  uint32_t position = static_cast<uint32_t>(Word::position(best));
  if (Word::tied(best) && position < 0x7fffffffu) ++position;
  return static_cast<unsigned long long>(Word::rank(best)) << 32 | position << 1;
}

// The hub element's winner word from its two merged words, with the tie
// bit set where two entries share the best rank: the chunks' smallest and
// largest positions at that rank differ (or the winner's chunk saw a tie).
__device__ __forceinline__ unsigned long long hub_winner(unsigned long long first,
                                                         unsigned long long last) {
  using Word = WinnerWord<uint32_t>;
  const int32_t last_position = static_cast<int32_t>((last >> 1) & 0x7fffffffu);
  return first | (Word::position(first) != last_position ? 1ull : 0ull);
}

}  // namespace pygio
