#include "cusparse_api.h"

#include <dlfcn.h>

#include <atomic>
#include <string>

#include "../common/status.h"

namespace pygio::cusparse {

namespace {

constexpr int kMaxDevices = 64;

Api table;
std::atomic<bool> loaded{false};
std::mutex load_mutex;

struct DeviceHandle {
  std::mutex mutex;  // held while a call binds the handle's stream and enqueues
  Handle handle = nullptr;
};
DeviceHandle device_handles[kMaxDevices];

template <typename Fn>
void resolve(void* lib, const char* name, Fn* out, std::string* missing) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*out == nullptr) *missing += std::string(" ") + name;
}

}  // namespace

int load(const char* path) {
  if (loaded.load(std::memory_order_acquire)) return PYGIO_OK;
  std::lock_guard<std::mutex> guard(load_mutex);
  if (loaded.load(std::memory_order_relaxed)) return PYGIO_OK;
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
  loaded.store(true, std::memory_order_release);
  return PYGIO_OK;
}

const Api& api() { return table; }

int check(Status status, const char* what) {
  if (status == kSuccess) return PYGIO_OK;
  return fail(status == kNotSupported ? PYGIO_ERR_UNSUPPORTED : PYGIO_ERR_CUSPARSE,
              std::string(what) + ": " + table.get_error_string(status));
}

int LockedHandle::acquire(int device, cudaStream_t stream) {
  PYGIO_CHECK_ARG(device >= 0 && device < kMaxDevices,
                  "device index " + std::to_string(device) + " out of range");
  PYGIO_TRY(load(nullptr));
  DeviceHandle& slot = device_handles[device];
  lock_ = std::unique_lock<std::mutex>(slot.mutex);
  if (slot.handle == nullptr) PYGIO_CHECK_CUSPARSE(table.create(&slot.handle));
  PYGIO_CHECK_CUSPARSE(table.set_stream(slot.handle, stream));
  handle_ = slot.handle;
  return PYGIO_OK;
}

}  // namespace pygio::cusparse

extern "C" int pygio_cusparse_load(const char* path) {
  const int status = pygio::cusparse::load(path);
  return status == PYGIO_OK ? pygio::ok() : status;
}
