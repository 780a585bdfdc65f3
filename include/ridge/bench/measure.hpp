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
  // Median of each round when the samples were taken in interleaved rounds (measure_interleaved);
  // empty for a single measure().
  std::vector<double> round_medians;
  double median_ms() const { return stats.median * 1e3; }
  double min_ms() const { return stats.min * 1e3; }
};

// Runs fn `warmup` times untimed, then times single calls (sync hook before each clock read) until
// at least `iters` samples and `min_time_s` of timed work, or until `max_time_s`. Bad options
// (negative counts, iters < 1, negative times) throw ridge::Error naming the field.
Measurement measure(const std::function<void()>& fn, const Options& options = {});

// Times several functions (ridge and its peers) in `rounds` rounds, each round timing every
// function in turn, so a burst of load from other processes hits all of them alike instead of one
// window. `options` holds one Options for all functions or one per function; each round takes
// about 1/rounds of its iters and times, with a short warm-up after the first round. Returns one
// Measurement per function with its samples merged and round_medians filled.
std::vector<Measurement> measure_interleaved(const std::vector<std::function<void()>>& fns,
                                             const std::vector<Options>& options, int rounds = 3);

// How far a measurement's figures disagree. The figures are the round medians when there are at
// least two rounds (a transient slowdown of the machine moves a whole round), else the samples'
// p10 and p90 (single outliers do not count). spread_pct = 100 * (max - min) / median of the
// figures; unstable when max / min exceeds `threshold`: the row's median then describes a machine
// whose speed changed during the run, and is worth rerunning.
struct Spread {
  double pct = 0;
  double ratio = 1;  // max / min of the figures
  bool unstable = false;
};
inline constexpr double kUnstableRatio = 1.3;
Spread spread_of(const Measurement& m, double threshold = kUnstableRatio);
// The same rule on bare figures (seconds): the inputs' max / min and their spread around the median.
Spread spread_of_figures(std::span<const double> figures, double threshold = kUnstableRatio);

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
inline void clobber_memory() {
  asm volatile("" : : : "memory");
}

}  // namespace ridge::bench
