#include "zero_fill.h"

#include "status.h"

namespace pygio {

int zero_rows(void* data, int64_t rows, int64_t row_bytes, int64_t stride_bytes,
              cudaStream_t stream) {
  if (rows <= 0 || row_bytes <= 0) return PYGIO_OK;
  if (rows == 1 || stride_bytes == row_bytes) {
    PYGIO_CHECK_CUDA(cudaMemsetAsync(data, 0, static_cast<size_t>(rows * row_bytes), stream));
  } else {
    PYGIO_CHECK_CUDA(cudaMemset2DAsync(data, static_cast<size_t>(stride_bytes), 0,
                                       static_cast<size_t>(row_bytes),
                                       static_cast<size_t>(rows), stream));
  }
  return PYGIO_OK;
}

}  // namespace pygio
