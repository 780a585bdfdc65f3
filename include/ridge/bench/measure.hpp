// Timing: warm-up, timed samples until a count and a minimum time are reached, statistics.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

namespace ridge::bench {

struct Options {
  int warmup = 3;           // untimed calls before the first sample (caches, page faults, clocks)
  int iters = 10;           // at least this many timed samples...
  double min_time_s = 0.0;  // ...and keep sampling until their total reaches this
  double max_time_s = 0.0;  // stop once the timed total exceeds this, even below iters (0: no cap);
                            // at least one sample is always taken
  // Called before each clock read, so asynchronous work (another thread, a device) is finished
  // before the clock is read, the way torch.cuda.synchronize() is used. Empty: nothing to wait for.
  std::function<void()> sync;
};

// All in seconds, over the timed samples only.
struct Stats {
  size_t n = 0;
  double mean = 0, stddev = 0;  // sample standard deviation (n - 1); 0 for one sample
  double median = 0, min = 0, max = 0;
  double p10 = 0, p90 = 0;  // linear interpolation between order statistics (numpy's default)
  double cv = 0;            // stddev / mean
};

// Statistics of arbitrary samples; an empty span gives n = 0 and zeros.
Stats compute_stats(std::span<const double> samples);
// The q-quantile (0..1) of samples by linear interpolation; the samples need not be sorted.
double quantile(std::span<const double> samples, double q);

struct Measurement {
  std::vector<double> samples;  // seconds per call, in the order taken
  Stats stats;
  int warmup = 0;  // untimed calls made
  double median_ms() const { return stats.median * 1e3; }
  double min_ms() const { return stats.min * 1e3; }
};

// Runs fn `warmup` times untimed, then times single calls (sync hook before each clock read) until
// at least `iters` samples and `min_time_s` of timed work, or until `max_time_s`. Bad options
// (negative counts, iters < 1, negative times) throw ridge::Error naming the field.
Measurement measure(const std::function<void()>& fn, const Options& options = {});

// Keeps the compiler from discarding a value the timed code computed, or the writes before it.
template <typename T>
inline void do_not_optimize(const T& value) {
  asm volatile("" : : "r,m"(value) : "memory");
}
template <typename T>
inline void do_not_optimize(T& value) {
  asm volatile("" : "+m"(value) : : "memory");
}
// Makes every pending write to memory count as observed.
inline void clobber_memory() { asm volatile("" : : : "memory"); }

}  // namespace ridge::bench
