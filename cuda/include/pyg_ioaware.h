/*
 * pyg_ioaware native library: the C ABI that Python (ctypes) calls.
 *
 * No torch, c10 or Python headers here or anywhere under cuda/. Every entry
 * point takes raw device pointers, int64 sizes, a dtype code, the device
 * index and the caller's CUDA stream; it never allocates device memory
 * (workspaces come from the caller, i.e. torch's caching allocator). Every
 * entry returns PYGIO_OK or an error code; pygio_last_error() then gives a
 * human-readable message for the calling thread. Argument validation of user
 * input (index ranges, shapes, devices) is done in Python before any call.
 */
#ifndef PYG_IOAWARE_H_
#define PYG_IOAWARE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PYGIO_ABI_VERSION 1

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

/* Element type of values and dense features. */
typedef enum {
  PYGIO_FLOAT32 = 0,
  PYGIO_FLOAT64 = 1,
  PYGIO_FLOAT16 = 2,
  PYGIO_BFLOAT16 = 3,
} pygio_dtype;

/*
 * A CSR matrix of shape [num_rows, num_cols] with nnz entries, zero-based.
 * rowptr has num_rows + 1 entries, col has nnz; both are int32 or both are
 * int64 (index_bits). values (nnz entries of `dtype`) may be NULL where the
 * entry point says so.
 */
typedef struct {
  int64_t num_rows;
  int64_t num_cols;
  int64_t nnz;
  const void* rowptr;
  const void* col;
  const void* values;
  int32_t index_bits;
  int32_t dtype;
} pygio_csr;

/* ABI version the library was built with (PYGIO_ABI_VERSION). */
PYGIO_API int pygio_abi_version(void);

/* Message of the last failed call on this thread ("" if none). */
PYGIO_API const char* pygio_last_error(void);

/*
 * Resolve cuSPARSE at run time. `path` may be NULL: the copy already loaded
 * in the process (torch's) is used, else the dynamic loader searches
 * libcusparse.so.12. Called lazily by the SpMM entries; calling it up front
 * gives an early, clear error.
 */
PYGIO_API int pygio_cusparse_load(const char* path);

/* ---------------------------------------------------------------- SpMM ---
 * Y = op(A) @ X with op(A) = A (transpose = 0: X is [num_cols, width], Y is
 * [num_rows, width]) or A^T (transpose = 1: X is [num_rows, width], Y is
 * [num_cols, width]); dense row-major and contiguous, accumulation in fp32 (fp64 for float64) via
 * cuSPARSE. A plan caches everything that depends only on A's structure,
 * the width, the dtype and the algorithm: the cuSPARSE descriptors.
 * pygio_spmm_preprocess (cuSPARSE's optional analysis of the sparsity
 * pattern) is exposed for diagnostics; the package does not call it.
 * A's values pointer may change between calls (it is set on every run); its
 * rowptr / col pointers and contents must not while the plan lives.
 * algorithm is a cusparseSpMMAlg_t value (0 = default, 4 = CSR_ALG1,
 * 6 = CSR_ALG2, 12 = CSR_ALG3). Rows with no entries give zeros. nnz == 0
 * and num_rows == 0 are rejected: callers handle empty problems themselves.
 */
typedef struct pygio_spmm_plan pygio_spmm_plan;

PYGIO_API int pygio_spmm_plan_create(const pygio_csr* a, int64_t width, int32_t algorithm,
                                     int32_t transpose, int32_t device, pygio_spmm_plan** plan);
PYGIO_API void pygio_spmm_plan_destroy(pygio_spmm_plan* plan);
PYGIO_API int pygio_spmm_workspace_size(pygio_spmm_plan* plan, const void* values,
                                        const void* x, void* y, size_t* bytes, void* stream);
PYGIO_API int pygio_spmm_preprocess(pygio_spmm_plan* plan, const void* values, const void* x,
                                    void* y, void* workspace, void* stream);
PYGIO_API int pygio_spmm_run(pygio_spmm_plan* plan, const void* values, const void* x,
                             void* y, void* workspace, void* stream);

/* --------------------------------------------------------------- SDDMM ---
 * out[e] = sum_k G[row(e), k] * X[col(e), k] for every entry e of A (CSR
 * order); the gradient of SpMM's Y = A X with respect to A's values given
 * dL/dY = G. G is [num_rows, width], X is [num_cols, width], both dense
 * row-major contiguous of a->dtype; out has a->nnz entries of a->dtype.
 * a->values is not read. Accumulates in fp32 (fp64 for float64).
 */
PYGIO_API int pygio_sddmm(const pygio_csr* a, const void* g, const void* x, int64_t width,
                          void* out, int32_t device, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* PYG_IOAWARE_H_ */
