#include "ridge/core/threads.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>

#include "ridge/core/env.hpp"
#include "ridge/core/error.hpp"
#include "core/check.hpp"

namespace ridge {
namespace {
std::atomic<int> g_threads{0};  // 0: not chosen yet, follow OMP_NUM_THREADS or OpenMP's default
}

int get_num_threads() {
  const int n = g_threads.load(std::memory_order_relaxed);
  if (n > 0) return n;
  // OMP_NUM_THREADS was checked against 1 .. kMaxThreads; OpenMP's own default (all CPUs) is
  // capped too, for a machine with more CPUs than that.
  if (const int e = env::knobs().omp_threads; e > 0) return e;
  return std::clamp(omp_get_max_threads(), 1, env::kMaxThreads);
}

void set_num_threads(int n) {
  check(n >= 1 && n <= env::kMaxThreads, "threads: {} is not accepted (expected a thread count in 1 .. {})",
        n, env::kMaxThreads);
  g_threads.store(n, std::memory_order_relaxed);
}

int resolve_threads(int threads) {
  check_arg(threads >= 0, "threads", "{} is negative; pass 0 for ridge's default or a count >= 1", threads);
  return threads == 0 ? get_num_threads() : threads;
}

}  // namespace ridge
