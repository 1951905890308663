// SpMM through cuSPARSE with a cached plan: Y = op(A) X for CSR A and
// row-major, row-strided X, Y. Contract in pyg_ioaware.h.
#include <memory>
#include <string>

#include "../common/abi.h"
#include "../common/device_guard.h"
#include "cusparse_api.h"

using namespace pygio;
namespace cs = pygio::cusparse;

namespace {

// A dense operand's descriptor and the row stride it was created with
// (cuSPARSE cannot change a descriptor's leading dimension, so a new stride
// means a new descriptor).
struct DenseOperand {
  cs::DnMatDescr descr = nullptr;
  int64_t rows = 0;
  int64_t row_stride = 0;
};

}  // namespace

// Mutable state (the descriptors' bound pointers and strides) is only
// touched under the plan's device's handle lock.
struct pygio_spmm_plan {
  int32_t device = 0;
  int32_t dtype = 0;       // pygio_dtype
  int32_t algorithm = 0;   // cusparseSpMMAlg_t
  int operation = 0;       // cusparseOperation_t applied to A
  int value_type = 0;      // cudaDataType of A, X and Y
  int compute_type = 0;    // cudaDataType of the accumulator
  int64_t width = 0;
  const void* rowptr = nullptr;  // rebound with each call's values pointer
  const void* col = nullptr;
  cs::SpMatDescr mat_a = nullptr;
  DenseOperand x, y;

  ~pygio_spmm_plan() {
    if (mat_a != nullptr) cs::api().destroy_sp_mat(mat_a);
    for (DenseOperand* operand : {&x, &y})
      if (operand->descr != nullptr) cs::api().destroy_dn_mat(operand->descr);
  }
};

namespace {

// cudaDataType of the values and of the accumulator for a (checked) dtype.
void cuda_types_of(int32_t dtype, int* value_type, int* compute_type) {
  switch (dtype) {
    case PYGIO_FLOAT64: *value_type = cs::kR64F; *compute_type = cs::kR64F; return;
    case PYGIO_FLOAT16: *value_type = cs::kR16F; *compute_type = cs::kR32F; return;
    case PYGIO_BFLOAT16: *value_type = cs::kR16BF; *compute_type = cs::kR32F; return;
    default: *value_type = cs::kR32F; *compute_type = cs::kR32F; return;
  }
}

// Scalars alpha = 1, beta = 0 in the compute type (host pointer mode).
struct Scalars {
  float f_one = 1.f, f_zero = 0.f;
  double d_one = 1.0, d_zero = 0.0;
  const void* one(int compute_type) const {
    return compute_type == cs::kR64F ? static_cast<const void*>(&d_one) : &f_one;
  }
  const void* zero(int compute_type) const {
    return compute_type == cs::kR64F ? static_cast<const void*>(&d_zero) : &f_zero;
  }
};
const Scalars scalars;

// Points `operand` at `data` with `row_stride`, recreating its descriptor
// when the stride changed.
int bind_dense(const pygio_spmm_plan& plan, DenseOperand* operand, const void* data,
               int64_t row_stride) {
  const cs::Api& api = cs::api();
  void* ptr = const_cast<void*>(data);
  if (operand->descr != nullptr && operand->row_stride == row_stride) {
    PYGIO_CHECK_CUSPARSE(api.dn_mat_set_values(operand->descr, ptr));
    return PYGIO_OK;
  }
  if (operand->descr != nullptr) api.destroy_dn_mat(operand->descr);
  operand->descr = nullptr;
  PYGIO_CHECK_CUSPARSE(api.create_dn_mat(&operand->descr, operand->rows, plan.width, row_stride,
                                         ptr, plan.value_type, cs::kOrderRow));
  operand->row_stride = row_stride;
  return PYGIO_OK;
}

// A call's params agree with its plan and name every buffer.
int check_call(const pygio_spmm_params& p, const char* entry) {
  PYGIO_CHECK_ARG(p.plan != nullptr, entry_message(entry, "plan must not be NULL"));
  const pygio_spmm_plan& plan = *p.plan;
  PYGIO_CHECK_ARG(p.device == plan.device,
                  entry_message(entry, "device " + std::to_string(p.device) +
                                           " is not the plan's device " +
                                           std::to_string(plan.device)));
  PYGIO_CHECK_ARG(p.dtype == plan.dtype,
                  entry_message(entry, "dtype code " + std::to_string(p.dtype) +
                                           " is not the plan's " + std::to_string(plan.dtype)));
  PYGIO_CHECK_ARG(p.values != nullptr && p.x != nullptr && p.y != nullptr,
                  entry_message(entry, "values, x and y must not be NULL"));
  PYGIO_TRY(check_row_stride(p.x_row_stride, plan.width, "x", entry));
  PYGIO_TRY(check_row_stride(p.y_row_stride, plan.width, "y", entry));
  return PYGIO_OK;
}

// Checks a call, makes the plan's device current, takes that device's
// handle on the call's stream, points the plan's descriptors at the call's
// buffers and returns call(handle, plan).
template <typename Call>
int with_bound_plan(const pygio_spmm_params* params, const char* entry, Call call) {
  PYGIO_TRY(check_params(params, entry));
  PYGIO_TRY(check_call(*params, entry));
  pygio_spmm_plan& plan = *params->plan;
  DeviceGuard device;
  PYGIO_TRY(device.set(plan.device));
  cs::LockedHandle handle;
  PYGIO_TRY(handle.acquire(plan.device, static_cast<cudaStream_t>(params->stream)));
  PYGIO_CHECK_CUSPARSE(cs::api().csr_set_pointers(plan.mat_a, const_cast<void*>(plan.rowptr),
                                                  const_cast<void*>(plan.col),
                                                  const_cast<void*>(params->values)));
  PYGIO_TRY(bind_dense(plan, &plan.x, params->x, params->x_row_stride));
  PYGIO_TRY(bind_dense(plan, &plan.y, params->y, params->y_row_stride));
  PYGIO_TRY(call(handle.get(), plan));
  return ok();
}

// Calls one of cusparseSpMM_bufferSize / _preprocess / SpMM (named `what`):
// they share their first ten arguments (the plan's operation, alpha = 1,
// beta = 0, descriptors, compute type, algorithm) and differ in the last.
template <typename Fn, typename Last>
int call_spmm_api(Fn fn, const char* what, cs::Handle handle, const pygio_spmm_plan& plan,
                  Last last) {
  return cs::check(fn(handle, plan.operation, cs::kOperationNonTranspose,
                      scalars.one(plan.compute_type), plan.mat_a, plan.x.descr,
                      scalars.zero(plan.compute_type), plan.y.descr, plan.compute_type,
                      plan.algorithm, last),
                   what);
}

}  // namespace

extern "C" {

int pygio_spmm_plan_create(const pygio_spmm_plan_params* params, pygio_spmm_plan** out) {
  PYGIO_TRY(check_params(params, __func__));
  PYGIO_CHECK_ARG(out != nullptr, entry_message(__func__, "plan must not be NULL"));
  *out = nullptr;
  const pygio_spmm_plan_params& p = *params;
  PYGIO_TRY(check_csr(p.a, __func__));
  PYGIO_TRY(check_dtype(p.dtype, __func__));
  PYGIO_CHECK_ARG(p.a.num_rows > 0 && p.a.num_cols > 0 && p.a.nnz > 0 && p.width > 0,
                  entry_message(__func__, "a plan needs a non-empty matrix and width "
                                          "(callers handle empty problems)"));
  // cusparseCreateCsr refuses more entries than rows x cols ("invalid
  // value"), which only duplicate entries make possible. Written so that
  // rows x cols cannot overflow.
  if ((p.a.nnz - 1) / p.a.num_rows >= p.a.num_cols)
    return fail(PYGIO_ERR_UNSUPPORTED,
                entry_message(__func__, "cuSPARSE takes at most num_rows x num_cols entries; "
                                        "this matrix has " + std::to_string(p.a.nnz) +
                                        " entries in " + std::to_string(p.a.num_rows) + " x " +
                                        std::to_string(p.a.num_cols) +
                                        " (duplicates): run it another way"));
  PYGIO_CHECK_ARG(p.transpose == 0 || p.transpose == 1,
                  entry_message(__func__, "transpose must be 0 or 1"));
  PYGIO_CHECK_ARG(p.device >= 0, entry_message(__func__, "device must be non-negative"));
  PYGIO_TRY(cs::load(nullptr));

  auto plan = std::make_unique<pygio_spmm_plan>();
  plan->device = p.device;
  plan->dtype = p.dtype;
  plan->algorithm = p.algorithm;
  plan->operation = p.transpose ? cs::kOperationTranspose : cs::kOperationNonTranspose;
  cuda_types_of(p.dtype, &plan->value_type, &plan->compute_type);
  plan->width = p.width;
  plan->rowptr = p.a.rowptr;
  plan->col = p.a.col;
  plan->x.rows = p.transpose ? p.a.num_rows : p.a.num_cols;
  plan->y.rows = p.transpose ? p.a.num_cols : p.a.num_rows;
  // The descriptor needs some values pointer at creation; the real one is
  // bound on every call, so rowptr stands in and is never read as values.
  const int index_type = p.a.index_bits == 32 ? cs::kIndex32I : cs::kIndex64I;
  void* rowptr = const_cast<void*>(p.a.rowptr);
  PYGIO_CHECK_CUSPARSE(cs::api().create_csr(&plan->mat_a, p.a.num_rows, p.a.num_cols, p.a.nnz,
                                            rowptr, const_cast<void*>(p.a.col), rowptr,
                                            index_type, index_type, cs::kIndexBaseZero,
                                            plan->value_type));
  *out = plan.release();
  return ok();
}

void pygio_spmm_plan_destroy(pygio_spmm_plan* plan) { delete plan; }

int pygio_spmm_workspace_size(const pygio_spmm_params* params, size_t* bytes) {
  PYGIO_CHECK_ARG(bytes != nullptr, entry_message(__func__, "bytes must not be NULL"));
  return with_bound_plan(params, __func__, [&](cs::Handle handle, const pygio_spmm_plan& plan) {
    return call_spmm_api(cs::api().spmm_buffer_size, "cusparseSpMM_bufferSize", handle, plan,
                         bytes);
  });
}

int pygio_spmm_run(const pygio_spmm_params* params) {
  return with_bound_plan(params, __func__, [&](cs::Handle handle, const pygio_spmm_plan& plan) {
    return call_spmm_api(cs::api().spmm, "cusparseSpMM", handle, plan, params->workspace);
  });
}

int pygio_spmm_preprocess(const pygio_spmm_params* params) {
  return with_bound_plan(params, __func__, [&](cs::Handle handle, const pygio_spmm_plan& plan) {
    return call_spmm_api(cs::api().spmm_preprocess, "cusparseSpMM_preprocess", handle, plan,
                         params->workspace);
  });
}

}  // extern "C"
