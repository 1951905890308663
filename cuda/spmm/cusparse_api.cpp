#include "cusparse_api.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "../common/status.h"

namespace pygio::cusparse {

namespace {

constexpr int kMaxDevices = 64;

Api table;
bool loaded = false;
std::mutex load_mutex;
Handle handles[kMaxDevices] = {};
std::mutex handle_mutex;

template <typename Fn>
bool resolve(void* lib, const char* name, Fn* out, std::string* missing) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*out == nullptr) *missing += std::string(" ") + name;
  return *out != nullptr;
}

}  // namespace

int load(const char* path) {
  std::lock_guard<std::mutex> guard(load_mutex);
  if (loaded) return PYGIO_OK;
  const char* soname = "libcusparse.so.12";
  void* lib = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr && path != nullptr && path[0] != '\0') lib = dlopen(path, RTLD_NOW);
  if (lib == nullptr) lib = dlopen(soname, RTLD_NOW);
  if (lib == nullptr) {
    const char* why = dlerror();
    return fail(PYGIO_ERR_CUSPARSE_UNAVAILABLE,
                std::string("could not load cuSPARSE (libcusparse.so.12): ") +
                    (why ? why : "not found"));
  }
  std::string missing;
  resolve(lib, "cusparseCreate", &table.create, &missing);
  resolve(lib, "cusparseSetStream", &table.set_stream, &missing);
  resolve(lib, "cusparseGetErrorString", &table.get_error_string, &missing);
  resolve(lib, "cusparseCreateCsr", &table.create_csr, &missing);
  resolve(lib, "cusparseCsrSetPointers", &table.csr_set_pointers, &missing);
  resolve(lib, "cusparseDestroySpMat", &table.destroy_sp_mat, &missing);
  resolve(lib, "cusparseCreateDnMat", &table.create_dn_mat, &missing);
  resolve(lib, "cusparseDnMatSetValues", &table.dn_mat_set_values, &missing);
  resolve(lib, "cusparseDestroyDnMat", &table.destroy_dn_mat, &missing);
  resolve(lib, "cusparseSpMM_bufferSize", &table.spmm_buffer_size, &missing);
  resolve(lib, "cusparseSpMM_preprocess", &table.spmm_preprocess, &missing);
  resolve(lib, "cusparseSpMM", &table.spmm, &missing);
  if (!missing.empty())
    return fail(PYGIO_ERR_CUSPARSE_UNAVAILABLE, "cuSPARSE lacks symbols:" + missing);
  loaded = true;
  return PYGIO_OK;
}

const Api& api() { return table; }

int handle_for_device(int device, Handle* out) {
  PYGIO_CHECK_ARG(device >= 0 && device < kMaxDevices, "device index out of range");
  int status = load(nullptr);
  if (status != PYGIO_OK) return status;
  std::lock_guard<std::mutex> guard(handle_mutex);
  if (handles[device] == nullptr) {
    status = set_device(device);
    if (status != PYGIO_OK) return status;
    PYGIO_CHECK_CUSPARSE(table.create(&handles[device]));
  }
  *out = handles[device];
  return PYGIO_OK;
}

}  // namespace pygio::cusparse

extern "C" int pygio_cusparse_load(const char* path) {
  int status = pygio::cusparse::load(path);
  return status == PYGIO_OK ? pygio::ok() : status;
}
