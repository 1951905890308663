/*
 * pyg_ioaware native library: the C ABI that Python (ctypes) calls.
 *
 * No torch, c10 or Python headers here or anywhere under cuda/. Argument
 * validation of user input (index ranges, shapes, devices) is done in Python
 * before any call; the checks here only keep a wrong call from reading
 * garbage.
 *
 * Conventions (ABI version 4):
 *  - Each kernel entry takes one params struct by pointer: raw device
 *    pointers, int64 sizes, int64 row strides in elements (the leading
 *    dimension of each row-major dense matrix; its inner stride is 1), a
 *    dtype code, an index width, the device index and the caller's CUDA
 *    stream. Dense matrices may be row-strided (row stride >= width).
 *  - A params struct's first field, struct_size, must be the struct's size as
 *    the caller sees it; it must equal this library's size of the struct
 *    (pygio_struct_size), else the entry fails with
 *    PYGIO_ERR_INVALID_ARGUMENT before reading any other field, so a caller
 *    built against another version of this header gets a clear error.
 *  - index_bits is 32 or 64 (rowptr and col are both int32 or both int64);
 *    anything else is PYGIO_ERR_INVALID_ARGUMENT.
 *  - Every entry makes its device current for its own work and restores the
 *    caller's current CUDA context before returning, on success and on error.
 *  - Work is enqueued on the given stream and not waited for. No entry
 *    allocates device memory: workspaces come from the caller (torch's
 *    caching allocator), per call, so stream ordering is the caller's.
 *  - Calls on different devices never wait on each other. SpMM calls on one
 *    device share that device's cuSPARSE handle and hold its lock while
 *    binding buffers and enqueueing (not while the GPU works).
 *  - Every int-returning entry returns PYGIO_OK or an error code;
 *    pygio_last_error() then gives a message for the calling thread.
 */
#ifndef PYG_IOAWARE_H_
#define PYG_IOAWARE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PYGIO_ABI_VERSION 9

/* Exported symbols; everything else in the library is hidden. */
#if defined(PYGIO_BUILDING)
#define PYGIO_API __attribute__((visibility("default")))
#else
#define PYGIO_API
#endif

typedef enum {
  PYGIO_OK = 0,
  PYGIO_ERR_INVALID_ARGUMENT = 1,
  PYGIO_ERR_CUDA = 2,
  PYGIO_ERR_CUSPARSE = 3,
  PYGIO_ERR_CUSPARSE_UNAVAILABLE = 4,
  PYGIO_ERR_UNSUPPORTED = 5,
} pygio_status;

/* Element type of values and dense matrices. */
typedef enum {
  PYGIO_FLOAT32 = 0,
  PYGIO_FLOAT64 = 1,
  PYGIO_FLOAT16 = 2,
  PYGIO_BFLOAT16 = 3,
} pygio_dtype;

/* The structs of this header, for pygio_struct_size. */
typedef enum {
  PYGIO_STRUCT_CSR = 0,
  PYGIO_STRUCT_SPMM_PLAN_PARAMS = 1,
  PYGIO_STRUCT_SPMM_PARAMS = 2,
  PYGIO_STRUCT_SDDMM_PARAMS = 3,
  PYGIO_STRUCT_SELF_LOOPS_PARAMS = 4,
  PYGIO_STRUCT_GCN_NORM_PARAMS = 5,
  PYGIO_STRUCT_SPMM_CSR_PARAMS = 6,
  PYGIO_STRUCT_MINMAX_PARAMS = 7,
  PYGIO_STRUCT_MINMAX_BACKWARD_PARAMS = 8,
  PYGIO_STRUCT_GATV2_PARAMS = 9,
  PYGIO_STRUCT_GATV2_BACKWARD_PARAMS = 10,
  PYGIO_STRUCT_GATV2_ALPHA_PARAMS = 11,
  PYGIO_STRUCT_TRANSFORMER_PARAMS = 12,
  PYGIO_STRUCT_TRANSFORMER_BACKWARD_PARAMS = 13,
  PYGIO_STRUCT_TRANSFORMER_ALPHA_PARAMS = 14,
  PYGIO_STRUCT_EDGES = 15,
  PYGIO_STRUCT_EDGE_STATS_PARAMS = 16,
  PYGIO_STRUCT_CSR_FROM_GROUPED_PARAMS = 17,
  PYGIO_STRUCT_MEAN_NORM_PARAMS = 18,
  PYGIO_STRUCT_CSR_TRANSPOSE_PARAMS = 19,
  PYGIO_STRUCT_PYG_SELF_LOOPS_PARAMS = 20,
} pygio_struct_kind;

/*
 * The structure of a zero-based CSR matrix A of shape [num_rows, num_cols]
 * with nnz entries (its values, where an entry reads any, are passed
 * separately). Sizes are >= 0, and nnz > 0 needs num_rows > 0 and
 * num_cols > 0.
 */
typedef struct {
  const void* rowptr;  /* num_rows + 1 indices */
  const void* col;     /* nnz indices, each in [0, num_cols) */
  int64_t num_rows;
  int64_t num_cols;
  int64_t nnz;
  int32_t index_bits;  /* 32 or 64: the width of both rowptr's and col's entries */
} pygio_csr;

/* ABI version the library was built with (PYGIO_ABI_VERSION). */
PYGIO_API int pygio_abi_version(void);

/* sizeof the struct `kind` (a pygio_struct_kind) in this library; 0 for an
 * unknown kind. */
PYGIO_API size_t pygio_struct_size(int32_t kind);

/* Message of the last failed call on this thread ("" if none). */
PYGIO_API const char* pygio_last_error(void);

/*
 * Resolves cuSPARSE at run time. `path` may be NULL: the copy already loaded
 * in the process (torch's) is used, else the dynamic loader searches
 * libcusparse.so.12; a non-NULL path is tried between the two. Called lazily
 * by the SpMM entries; calling it up front gives an early, clear error.
 */
PYGIO_API int pygio_cusparse_load(const char* path);

/* ---------------------------------------------------------------- SpMM ---
 * Y = op(A) X through cuSPARSE, with op(A) = A (transpose = 0: X is
 * [num_cols, width], Y is [num_rows, width]) or A^T (transpose = 1: X is
 * [num_rows, width], Y is [num_cols, width]). X and Y are row-major with
 * inner stride 1; A's values, X and Y share one dtype; accumulation is in
 * fp32 (fp64 for float64). Rows of op(A) with no entries give zeros in Y.
 *
 * A plan caches what depends only on A's structure, the width, the dtype,
 * the direction and the algorithm (the cuSPARSE descriptors); it belongs to
 * one device. A's rowptr / col pointers and contents must stay valid and
 * unchanged while the plan lives; values, X, Y, their row strides and the
 * stream may change with every call.
 */
typedef struct pygio_spmm_plan pygio_spmm_plan;

typedef struct {
  int32_t struct_size;  /* sizeof(pygio_spmm_plan_params) */
  int32_t dtype;        /* pygio_dtype of A's values, X and Y */
  int32_t device;       /* CUDA device index of every buffer the plan will see */
  int32_t transpose;    /* 0: Y = A X; 1: Y = A^T X */
  int32_t algorithm;    /* cusparseSpMMAlg_t: 0 default, 4 CSR_ALG1, 6 CSR_ALG2,
                           12 CSR_ALG3 (no transpose) */
  pygio_csr a;          /* rowptr / col: see above */
  int64_t width;        /* columns of X and Y */
} pygio_spmm_plan_params;

/*
 * Creates a plan; *plan receives it (NULL on error). Empty problems
 * (num_rows, num_cols, nnz or width of 0) are rejected: callers handle them
 * without the library. A matrix with more entries than num_rows x num_cols
 * (only duplicate entries make that possible) gives PYGIO_ERR_UNSUPPORTED:
 * cuSPARSE refuses it. Loads cuSPARSE on first use.
 */
PYGIO_API int pygio_spmm_plan_create(const pygio_spmm_plan_params* params,
                                     pygio_spmm_plan** plan);

/* Destroys a plan; NULL is a no-op. No SpMM call on it may be running on
 * another thread. Work already enqueued with it is unaffected. */
PYGIO_API void pygio_spmm_plan_destroy(pygio_spmm_plan* plan);

/* One SpMM call (workspace size, run, preprocess) on a plan. */
typedef struct {
  int32_t struct_size;   /* sizeof(pygio_spmm_params) */
  int32_t dtype;         /* must equal the plan's */
  int32_t device;        /* must equal the plan's */
  pygio_spmm_plan* plan;
  const void* values;    /* nnz entries of A, in CSR order */
  const void* x;
  int64_t x_row_stride;  /* >= width */
  void* y;
  int64_t y_row_stride;  /* >= width */
  void* workspace;       /* run and preprocess: at least the bytes that
                            pygio_spmm_workspace_size reported for this plan
                            and these row strides; NULL where that is 0.
                            Ignored by pygio_spmm_workspace_size. */
  void* stream;          /* cudaStream_t on `device`; NULL: the legacy default stream */
} pygio_spmm_params;

/* *bytes = workspace size that pygio_spmm_run needs for this call (cuSPARSE's
 * buffer size). plan, values, x, y and bytes must not be NULL; x and y are
 * not read or written. */
PYGIO_API int pygio_spmm_workspace_size(const pygio_spmm_params* params, size_t* bytes);

/* Enqueues Y = op(A) X. plan, values, x and y must not be NULL; Y is fully
 * overwritten (rows of its row stride beyond width are not touched). */
PYGIO_API int pygio_spmm_run(const pygio_spmm_params* params);

/*
 * Diagnostic only (scripts/spmm_probe.py --preprocess): enqueues cuSPARSE's
 * optional cusparseSpMM_preprocess for this plan; same pointer rules as
 * pygio_spmm_run. The package never calls it: it corrupted memory once on an
 * H200 (docs/design.md, "No cuSPARSE preprocessing").
 */
PYGIO_API int pygio_spmm_preprocess(const pygio_spmm_params* params);

/* ------------------------------------------------------ SpMM, own kernels ---
 * Y = op(A) X + bias with kernels of this library (no cuSPARSE, no plan):
 * transpose = 0: Y[r] = sum_{e in row r} values[e] X[col[e]] (+ bias), one
 * row per group of lanes sized by the width, rows of more than the hub
 * degree split into edge chunks over all SMs and merged with fp32 (fp64)
 * atomics in the workspace; transpose = 1: Y[c] = sum_{e: col[e] = c}
 * values[e] X[row(e)], balanced edge chunks scattered with atomics (in the
 * workspace for 16-bit Y, else in Y itself). X is row-major in `dtype`
 * and Y in `y_dtype`, both with inner stride 1; values (and bias) are in
 * `values_dtype`, which is `dtype` or, for 16-bit dtypes, PYGIO_FLOAT32;
 * accumulation in fp32 (fp64 for float64); rows of op(A) with no entry
 * give bias (or 0). `y_dtype` is `dtype`, or, where values are float32,
 * the other width: float32 Y of 16-bit X (PyG's float32 edge weights times
 * 16-bit messages, under autocast) or 16-bit Y of float32 X (its gradient).
 * With `deterministic` (forward only) no row is split: every output element
 * is summed in one thread in CSR order. Where the caller knows that no row
 * of A has more than `degree_bound` entries (>= 0; -1: unknown) and that is
 * at most the hub degree, the forward splits nothing and needs no workspace.
 */
typedef struct {
  int32_t struct_size;    /* sizeof(pygio_spmm_csr_params) */
  int32_t dtype;          /* pygio_dtype of X */
  int32_t values_dtype;   /* dtype, or PYGIO_FLOAT32 where dtype is 16-bit */
  int32_t y_dtype;        /* pygio_dtype of Y: dtype; with float32 values also
                             PYGIO_FLOAT32 for 16-bit dtype, or a 16-bit type
                             for float32 dtype */
  int32_t device;
  int32_t transpose;      /* 0: Y = A X (+ bias); 1: Y = A^T X */
  int32_t deterministic;  /* 1: no atomics (transpose must be 0) */
  pygio_csr a;
  int64_t degree_bound;   /* no row of A has more entries; -1: not known */
  int64_t width;          /* columns of X and Y */
  const void* values;     /* nnz entries, CSR order */
  const void* x;
  int64_t x_row_stride;   /* >= width */
  const void* bias;       /* width entries, or NULL; must be NULL with transpose */
  void* y;
  int64_t y_row_stride;   /* >= width */
  void* workspace;        /* pygio_spmm_csr_workspace_size bytes, 16-byte aligned;
                             NULL where that is 0 */
  void* stream;           /* cudaStream_t on `device`; NULL: the legacy default stream */
} pygio_spmm_csr_params;

/* *bytes = workspace pygio_spmm_csr needs; depends on the sizes, width,
 * dtype, transpose and deterministic only (no pointer is read). */
PYGIO_API int pygio_spmm_csr_workspace_size(const pygio_spmm_csr_params* params,
                                            size_t* bytes);

/* Enqueues Y = op(A) X (+ bias). Sizes of 0 are allowed (Y gets bias or
 * zeros; nothing is read). Y is fully overwritten. */
PYGIO_API int pygio_spmm_csr(const pygio_spmm_csr_params* params);

/* ------------------------------------------------- neighbour min / max ---
 * out[r, f] = min (reduce = 0) or max (reduce = 1) over the entries e of
 * row r of x[col[e], f]: rows of A are destinations, col holds sources, x
 * has a.num_cols rows. Values are ordered by a 32-bit rank of their fp32
 * widening: -0.0 and +0.0 are equal, NaN wins over every number (min and
 * max propagate NaN). out takes the winner's value (0 for a row with no
 * entries) in dtype; a zero result is +0.0 and a NaN result the canonical
 * NaN.
 *
 * arg (optional) records, per element, how the backward distributes
 * dL/dout[r, f] (PyG's rule, torch.scatter_reduce's with include_self =
 * false on a zero-filled output: an even split among the sources equal to
 * the result, counting the zero fill as one more where the result is 0;
 * NaN to every source of a NaN result), as one unsigned code of arg_bytes
 * (1 or 2) bytes, W = 2^(8 arg_bytes) - 2:
 *   code < W    the whole gradient goes to the source of entry
 *               rowptr[r] + code (the row's one entry equal to the result);
 *   code == W   walk the row in backward: a tie, a zero, NaN or
 *               worst-infinity result (+inf for min, -inf for max), or a
 *               winner beyond the W-th entry of its row (the walk finds it
 *               again: always right, only slower);
 *   code == W+1 the row has no entries.
 * One byte suits rows of at most W = 254 entries, two bytes W = 65534.
 * Sources are int32: a.num_cols must be below 2^31.
 *
 * Rows of more than max(*hub_degree, PYGIO_MINMAX_MIN_HUB_DEGREE) entries
 * (at most max_hubs of them; any more are done whole) are split into
 * chunks over all SMs and merged with two 64-bit atomicMax per element,
 * on (rank, ~position in the row, tie bit) and on (rank, position): a tie
 * between chunks is where the two positions differ. The result does not
 * depend on the order.
 */
#define PYGIO_MINMAX_MIN_HUB_DEGREE 256

typedef struct {
  int32_t struct_size;     /* sizeof(pygio_minmax_params) */
  int32_t dtype;           /* pygio_dtype of x and out */
  int32_t device;
  int32_t reduce;          /* 0: min, 1: max */
  pygio_csr a;
  int64_t width;
  const void* x;
  int64_t x_row_stride;    /* >= width */
  const int64_t* hub_degree;  /* device scalar, or NULL: no row is split */
  int64_t max_hubs;        /* hub slots of the workspace (0 with hub_degree NULL) */
  void* out;
  int64_t out_row_stride;  /* >= width */
  void* arg;               /* [num_rows, width] codes, contiguous, 16-byte aligned, or NULL */
  int32_t arg_bytes;       /* bytes of one arg code: 1 or 2 (ignored where arg is NULL) */
  void* workspace;         /* pygio_minmax_workspace_size bytes, 16-byte aligned */
  void* stream;
} pygio_minmax_params;

/* *bytes = the workspace pygio_minmax needs (sizes only are read). */
PYGIO_API int pygio_minmax_workspace_size(const pygio_minmax_params* params, size_t* bytes);

PYGIO_API int pygio_minmax(const pygio_minmax_params* params);

/*
 * grad_x = d out / d x applied to grad_out for the forward above (its out
 * and arg), by arg's rule. By default a warp per row scatters grad_out
 * through arg with atomics and walks the row for the elements arg marks;
 * rows above the hub degree (hub_degree, max_hubs as in the forward) walk
 * in chunks over all SMs. grad_x (num_cols rows) is fully overwritten. An
 * arg code beyond its row's entries is ignored (arg must be the forward's).
 *
 * Gathered (deterministic = 1; a_t: rows = sources, col = destinations,
 * the transpose of a): a warp per source sums what each of its CSR^T
 * entries takes and stores its grad_x row, in a fixed order and without
 * atomics; sources of more than PYGIO_MINMAX_BUCKET_SOURCE_CHUNK entries in
 * chunks over all SMs, whose sums are then added in chunk order. With
 * perm_t given an entry takes an element where arg's code is its position
 * in the row (perm_t[e] - rowptr[col_t[e]]), else where its value equals
 * the result; elements that walk give each taker its share. Workspace: 4
 * bytes (8 for float64) an element of out (the walking elements' shares)
 * and, with long sources, a row of that per chunk.
 *
 * Buckets (deterministic = 0 with perm_t given: a_t and perm_t, CSR^T
 * position -> CSR position; dtype float32, float16 or bfloat16, width at
 * most PYGIO_MINMAX_BUCKET_MAX_WIDTH): a row of at most
 * PYGIO_MINMAX_BUCKET_MAX_DEGREE entries writes its plain winners' gradients
 * grouped by entry into the workspace instead of adding them with atomics,
 * and a warp per source (CSR^T row) then sums the groups of its entries in
 * shared memory and stores its grad_x row (sources of more than
 * PYGIO_MINMAX_BUCKET_SOURCE_CHUNK entries in chunks over all SMs, added
 * with atomics); longer rows and the elements that walk take the atomics
 * after that. No scattered read-modify-write an element where grad_x is far
 * larger than L2 and no zeroing of grad_x, for a workspace of 6 (fp32) or
 * 4 (16-bit) bytes an element of out, 4 an entry and 8 a row.
 */
#define PYGIO_MINMAX_BUCKET_MAX_WIDTH 512
#define PYGIO_MINMAX_BUCKET_MAX_DEGREE 256
#define PYGIO_MINMAX_BUCKET_SOURCE_CHUNK 256

typedef struct {
  int32_t struct_size;     /* sizeof(pygio_minmax_backward_params) */
  int32_t dtype;
  int32_t device;
  int32_t reduce;
  int32_t deterministic;
  pygio_csr a;
  pygio_csr a_t;           /* gathered or buckets only (else ignored) */
  int64_t width;
  const int64_t* hub_degree;  /* as in pygio_minmax_params (ignored when gathered) */
  int64_t max_hubs;
  const void* x;
  int64_t x_row_stride;
  const void* out;
  int64_t out_row_stride;
  const void* arg;         /* [num_rows, width] codes, contiguous, 16-byte aligned */
  int32_t arg_bytes;       /* 1 or 2, as in the forward */
  const void* grad_out;
  int64_t grad_out_row_stride;
  void* grad_x;
  int64_t grad_x_row_stride;
  void* workspace;         /* pygio_minmax_backward_workspace_size bytes, 16-byte aligned */
  void* stream;
  const void* perm_t;      /* [nnz] CSR^T position -> CSR position (a_t's index type), or
                              NULL; deterministic: entries by position, else buckets
                              (above) */
} pygio_minmax_backward_params;

/* *bytes = the workspace pygio_minmax_backward needs (sizes, dtype, deterministic
 * and whether perm_t is NULL are read). */
PYGIO_API int pygio_minmax_backward_workspace_size(const pygio_minmax_backward_params* params,
                                                   size_t* bytes);

PYGIO_API int pygio_minmax_backward(const pygio_minmax_backward_params* params);

/* --------------------------------------------------------------- SDDMM ---
 * out[e] = sum_k G[row(e), k] * X[col(e), k] for every entry e of A, in CSR
 * order: the gradient of SpMM's Y = A X with respect to A's values given
 * dL/dY = G. G is [num_rows, width], X is [num_cols, width], both row-major
 * with inner stride 1 and the given row strides; out has nnz entries
 * (contiguous). All of dtype; accumulation in fp32 (fp64 for float64).
 */
typedef struct {
  int32_t struct_size;   /* sizeof(pygio_sddmm_params) */
  int32_t dtype;         /* pygio_dtype of G, X and out */
  int32_t device;        /* CUDA device index of every buffer */
  pygio_csr a;
  int64_t width;
  const void* g;
  int64_t g_row_stride;  /* >= width */
  const void* x;
  int64_t x_row_stride;  /* >= width */
  void* out;
  void* stream;          /* cudaStream_t on `device`; NULL: the legacy default stream */
} pygio_sddmm_params;

/*
 * Enqueues the SDDMM. nnz == 0: nothing to do, returns PYGIO_OK without
 * touching the device, every pointer may be NULL. width == 0: out is filled
 * with zeros, g and x may be NULL. Otherwise no pointer may be NULL.
 */
PYGIO_API int pygio_sddmm(const pygio_sddmm_params* params);

/* ------------------------------------------------ graph from edges ---
 * A CSR graph by destination from an edge list: a new mini-batch graph
 * grouped by destination costs one launch (pygio_edge_index_stats with its
 * CSR outputs; or the statistics started early and pygio_csr_from_grouped
 * after them), in place of about a dozen small ones. The edge list: src[e]
 * and dst[e] (source and destination of edge e) at src + e * src_stride and
 * dst + e * dst_stride, in index_bits.
 */
typedef struct {
  const void* src;
  const void* dst;
  int64_t src_stride;      /* elements between consecutive src entries */
  int64_t dst_stride;
  int64_t num_edges;
  int32_t index_bits;      /* 32 or 64, of src and dst */
} pygio_edges;

/*
 * Reads every edge once (enqueued, not waited for) in
 * PYGIO_EDGE_STATS_ROWS(items) blocks, each writing the statistics of its
 * share of the edges to its row of `stats` ([PYGIO_EDGE_STATS_ROWS(items),
 * PYGIO_EDGE_STATS] int64; items: PYGIO_EDGE_STATS_ITEMS, the edges, or with
 * the CSR outputs below max(edges.num_edges, num_rows + 1)): {min src, min dst, ~(max src), ~(max dst),
 * order, ~(longest run), self loops}, the maxima bitwise-negated (so that
 * every value but the last reduces by min); order is 0 exactly where some
 * dst is below its predecessor's (the edges are not grouped by destination,
 * as neighbour samplers emit them); the longest run is the most consecutive
 * edges into one dst (the largest in-degree where the edges are grouped;
 * meaningless where they are not); self loops counts the edges with
 * src == dst. A block without edges writes 0x7f7f7f7f7f7f7f7f to the first
 * six and 0 to the last. The statistics of all edges: the minimum of each of
 * the first six over the rows, the sum of the last. `stats` is device memory
 * or pinned host memory, which the kernel writes directly: the caller reads
 * the rows after waiting for the stream (its one host synchronisation), with
 * no copy and no memset enqueued. edges.num_edges must be > 0.
 *
 * With out_rowptr set, the same pass also writes the CSR by destination that
 * pygio_csr_from_grouped writes (num_rows, out_index_bits, out_rowptr, and
 * out_col and out_row where both are set), computed as if the edges were
 * grouped by destination with every dst in [0, num_rows): meaningful only
 * where the statistics then say so, and never an access out of bounds
 * whatever the edges hold. A new graph's build thus costs one launch.
 */
#define PYGIO_EDGE_STATS 7
#define PYGIO_EDGE_STATS_BLOCKS 1024
#define PYGIO_EDGE_STATS_ITEMS_PER_BLOCK 256
#define PYGIO_EDGE_STATS_ITEMS(num_edges, num_rows, with_csr)                  \
  ((with_csr) && (int64_t)(num_rows) + 1 > (int64_t)(num_edges) ? (int64_t)(num_rows) + 1 \
                                                                 : (int64_t)(num_edges))
#define PYGIO_EDGE_STATS_ROWS(items)                                            \
  ((items) >= (int64_t)PYGIO_EDGE_STATS_BLOCKS * PYGIO_EDGE_STATS_ITEMS_PER_BLOCK \
       ? (int64_t)PYGIO_EDGE_STATS_BLOCKS                                        \
       : ((items) + PYGIO_EDGE_STATS_ITEMS_PER_BLOCK - 1) / PYGIO_EDGE_STATS_ITEMS_PER_BLOCK)

typedef struct {
  int32_t struct_size;     /* sizeof(pygio_edge_stats_params) */
  int32_t device;
  pygio_edges edges;
  int64_t* stats;          /* [PYGIO_EDGE_STATS_ROWS(items), PYGIO_EDGE_STATS] */
  int64_t num_rows;        /* the CSR's rows, where out_rowptr is set */
  int32_t out_index_bits;  /* 32 or 64, where out_rowptr is set */
  void* out_rowptr;        /* optional (NULL: statistics only) */
  void* out_col;           /* optional, with out_row */
  void* out_row;
  void* stream;
} pygio_edge_stats_params;

PYGIO_API int pygio_edge_index_stats(const pygio_edge_stats_params* params);

/*
 * For edges grouped by destination (dst non-decreasing) with every dst in
 * [0, num_rows), as pygio_edge_index_stats established (which writes the
 * same where asked, in the same pass): out_col[e] = src[e],
 * out_row[e] = dst[e] (num_edges entries each) and out_rowptr[r] = the first
 * e with dst[e] >= r, or num_edges where there is none (num_rows + 1
 * entries), all in out_index_bits.
 */
typedef struct {
  int32_t struct_size;     /* sizeof(pygio_csr_from_grouped_params) */
  int32_t device;
  pygio_edges edges;
  int64_t num_rows;
  int32_t out_index_bits;  /* 32 or 64 */
  void* out_rowptr;
  void* out_col;
  void* out_row;
  void* stream;
} pygio_csr_from_grouped_params;

PYGIO_API int pygio_csr_from_grouped(const pygio_csr_from_grouped_params* params);

/*
 * PyG's remove_self_loops + add_self_loops (GATConv-like layers) for edges
 * grouped by destination (dst non-decreasing), every index in range, as
 * pygio_edge_index_stats established: the input's self loops are dropped
 * and one loop (r, r) is added for every r < num_loops. out_edges [2,
 * num_kept + num_loops] (contiguous, edges.index_bits): the kept edges in
 * input order, then the loops, as PyG orders them; out_kept [num_kept]: the
 * input id of each kept edge; and the CSR by destination of that edge list
 * in out_index_bits: row r holds its kept edges in input order, then its
 * loop: out_rowptr [num_rows + 1], out_col / out_row (source / destination)
 * and out_perm (position in out_edges) [num_kept + num_loops] per entry.
 * num_kept must be edges.num_edges less the self loops that
 * pygio_edge_index_stats counted. workspace:
 * pygio_csr_pyg_self_loops_workspace_size bytes, 16-byte aligned.
 */
typedef struct {
  int32_t struct_size;     /* sizeof(pygio_pyg_self_loops_params) */
  int32_t device;
  pygio_edges edges;
  int64_t num_rows;        /* destinations */
  int64_t num_loops;       /* loops added, at most num_rows */
  int64_t num_kept;
  int32_t out_index_bits;  /* 32 or 64 */
  void* out_edges;
  int64_t* out_kept;
  void* out_rowptr;
  void* out_col;
  void* out_row;
  void* out_perm;
  void* workspace;
  void* stream;
} pygio_pyg_self_loops_params;

PYGIO_API int pygio_csr_pyg_self_loops_workspace_size(const pygio_pyg_self_loops_params* params,
                                                      size_t* bytes);
PYGIO_API int pygio_csr_pyg_self_loops(const pygio_pyg_self_loops_params* params);

/* ------------------------------------------------------ graph structure ---
 * PyG's remaining self loops, without a sort, on a square CSR graph of
 * num_nodes rows (rowptr, col, and row = the row of every entry; index_bits
 * for all of them and for the outputs). Row r of the output holds its loop
 * first (at rowptr[r] + r), then row r's input entries in order. Input self
 * loops stay as entries whose out_origin is -2 (DROPPED_LOOP: weight 0);
 * every other entry's out_origin is its input edge id (edge_perm[e], or e
 * where edge_perm is NULL), and a loop's is the largest input edge id among
 * the row's input loops, or -1 (NEW_LOOP) where it has none. out_rowptr has
 * num_nodes + 1 entries; out_col, out_row and out_origin (int64) have
 * nnz + num_nodes. Where nnz + num_nodes == 0 only out_rowptr is written.
 * out_gcn_values, where not NULL, gets GCN's normalized values of the output
 * graph with every entry weighing 1 (float32, nnz + num_nodes): entry (r, c)
 * deg(c)^-1/2 deg(r)^-1/2 with deg(v) = rowptr[v+1] - rowptr[v] + 1 (v's
 * entries plus its loop), what pygio_gcn_norm gives the output without
 * weights. Only where the input holds no self loop (a dropped loop would
 * weigh 0); the caller knows that, the kernels do not check it. With
 * out_gcn_values the whole output is written in one launch, and an input
 * loop, were there one against that rule, would leave its row's loop
 * out_origin -1.
 */
typedef struct {
  int32_t struct_size;     /* sizeof(pygio_self_loops_params) */
  int32_t index_bits;      /* 32 or 64 */
  int32_t device;
  int64_t num_nodes;
  int64_t nnz;
  const void* rowptr;
  const void* col;
  const void* row;
  const void* edge_perm;   /* CSR position -> input edge id, or NULL (identity) */
  void* out_rowptr;
  void* out_col;
  void* out_row;
  int64_t* out_origin;
  float* out_gcn_values;   /* or NULL (see above) */
  void* stream;
} pygio_self_loops_params;

PYGIO_API int pygio_csr_add_self_loops(const pygio_self_loops_params* params);

/*
 * GCN's symmetric normalization on a square CSR graph A (a.num_rows ==
 * a.num_cols), in the accumulator type of `dtype` (float; double for
 * float64): deg(r) = sum of the weights of row r's entries,
 * deg_inv_sqrt[r] = deg(r)^-1/2 (0 where deg(r) = 0) and
 * values[e] = deg_inv_sqrt[col(e)] * w_e * deg_inv_sqrt[row(e)], stored in
 * `dtype`. w is `weight` (nnz accumulator-type values) or, where NULL, 1 for
 * every entry except those whose `origin` (NULL or nnz int64 codes as
 * written by pygio_csr_add_self_loops) is -2, which weigh 0. row holds the
 * row of every entry. deg_inv_sqrt (num_rows accumulator-type values) is
 * written as scratch where weights or origin are given (without either,
 * deg(r) is the length of row r: one launch).
 */
typedef struct {
  int32_t struct_size;     /* sizeof(pygio_gcn_norm_params) */
  int32_t dtype;           /* pygio_dtype of values */
  int32_t device;
  pygio_csr a;
  const void* row;
  const void* weight;
  const int64_t* origin;
  void* deg_inv_sqrt;
  void* values;
  void* stream;
} pygio_gcn_norm_params;

PYGIO_API int pygio_gcn_norm(const pygio_gcn_norm_params* params);

/*
 * Mean aggregation's edge values on a CSR graph A: values[e] = w_e /
 * max(1, number of entries of row(e)), computed in the accumulator type of
 * `dtype` and stored in `dtype`; w as in pygio_gcn_norm (weight, or 1 except
 * origin's -2 entries). row holds the row of every entry.
 */
typedef struct {
  int32_t struct_size;     /* sizeof(pygio_mean_norm_params) */
  int32_t dtype;           /* pygio_dtype of values */
  int32_t device;
  pygio_csr a;
  const void* row;
  const void* weight;
  const int64_t* origin;
  void* values;
  void* stream;
} pygio_mean_norm_params;

PYGIO_API int pygio_mean_norm(const pygio_mean_norm_params* params);

/*
 * The CSR^T of a CSR matrix A (a.num_cols columns): A's entries ordered by
 * column, and within a column by their position in A (a stable sort by
 * column, so the result is deterministic). out_row [nnz]: the column of
 * every CSR^T entry (non-decreasing); out_perm [nnz]: its position in A;
 * out_col [nnz]: its row of A (row[out_perm[i]]); out_rowptr [num_cols + 1]:
 * the first CSR^T position of each column, nnz where there is none. `row`
 * holds the row of every entry of A. Every index in a.index_bits.
 * workspace: pygio_csr_transpose_workspace_size bytes, 16-byte aligned
 * (scratch of the sort; NULL allowed where that size is 0).
 */
typedef struct {
  int32_t struct_size;     /* sizeof(pygio_csr_transpose_params) */
  int32_t device;
  pygio_csr a;
  const void* row;
  void* out_rowptr;
  void* out_col;
  void* out_row;
  void* out_perm;
  void* workspace;
  void* stream;
} pygio_csr_transpose_params;

PYGIO_API int pygio_csr_transpose_workspace_size(const pygio_csr_transpose_params* params,
                                                 size_t* bytes);
PYGIO_API int pygio_csr_transpose(const pygio_csr_transpose_params* params);

/* ---------------------------------------------------- GATv2 attention ---
 * For every destination i (row of a), head h and entry e = (i, j) of row i:
 *   z[e,h,c]  = x_l[j,h,c] + x_r[i,h,c] (+ edge[e,h,c])
 *   s[e,h]    = sum_c att[h,c] * leaky_relu(z[e,h,c], negative_slope)
 *   lse[i,h]  = log sum_{e in row i} exp(s[e,h])      (-inf for an empty row)
 *   alpha[e,h] = exp(s[e,h] - lse[i,h])
 *   out[i,h,:] = sum_{e in row i} keep(e,h) / (1 - p) * alpha[e,h] * x_l[j,h,:]
 *                (+ out_bias[h,:])
 * keep(e,h) = pygio::dropout_keep(seed, e, h, p) (common/dropout.cuh; e the
 * CSR position), every entry kept where dropout_p = 0. An empty row gives
 * out = 0 (+ out_bias). Nothing per entry is written: one pass over each
 * row with an online softmax, fp32 statistics and accumulators.
 *
 * x_l [num_cols, heads, channels] and x_r [num_rows, heads, channels]: head
 * stride = channels, inner stride 1, node row stride >= heads * channels
 * (views of a fused projection are fine). edge: [nnz, heads, channels]
 * contiguous in CSR order, or NULL. att: [heads, channels] fp32
 * contiguous. out: [num_rows, heads, channels] contiguous; lse: [num_rows,
 * heads] fp32 contiguous. x_l, x_r, edge and out share dtype (fp32, fp16
 * or bf16).
 *
 * Rows of more than max(*hub_degree, PYGIO_ATTENTION_MIN_HUB_DEGREE)
 * entries (at most max_hubs of them) are split into chunks over all SMs
 * and their partial softmax states merged.
 */
#define PYGIO_ATTENTION_MIN_HUB_DEGREE 256

typedef struct {
  int32_t struct_size;     /* sizeof(pygio_gatv2_params) */
  int32_t dtype;           /* pygio_dtype of x_l, x_r, edge, out */
  int32_t device;
  pygio_csr a;             /* rows = destinations, col = sources */
  int64_t heads;
  int64_t channels;
  const void* x_l;
  int64_t x_l_row_stride;
  const void* x_r;
  int64_t x_r_row_stride;
  const void* edge;        /* or NULL */
  const float* att;
  float negative_slope;
  float dropout_p;         /* in [0, 1) */
  uint64_t seed;
  const int64_t* hub_degree;  /* device scalar, or NULL: no row is split */
  int64_t max_hubs;        /* hub slots of the workspace (0 with hub_degree NULL) */
  const float* out_bias;   /* [heads, channels] fp32 added to every row of out, or NULL */
  void* out;
  float* lse;
  void* workspace;         /* pygio_gatv2_workspace_size bytes, 16-byte aligned */
  void* stream;
} pygio_gatv2_params;

/* *bytes = the workspace pygio_gatv2 needs (sizes only are read). */
PYGIO_API int pygio_gatv2_workspace_size(const pygio_gatv2_params* params, size_t* bytes);

PYGIO_API int pygio_gatv2(const pygio_gatv2_params* params);

/*
 * Gradients of pygio_gatv2 given grad_out = dL/d out (lse the forward's,
 * every other input as there; the forward's out is not needed):
 *   G[i,h]      = <grad_out[i,h,:], out[i,h,:]>
 *   dalpha[e,h] = keep(e,h) / (1 - p) * <grad_out[i,h,:], x_l[j,h,:]>
 *   ds[e,h]     = alpha[e,h] * (dalpha[e,h] - G[i,h])
 *   dz[e,h,c]   = ds[e,h] * att[h,c] * leaky_relu'(z[e,h,c])
 *   grad_x_r[i,h,:] = sum_{e in row i} dz[e,h,:]
 *   grad_edge[e,h,:] = dz[e,h,:]
 *   grad_att[h,c]   = sum_e ds[e,h] * leaky_relu(z[e,h,c])
 *   grad_x_l[j,h,:] = sum_{e = (i, j)} keep(e,h) / (1 - p) * alpha[e,h] * grad_out[i,h,:]
 *                                      + dz[e,h,:]
 * The destination-side terms come from a pass over a, the source-side ones
 * from a pass over a_t (the CSR^T: rows = sources, col = destinations) whose
 * perm_t maps each CSR^T position to its CSR position (for edge, grad_edge
 * and the dropout counter); scores are recomputed from lse, nothing per
 * entry is stored between the passes. G is summed in fp32 from the
 * entries (sum_e alpha f <grad_out, x_l[j]>, equal to <grad_out, out> but
 * free of out's rounding), so out need not be kept. Rows of a above
 * *hub_degree and rows of a_t above *hub_degree_t (each at least
 * PYGIO_ATTENTION_MIN_HUB_DEGREE, at most max_hubs / max_hubs_t) are split
 * over all SMs. Every output is fully overwritten. grad_out (and
 * grad_edge): contiguous, in dtype; grad_x_l and grad_x_r in dtype, laid
 * out as x_l and x_r may be (any node row stride >= heads * channels: the
 * slots of one fused projection's gradient are written in place); lse,
 * att, grad_att: fp32.
 */
typedef struct {
  int32_t struct_size;     /* sizeof(pygio_gatv2_backward_params) */
  int32_t dtype;
  int32_t device;
  pygio_csr a;
  pygio_csr a_t;
  const void* perm_t;      /* [nnz], index width of a */
  int64_t heads;
  int64_t channels;
  const void* x_l;
  int64_t x_l_row_stride;
  const void* x_r;
  int64_t x_r_row_stride;
  const void* edge;        /* or NULL */
  const float* att;
  float negative_slope;
  float dropout_p;
  uint64_t seed;
  const int64_t* hub_degree;    /* rows of a, as in pygio_gatv2_params */
  int64_t max_hubs;
  const int64_t* hub_degree_t;  /* rows of a_t */
  int64_t max_hubs_t;
  const float* lse;
  const void* grad_out;
  void* grad_x_l;          /* [num_cols, heads, channels] */
  int64_t grad_x_l_row_stride;
  void* grad_x_r;          /* [num_rows, heads, channels] */
  int64_t grad_x_r_row_stride;
  float* grad_att;         /* [heads, channels] */
  void* grad_edge;         /* [nnz, heads, channels]; required iff edge */
  void* workspace;         /* pygio_gatv2_backward_workspace_size bytes, 16-byte aligned */
  void* stream;
} pygio_gatv2_backward_params;

PYGIO_API int pygio_gatv2_backward_workspace_size(const pygio_gatv2_backward_params* params,
                                                  size_t* bytes);

PYGIO_API int pygio_gatv2_backward(const pygio_gatv2_backward_params* params);

/*
 * alpha[e,h] = exp(s[e,h] - lse[i,h]) for every entry, in CSR order (before
 * dropout), from the forward's lse: what return_attention_weights asks for.
 */
typedef struct {
  int32_t struct_size;     /* sizeof(pygio_gatv2_alpha_params) */
  int32_t dtype;
  int32_t device;
  pygio_csr a;
  int64_t heads;
  int64_t channels;
  const void* x_l;
  int64_t x_l_row_stride;
  const void* x_r;
  int64_t x_r_row_stride;
  const void* edge;        /* or NULL */
  const float* att;
  float negative_slope;
  const float* lse;
  float* alpha;            /* [nnz, heads] fp32 contiguous */
  void* stream;
} pygio_gatv2_alpha_params;

PYGIO_API int pygio_gatv2_alpha(const pygio_gatv2_alpha_params* params);

/*
 * Graph-transformer attention (TransformerConv's) over a, rows =
 * destinations i, col = sources j; for each entry e = (j -> i) and head h:
 *   s[e,h]     = scale * <q[i,h,:], k[j,h,:] (+ edge[e,h,:])>
 *   lse[i,h]   = log sum_{e into i} exp(s[e,h])          (-inf for an empty row)
 *   out[i,h,:] = sum_{e=(j->i)} keep(e,h) / (1 - p) * exp(s[e,h] - lse[i,h])
 *                              * (v[j,h,:] (+ edge[e,h,:]))
 * keep and the hub split as in pygio_gatv2 (rows above max(*hub_degree,
 * PYGIO_ATTENTION_MIN_HUB_DEGREE) entries, at most max_hubs of them, are
 * split into chunks over all SMs and their softmax states merged); one
 * pass over each row with an online softmax, nothing per entry written.
 *
 * q [num_rows, heads, channels], k and v [num_cols, heads, channels]: head
 * stride = channels, inner stride 1, any node row stride >= heads *
 * channels (column views of one fused projection are read in place).
 * edge: [nnz, heads, channels] contiguous in CSR order, or NULL. out:
 * [num_rows, heads, channels] contiguous; lse: [num_rows, heads] fp32
 * contiguous. q, k, v, edge and out share dtype (fp32, fp16 or bf16).
 */
typedef struct {
  int32_t struct_size;     /* sizeof(pygio_transformer_params) */
  int32_t dtype;           /* pygio_dtype of q, k, v, edge, out */
  int32_t device;
  pygio_csr a;             /* rows = destinations, col = sources */
  int64_t heads;
  int64_t channels;
  const void* q;
  int64_t q_row_stride;
  const void* k;
  int64_t k_row_stride;
  const void* v;
  int64_t v_row_stride;
  const void* edge;        /* or NULL */
  float scale;             /* finite; TransformerConv: 1 / sqrt(channels) */
  float dropout_p;         /* in [0, 1) */
  uint64_t seed;
  const int64_t* hub_degree;  /* device scalar, or NULL: no row is split */
  int64_t max_hubs;        /* hub slots of the workspace (0 with hub_degree NULL) */
  void* out;
  float* lse;
  void* workspace;         /* pygio_transformer_workspace_size bytes, 16-byte aligned */
  void* stream;
} pygio_transformer_params;

/* *bytes = the workspace pygio_transformer needs (sizes only are read). */
PYGIO_API int pygio_transformer_workspace_size(const pygio_transformer_params* params,
                                               size_t* bytes);

PYGIO_API int pygio_transformer(const pygio_transformer_params* params);

/*
 * Gradients of pygio_transformer given grad_out (out and lse the
 * forward's, every other input as there), with f = keep(e,h) / (1 - p) and
 * alpha = exp(s - lse):
 *   Delta[i,h]     = <grad_out[i,h,:], out[i,h,:]>
 *   ds[e,h]        = alpha * (f * <grad_out[i,h,:], v[j,h,:] (+ edge[e,h,:])> - Delta[i,h])
 *   grad_q[i,h,:]  = scale * sum_{e in row i} ds[e,h] * (k[j,h,:] (+ edge[e,h,:]))
 *   grad_k[j,h,:]  = scale * sum_{e = (j -> i)} ds[e,h] * q[i,h,:]
 *   grad_v[j,h,:]  = sum_{e = (j -> i)} f * alpha * grad_out[i,h,:]
 *   grad_edge[e,h,:] = scale * ds[e,h] * q[i,h,:] + f * alpha * grad_out[i,h,:]
 * grad_q comes from a pass over a (Delta into the workspace), grad_k,
 * grad_v and grad_edge from a pass over a_t (the CSR^T: rows = sources,
 * col = destinations) whose perm_t maps each CSR^T position to its CSR
 * position; scores are recomputed from lse. Rows of a above *hub_degree
 * and rows of a_t above *hub_degree_t (each at least
 * PYGIO_ATTENTION_MIN_HUB_DEGREE, at most max_hubs / max_hubs_t of them)
 * are split over all SMs. Every output is fully overwritten. out, grad_out
 * (and grad_edge): contiguous, in dtype; grad_q, grad_k and grad_v in
 * dtype, laid out as q, k and v may be (any node row stride >= heads *
 * channels: the slots of one fused projection's gradient are written in
 * place); lse: fp32.
 */
typedef struct {
  int32_t struct_size;     /* sizeof(pygio_transformer_backward_params) */
  int32_t dtype;
  int32_t device;
  pygio_csr a;
  pygio_csr a_t;
  const void* perm_t;      /* [nnz], index width of a */
  int64_t heads;
  int64_t channels;
  const void* q;
  int64_t q_row_stride;
  const void* k;
  int64_t k_row_stride;
  const void* v;
  int64_t v_row_stride;
  const void* edge;        /* or NULL */
  float scale;
  float dropout_p;
  uint64_t seed;
  const int64_t* hub_degree;    /* rows of a, as in pygio_transformer_params */
  int64_t max_hubs;
  const int64_t* hub_degree_t;  /* rows of a_t */
  int64_t max_hubs_t;
  const void* out;
  const float* lse;
  const void* grad_out;
  void* grad_q;            /* [num_rows, heads, channels] */
  int64_t grad_q_row_stride;
  void* grad_k;            /* [num_cols, heads, channels] */
  int64_t grad_k_row_stride;
  void* grad_v;            /* [num_cols, heads, channels] */
  int64_t grad_v_row_stride;
  void* grad_edge;         /* [nnz, heads, channels]; required iff edge */
  void* workspace;         /* pygio_transformer_backward_workspace_size bytes, 16-byte aligned */
  void* stream;
} pygio_transformer_backward_params;

PYGIO_API int pygio_transformer_backward_workspace_size(
    const pygio_transformer_backward_params* params, size_t* bytes);

PYGIO_API int pygio_transformer_backward(const pygio_transformer_backward_params* params);

/*
 * alpha[e,h] = exp(s[e,h] - lse[i,h]) of pygio_transformer for every entry,
 * in CSR order (before dropout), from the forward's lse.
 */
typedef struct {
  int32_t struct_size;     /* sizeof(pygio_transformer_alpha_params) */
  int32_t dtype;
  int32_t device;
  pygio_csr a;
  int64_t heads;
  int64_t channels;
  const void* q;
  int64_t q_row_stride;
  const void* k;
  int64_t k_row_stride;
  const void* edge;        /* or NULL */
  float scale;
  const float* lse;
  float* alpha;            /* [nnz, heads] fp32 contiguous */
  void* stream;
} pygio_transformer_alpha_params;

PYGIO_API int pygio_transformer_alpha(const pygio_transformer_alpha_params* params);

#ifdef __cplusplus
}
#endif

#endif /* PYG_IOAWARE_H_ */
