// One SpMM by the native library's kernels from C++: what the SpMM autograd
// (spmm_autograd.cpp) launches, and what pyg_ioaware._native.spmm_csr calls
// where the extension is loaded (every SpMM of our kernels outside that
// autograd: inference, the Python Function) in place of ctypes.
#pragma once

#include <torch/extension.h>

namespace pygio_host {

// out = op(A) x (+ bias) on torch's current stream (contract: pygio_spmm_csr):
// A = (rowptr, col, values) with out's rows (x's where transpose), its
// columns x's rows (out's where transpose), no row longer than
// degree_bound where that is >= 0; bias undefined for none. x and out have
// inner stride 1 (checked by the caller); the workspace comes from torch's
// caching allocator.
void spmm_into(const torch::Tensor& rowptr, const torch::Tensor& col,
               const torch::Tensor& values, const torch::Tensor& x, const torch::Tensor& bias,
               const torch::Tensor& out, bool transpose, bool deterministic,
               int64_t degree_bound);

}  // namespace pygio_host
