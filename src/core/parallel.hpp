// parallel_for: a loop over [0, n) on OpenMP threads whose body may throw. The first exception is
// rethrown on the caller's thread once every thread has stopped (an exception must never leave an
// OpenMP region: that is std::terminate).
#pragma once

#include <cstdint>
#include <exception>
#include <mutex>

namespace ridge {

// Runs body(i) for i in [0, n) on `threads` threads, one index at a time (a dynamic schedule: the
// bodies may differ widely in cost). omp_get_thread_num() inside body names the thread.
template <class F>
void parallel_for(int64_t n, int threads, F&& body) {
  std::exception_ptr error;
  std::mutex mu;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) {
    try {
      body(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace ridge
