#include "status.h"

namespace pygio {

namespace {
thread_local std::string last_error;
}  // namespace

int fail(int status, const std::string& message) {
  last_error = message;
  return status;
}

int ok() {
  last_error.clear();
  return PYGIO_OK;
}

}  // namespace pygio

extern "C" const char* pygio_last_error(void) { return pygio::last_error.c_str(); }
