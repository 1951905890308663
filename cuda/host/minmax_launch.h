// The min / max aggregation's launches from C++: what pyg_ioaware._native's
// minmax and minmax_backward call where the extension is loaded, in place
// of ctypes (each ctypes call built a params struct field by field: tens of
// microseconds of a small mini-batch step's host time).
#pragma once

#include <torch/extension.h>

namespace pygio_host {

// pygio_minmax: out (and arg where defined) = the neighbour min / max
// (reduce 0 / 1) of x over the CSR (rowptr, col); hub_degree an int64
// device scalar or undefined (no split), max_hubs its slots. Inner strides
// are checked by the caller; the workspace comes from torch's allocator.
void minmax(const torch::Tensor& rowptr, const torch::Tensor& col, const torch::Tensor& x,
            int64_t reduce, const torch::Tensor& hub_degree, int64_t max_hubs,
            const torch::Tensor& out, const torch::Tensor& arg);

// How the min / max backward adds each element's gradient to its sources
// (pyg_ioaware.h; the order of pyg_ioaware._native.MINMAX_BACKWARD_PATHS):
// with atomics; bucketed, then gathered per source over the CSR^T (with
// its perm_t); gathered per source over the CSR^T in a fixed order.
enum MinMaxBackwardPath : int64_t { kAtomics = 0, kBuckets = 1, kDeterministic = 2 };

// pygio_minmax_backward: grad_x of that forward (its out and arg) by `path`,
// over the CSR^T (rowptr_t, col_t, and perm_t: CSR^T position -> CSR
// position) where the path reads it.
void minmax_backward(const torch::Tensor& rowptr, const torch::Tensor& col,
                     const torch::Tensor& rowptr_t, const torch::Tensor& col_t,
                     const torch::Tensor& perm_t,
                     const torch::Tensor& x, const torch::Tensor& out, const torch::Tensor& arg,
                     const torch::Tensor& grad_out, int64_t reduce,
                     const torch::Tensor& hub_degree, int64_t max_hubs,
                     const torch::Tensor& grad_x, int64_t path);

}  // namespace pygio_host
