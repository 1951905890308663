#include "spmm_launch.h"

#include "native_api.h"

namespace pygio_host {

void spmm_into(const torch::Tensor& rowptr, const torch::Tensor& col,
               const torch::Tensor& values, const torch::Tensor& x, const torch::Tensor& bias,
               const torch::Tensor& out, bool transpose, bool deterministic,
               int64_t degree_bound) {
  pygio_spmm_csr_params p{};
  p.struct_size = sizeof(p);
  p.dtype = dtype_code(x.scalar_type());
  p.values_dtype = dtype_code(values.scalar_type());
  p.y_dtype = dtype_code(out.scalar_type());
  p.device = x.get_device();
  p.transpose = transpose;
  p.deterministic = deterministic;
  p.a = csr_of(rowptr, col, transpose ? out.size(0) : x.size(0));
  p.degree_bound = degree_bound;
  p.width = x.size(1);
  p.values = values.data_ptr();
  p.x = x.data_ptr();
  p.x_row_stride = row_stride(x);
  p.bias = data_or_null(bias);
  p.y = out.data_ptr();
  p.y_row_stride = row_stride(out);
  p.stream = current_stream(x);
  launch_with_workspace(native.spmm_csr_workspace_size, native.spmm_csr, p, x,
                        "pygio_spmm_csr");
}

}  // namespace pygio_host
