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

// pygio_minmax_backward: grad_x of that forward (its out and arg), over the
// CSR^T (rowptr_t, col_t) where defined: with its perm_t (CSR^T position ->
// CSR position) the plain winners gathered per source from buckets, without
// it deterministic; else with atomics.
void minmax_backward(const torch::Tensor& rowptr, const torch::Tensor& col,
                     const torch::Tensor& rowptr_t, const torch::Tensor& col_t,
                     const torch::Tensor& perm_t,
                     const torch::Tensor& x, const torch::Tensor& out, const torch::Tensor& arg,
                     const torch::Tensor& grad_out, int64_t reduce,
                     const torch::Tensor& hub_degree, int64_t max_hubs,
                     const torch::Tensor& grad_x);

}  // namespace pygio_host
