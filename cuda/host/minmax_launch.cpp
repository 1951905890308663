#include "minmax_launch.h"

#include "native_api.h"

namespace pygio_host {

void minmax(const torch::Tensor& rowptr, const torch::Tensor& col, const torch::Tensor& x,
            int64_t reduce, const torch::Tensor& hub_degree, int64_t max_hubs,
            const torch::Tensor& out, const torch::Tensor& arg) {
  pygio_minmax_params p{};
  p.struct_size = sizeof(p);
  p.dtype = dtype_code(x.scalar_type());
  p.device = x.get_device();
  p.reduce = static_cast<int32_t>(reduce);
  p.a = csr_of(rowptr, col, x.size(0));
  p.width = x.size(1);
  p.x = x.data_ptr();
  p.x_row_stride = row_stride(x);
  p.hub_degree = static_cast<const int64_t*>(data_or_null(hub_degree));
  p.max_hubs = max_hubs;
  p.out = out.data_ptr();
  p.out_row_stride = row_stride(out);
  p.arg = data_or_null(arg);
  p.arg_bytes = arg.defined() ? static_cast<int32_t>(arg.element_size()) : 0;
  p.stream = current_stream(x);
  launch_with_workspace(native.minmax_workspace_size, native.minmax, p, x, "pygio_minmax");
}

void minmax_backward(const torch::Tensor& rowptr, const torch::Tensor& col,
                     const torch::Tensor& rowptr_t, const torch::Tensor& col_t,
                     const torch::Tensor& perm_t, const torch::Tensor& x,
                     const torch::Tensor& out, const torch::Tensor& arg,
                     const torch::Tensor& grad_out, int64_t reduce,
                     const torch::Tensor& hub_degree, int64_t max_hubs,
                     const torch::Tensor& grad_x, int64_t path) {
  TORCH_CHECK(path >= kAtomics && path <= kDeterministic,
              "pyg_ioaware host extension: unknown min / max backward path ", path);
  pygio_minmax_backward_params p{};
  p.struct_size = sizeof(p);
  p.dtype = dtype_code(x.scalar_type());
  p.device = x.get_device();
  p.reduce = static_cast<int32_t>(reduce);
  p.deterministic = path == kDeterministic;
  p.a = csr_of(rowptr, col, x.size(0));
  p.a_t.index_bits = index_bits(rowptr.scalar_type());
  if (rowptr_t.defined()) p.a_t = csr_of(rowptr_t, col_t, rowptr.numel() - 1);
  p.width = x.size(1);
  p.hub_degree = static_cast<const int64_t*>(data_or_null(hub_degree));
  p.max_hubs = max_hubs;
  p.x = x.data_ptr();
  p.x_row_stride = row_stride(x);
  p.out = out.data_ptr();
  p.out_row_stride = row_stride(out);
  p.arg = arg.data_ptr();
  p.arg_bytes = static_cast<int32_t>(arg.element_size());
  p.grad_out = grad_out.data_ptr();
  p.grad_out_row_stride = row_stride(grad_out);
  p.grad_x = grad_x.data_ptr();
  p.grad_x_row_stride = row_stride(grad_x);
  p.stream = current_stream(x);
  p.perm_t = path == kAtomics ? nullptr : data_or_null(perm_t);
  launch_with_workspace(native.minmax_backward_workspace_size, native.minmax_backward, p, x,
                        "pygio_minmax_backward");
}

}  // namespace pygio_host
