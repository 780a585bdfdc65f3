#include "ridge/core/memory.hpp"

#include <cstdlib>
#include <new>

#include "ridge/core/error.hpp"

namespace ridge::memory {

void* allocate(size_t bytes, const char* /*tag*/, size_t alignment) {
  check(alignment >= sizeof(void*) && (alignment & (alignment - 1)) == 0,
        "memory: alignment {} must be a power of two >= {}", alignment, sizeof(void*));
  check(bytes <= (size_t{1} << 50), "memory: {} bytes is beyond any machine (at most 2^50)", bytes);
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded);
  if (!p) throw std::bad_alloc();
  return p;
}

void deallocate(void* p) noexcept { std::free(p); }

}  // namespace ridge::memory
