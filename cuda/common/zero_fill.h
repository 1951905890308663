// Zeroing a strided block of rows before kernels accumulate into it.
#pragma once

#include <stdint.h>

#include <cuda_runtime.h>

namespace pygio {

// data[r * stride_bytes + b] = 0 for r < rows, b < row_bytes, on `stream`:
// one cudaMemsetAsync where the rows are contiguous (stride_bytes ==
// row_bytes, or a single row), else one cudaMemset2DAsync (a 2-D memset
// costs the host more: the SpMM transposed and min / max backwards run one
// on every new graph's step).
int zero_rows(void* data, int64_t rows, int64_t row_bytes, int64_t stride_bytes,
              cudaStream_t stream);

}  // namespace pygio
