// The widest vector load a kernel may use over row-major matrices.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <initializer_list>

namespace pygio {

// Elements per load: 16 bytes, else 8, else one element, the widest that
// divides the width and every row stride and that every base pointer is
// aligned to (row strides in elements).
inline int widest_vector(size_t element_size, int64_t width,
                         std::initializer_list<int64_t> row_strides,
                         std::initializer_list<const void*> pointers) {
  for (size_t bytes : {size_t{16}, size_t{8}}) {
    if (bytes <= element_size) break;
    const int64_t n = static_cast<int64_t>(bytes / element_size);
    bool fits = width % n == 0;
    for (int64_t stride : row_strides) fits = fits && stride % n == 0;
    for (const void* p : pointers) fits = fits && reinterpret_cast<uintptr_t>(p) % bytes == 0;
    if (fits) return static_cast<int>(n);
  }
  return 1;
}

}  // namespace pygio
