#include "abi.h"

namespace pygio {

std::string entry_message(const char* entry, const std::string& message) {
  return std::string(entry) + ": " + message;
}

int struct_size_mismatch(const char* entry, int64_t caller_size, size_t library_size) {
  return fail(PYGIO_ERR_INVALID_ARGUMENT,
              entry_message(entry, "params.struct_size is " + std::to_string(caller_size) +
                                  ", this library's struct has " +
                                  std::to_string(library_size) + " bytes (ABI version " +
                                  std::to_string(PYGIO_ABI_VERSION) +
                                  "): the caller was built against another pyg_ioaware.h"));
}

int check_csr(const pygio_csr& a, const char* entry) {
  if (a.index_bits != 32 && a.index_bits != 64)
    return fail(PYGIO_ERR_INVALID_ARGUMENT,
                entry_message(entry, "index_bits must be 32 or 64, got " +
                                    std::to_string(a.index_bits)));
  PYGIO_CHECK_ARG(a.num_rows >= 0 && a.num_cols >= 0 && a.nnz >= 0,
                  entry_message(entry, "CSR sizes must be non-negative"));
  if (a.nnz == 0) return PYGIO_OK;
  PYGIO_CHECK_ARG(a.num_rows > 0 && a.num_cols > 0,
                  entry_message(entry, "a CSR matrix with entries needs rows and columns"));
  PYGIO_CHECK_ARG(a.rowptr != nullptr && a.col != nullptr,
                  entry_message(entry, "CSR rowptr / col must not be NULL"));
  return PYGIO_OK;
}

int check_dtype(int32_t dtype, const char* entry) {
  switch (dtype) {
    case PYGIO_FLOAT32:
    case PYGIO_FLOAT64:
    case PYGIO_FLOAT16:
    case PYGIO_BFLOAT16:
      return PYGIO_OK;
    default:
      return fail(PYGIO_ERR_INVALID_ARGUMENT,
                  entry_message(entry, "unknown dtype code " + std::to_string(dtype)));
  }
}

int check_row_stride(int64_t row_stride, int64_t width, const char* name, const char* entry) {
  if (row_stride >= width) return PYGIO_OK;
  return fail(PYGIO_ERR_INVALID_ARGUMENT,
              entry_message(entry, std::string(name) + " row stride " + std::to_string(row_stride) +
                                  " is less than the width " + std::to_string(width)));
}

}  // namespace pygio

extern "C" {

int pygio_abi_version(void) { return PYGIO_ABI_VERSION; }

size_t pygio_struct_size(int32_t kind) {
  switch (kind) {
    case PYGIO_STRUCT_CSR: return sizeof(pygio_csr);
    case PYGIO_STRUCT_SPMM_PLAN_PARAMS: return sizeof(pygio_spmm_plan_params);
    case PYGIO_STRUCT_SPMM_PARAMS: return sizeof(pygio_spmm_params);
    case PYGIO_STRUCT_SDDMM_PARAMS: return sizeof(pygio_sddmm_params);
    case PYGIO_STRUCT_SELF_LOOPS_PARAMS: return sizeof(pygio_self_loops_params);
    case PYGIO_STRUCT_GCN_NORM_PARAMS: return sizeof(pygio_gcn_norm_params);
    case PYGIO_STRUCT_SPMM_CSR_PARAMS: return sizeof(pygio_spmm_csr_params);
    case PYGIO_STRUCT_MINMAX_PARAMS: return sizeof(pygio_minmax_params);
    case PYGIO_STRUCT_MINMAX_BACKWARD_PARAMS: return sizeof(pygio_minmax_backward_params);
    case PYGIO_STRUCT_GATV2_PARAMS: return sizeof(pygio_gatv2_params);
    case PYGIO_STRUCT_GATV2_BACKWARD_PARAMS: return sizeof(pygio_gatv2_backward_params);
    case PYGIO_STRUCT_GATV2_ALPHA_PARAMS: return sizeof(pygio_gatv2_alpha_params);
    case PYGIO_STRUCT_TRANSFORMER_PARAMS: return sizeof(pygio_transformer_params);
    case PYGIO_STRUCT_TRANSFORMER_BACKWARD_PARAMS:
      return sizeof(pygio_transformer_backward_params);
    case PYGIO_STRUCT_TRANSFORMER_ALPHA_PARAMS: return sizeof(pygio_transformer_alpha_params);
    case PYGIO_STRUCT_EDGES: return sizeof(pygio_edges);
    case PYGIO_STRUCT_EDGE_STATS_PARAMS: return sizeof(pygio_edge_stats_params);
    case PYGIO_STRUCT_CSR_FROM_GROUPED_PARAMS: return sizeof(pygio_csr_from_grouped_params);
    case PYGIO_STRUCT_MEAN_NORM_PARAMS: return sizeof(pygio_mean_norm_params);
    case PYGIO_STRUCT_CSR_TRANSPOSE_PARAMS: return sizeof(pygio_csr_transpose_params);
    case PYGIO_STRUCT_PYG_SELF_LOOPS_PARAMS: return sizeof(pygio_pyg_self_loops_params);
    default: return 0;
  }
}

}  // extern "C"
