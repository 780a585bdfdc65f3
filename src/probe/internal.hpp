// Internal helpers shared by the probe's translation units.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "ridge/core/memory.hpp"
#include "ridge/probe.hpp"

namespace ridge::probe::internal {

// One buffer per thread, first touched by its thread; sweeps reuse prefixes of them.
struct ThreadBuffers {
  ThreadBuffers(int threads, int64_t bytes_per_thread);
  int64_t bytes;
  std::vector<Buffer<std::byte>> bufs;
};

// Trials of read (or in-place read+write) bandwidth over the first `bytes_per_thread` of each
// thread's buffer; bytes/s per trial, all threads together. Gives up on clean trials after
// `budget_s` seconds and on anything after `hard_deadline` (a clock_now() time).
Trials bandwidth_trials(ThreadBuffers& b, int64_t bytes_per_thread, bool update, int trials, double seconds,
                        double budget_s, double hard_deadline);
// measure_peak with a hard deadline.
Trials peak_trials(const PeakKernel& k, int chains, int threads, int trials, double seconds, double budget_s,
                   double hard_deadline);
// Seconds on a monotonic clock.
double clock_now();
const char* bandwidth_isa();
double median(std::vector<double> v);

}  // namespace ridge::probe::internal
