// Makes a device current for the duration of an entry and restores the
// caller's CUDA context afterwards.
//
// The library links the CUDA runtime statically, but the current context is
// the driver's, per thread, and shared with torch's runtime: cudaSetDevice
// here changes what torch sees as the current device. The guard saves the
// driver's current context itself (which may be none) rather than a device
// index, so restoring never creates a context on a device the caller did not
// use (cudaSetDevice(0) on a thread with no context would).
#pragma once

#include <cuda.h>

namespace pygio {

class DeviceGuard {
 public:
  DeviceGuard() = default;
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard();

  // Makes `device` (its primary context) current on this thread; the
  // destructor restores the context that was current before. Call once per
  // guard. Returns a pygio status.
  int set(int device);

 private:
  CUcontext saved_ = nullptr;
  bool restore_ = false;
};

}  // namespace pygio
