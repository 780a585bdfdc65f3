#include "ridge/core/threads.hpp"

#include <omp.h>

#include <atomic>

#include "ridge/core/error.hpp"

namespace ridge {
namespace {
std::atomic<int> g_threads{0};  // 0: not chosen yet, follow OpenMP's default
}

int get_num_threads() {
  const int n = g_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : omp_get_max_threads();
}

void set_num_threads(int n) {
  check(n >= 1, "threads: {} is not a thread count (expected an integer >= 1)", n);
  g_threads.store(n, std::memory_order_relaxed);
}

}  // namespace ridge
