// SpMM through cuSPARSE with a cached plan: Y = A X for CSR A and row-major
// dense X, Y. See pyg_ioaware.h for the contract.
#include <mutex>
#include <string>

#include "../common/status.h"
#include "cusparse_api.h"

using namespace pygio;
namespace cs = pygio::cusparse;

struct pygio_spmm_plan {
  int device;
  int algorithm;
  int operation;     // cusparseOperation_t applied to A
  int value_type;    // cudaDataType of A, X and Y
  int compute_type;  // cudaDataType of the accumulator
  pygio_csr a;  // rowptr / col are rebound with each call's values pointer
  cs::SpMatDescr mat_a;
  cs::DnMatDescr mat_x;
  cs::DnMatDescr mat_y;
};

namespace {

// cuSPARSE handles are per device and shared by plans: setting the stream
// and launching must not interleave between threads.
std::mutex launch_mutex;

int value_type_of(int dtype, int* value_type, int* compute_type) {
  switch (dtype) {
    case PYGIO_FLOAT32: *value_type = cs::kR32F; *compute_type = cs::kR32F; return PYGIO_OK;
    case PYGIO_FLOAT64: *value_type = cs::kR64F; *compute_type = cs::kR64F; return PYGIO_OK;
    case PYGIO_FLOAT16: *value_type = cs::kR16F; *compute_type = cs::kR32F; return PYGIO_OK;
    case PYGIO_BFLOAT16: *value_type = cs::kR16BF; *compute_type = cs::kR32F; return PYGIO_OK;
    default: return fail(PYGIO_ERR_INVALID_ARGUMENT, "unknown dtype code");
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

// Points the descriptors at this call's buffers and binds the stream.
int bind(pygio_spmm_plan* plan, const void* values, const void* x, void* y, void* stream,
         cs::Handle* handle) {
  PYGIO_CHECK_ARG(plan != nullptr, "null SpMM plan");
  PYGIO_CHECK_ARG(values != nullptr && x != nullptr && y != nullptr,
                  "SpMM buffers must not be null");
  int status = set_device(plan->device);
  if (status != PYGIO_OK) return status;
  status = cs::handle_for_device(plan->device, handle);
  if (status != PYGIO_OK) return status;
  const cs::Api& api = cs::api();
  PYGIO_CHECK_CUSPARSE(api.csr_set_pointers(plan->mat_a, const_cast<void*>(plan->a.rowptr),
                                            const_cast<void*>(plan->a.col),
                                            const_cast<void*>(values)));
  PYGIO_CHECK_CUSPARSE(api.dn_mat_set_values(plan->mat_x, const_cast<void*>(x)));
  PYGIO_CHECK_CUSPARSE(api.dn_mat_set_values(plan->mat_y, y));
  PYGIO_CHECK_CUSPARSE(api.set_stream(*handle, static_cast<cudaStream_t>(stream)));
  return PYGIO_OK;
}

// Under the launch lock: binds this call's buffers and stream, then runs
// call(handle), which returns a pygio status.
template <typename Call>
int bound_call(pygio_spmm_plan* plan, const void* values, const void* x, void* y, void* stream,
               Call call) {
  std::lock_guard<std::mutex> guard(launch_mutex);
  cs::Handle handle = nullptr;
  int status = bind(plan, values, x, y, stream, &handle);
  if (status == PYGIO_OK) status = call(handle);
  return status == PYGIO_OK ? ok() : status;
}

// Calls one of cusparseSpMM_bufferSize / _preprocess / SpMM: they share their
// first ten arguments (the plan's operation, alpha = 1, beta = 0, descriptors,
// compute type, algorithm) and differ in the last.
template <typename Fn, typename Last>
cs::Status call_spmm_api(Fn fn, cs::Handle handle, const pygio_spmm_plan* plan, Last last) {
  return fn(handle, plan->operation, cs::kOperationNonTranspose, scalars.one(plan->compute_type),
            plan->mat_a, plan->mat_x, scalars.zero(plan->compute_type), plan->mat_y,
            plan->compute_type, plan->algorithm, last);
}

}  // namespace

extern "C" {

int pygio_spmm_plan_create(const pygio_csr* a, int64_t width, int32_t algorithm,
                           int32_t transpose, int32_t device, pygio_spmm_plan** out) {
  PYGIO_CHECK_ARG(a != nullptr && out != nullptr, "null argument");
  PYGIO_CHECK_ARG(a->num_rows > 0 && a->num_cols > 0 && a->nnz > 0 && width > 0,
                  "SpMM plan needs a non-empty matrix and width (callers handle empty cases)");
  PYGIO_CHECK_ARG(a->index_bits == 32 || a->index_bits == 64, "index_bits must be 32 or 64");
  PYGIO_CHECK_ARG(a->rowptr != nullptr && a->col != nullptr, "CSR pointers must not be null");
  int value_type = 0, compute_type = 0;
  int status = value_type_of(a->dtype, &value_type, &compute_type);
  if (status != PYGIO_OK) return status;
  status = set_device(device);
  if (status != PYGIO_OK) return status;
  status = cs::load(nullptr);
  if (status != PYGIO_OK) return status;

  const cs::Api& api = cs::api();
  const int index_type = a->index_bits == 32 ? cs::kIndex32I : cs::kIndex64I;
  const int operation = transpose ? cs::kOperationTranspose : cs::kOperationNonTranspose;
  auto* plan = new pygio_spmm_plan{device, algorithm, operation, value_type, compute_type, *a,
                                   nullptr, nullptr, nullptr};
  const int64_t x_rows = transpose ? a->num_rows : a->num_cols;
  const int64_t y_rows = transpose ? a->num_cols : a->num_rows;
  plan->a.values = nullptr;  // bound per call
  // Descriptors need some values pointer at creation; the real ones are bound
  // on every call, so rowptr serves as a stand-in that is never read as data.
  void* placeholder = const_cast<void*>(a->rowptr);
  cs::Status st = api.create_csr(&plan->mat_a, a->num_rows, a->num_cols, a->nnz,
                                 const_cast<void*>(a->rowptr), const_cast<void*>(a->col),
                                 placeholder, index_type, index_type, cs::kIndexBaseZero,
                                 value_type);
  if (st == cs::kSuccess)
    st = api.create_dn_mat(&plan->mat_x, x_rows, width, width, placeholder, value_type,
                           cs::kOrderRow);
  if (st == cs::kSuccess)
    st = api.create_dn_mat(&plan->mat_y, y_rows, width, width, placeholder, value_type,
                           cs::kOrderRow);
  if (st != cs::kSuccess) {
    pygio_spmm_plan_destroy(plan);
    return fail(PYGIO_ERR_CUSPARSE,
                std::string("creating cuSPARSE descriptors: ") + api.get_error_string(st));
  }
  *out = plan;
  return ok();
}

void pygio_spmm_plan_destroy(pygio_spmm_plan* plan) {
  if (plan == nullptr) return;
  const cs::Api& api = cs::api();
  if (plan->mat_a != nullptr) api.destroy_sp_mat(plan->mat_a);
  if (plan->mat_x != nullptr) api.destroy_dn_mat(plan->mat_x);
  if (plan->mat_y != nullptr) api.destroy_dn_mat(plan->mat_y);
  delete plan;
}

int pygio_spmm_workspace_size(pygio_spmm_plan* plan, const void* values, const void* x, void* y,
                              size_t* bytes, void* stream) {
  PYGIO_CHECK_ARG(bytes != nullptr, "null output pointer");
  return bound_call(plan, values, x, y, stream, [&](cs::Handle handle) {
    PYGIO_CHECK_CUSPARSE(call_spmm_api(cs::api().spmm_buffer_size, handle, plan, bytes));
    return int{PYGIO_OK};
  });
}

int pygio_spmm_preprocess(pygio_spmm_plan* plan, const void* values, const void* x, void* y,
                          void* workspace, void* stream) {
  return bound_call(plan, values, x, y, stream, [&](cs::Handle handle) {
    PYGIO_CHECK_CUSPARSE(call_spmm_api(cs::api().spmm_preprocess, handle, plan, workspace));
    return int{PYGIO_OK};
  });
}

int pygio_spmm_run(pygio_spmm_plan* plan, const void* values, const void* x, void* y,
                   void* workspace, void* stream) {
  return bound_call(plan, values, x, y, stream, [&](cs::Handle handle) {
    PYGIO_CHECK_CUSPARSE(call_spmm_api(cs::api().spmm, handle, plan, workspace));
    return int{PYGIO_OK};
  });
}

}  // extern "C"
