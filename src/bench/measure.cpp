#include "ridge/bench/measure.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "ridge/core/error.hpp"

namespace ridge::bench {

namespace {
constexpr size_t kMaxSamples = 1'000'000;
}

double quantile(std::span<const double> samples, double q) {
  check(q >= 0.0 && q <= 1.0, "quantile: q = {} must be in [0, 1]", q);
  if (samples.empty()) return 0.0;
  std::vector<double> s(samples.begin(), samples.end());
  std::sort(s.begin(), s.end());
  const double pos = q * static_cast<double>(s.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, s.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return s[lo] + (s[hi] - s[lo]) * frac;
}

Stats compute_stats(std::span<const double> samples) {
  Stats st;
  st.n = samples.size();
  if (st.n == 0) return st;
  double sum = 0;
  for (double x : samples) sum += x;
  st.mean = sum / static_cast<double>(st.n);
  if (st.n > 1) {
    double ss = 0;
    for (double x : samples) ss += (x - st.mean) * (x - st.mean);
    st.stddev = std::sqrt(ss / static_cast<double>(st.n - 1));
  }
  const auto [mn, mx] = std::minmax_element(samples.begin(), samples.end());
  st.min = *mn;
  st.max = *mx;
  st.median = quantile(samples, 0.5);
  st.p10 = quantile(samples, 0.1);
  st.p90 = quantile(samples, 0.9);
  st.cv = st.mean != 0 ? st.stddev / st.mean : 0;
  return st;
}

Measurement measure(const std::function<void()>& fn, const Options& o) {
  check(static_cast<bool>(fn), "measure: the function to time is empty");
  check(o.warmup >= 0, "measure: warmup = {} must be >= 0", o.warmup);
  check(o.iters >= 1, "measure: iters = {} must be >= 1", o.iters);
  check(o.min_time_s >= 0 && std::isfinite(o.min_time_s), "measure: min_time_s = {} must be >= 0", o.min_time_s);
  check(o.max_time_s >= 0 && std::isfinite(o.max_time_s), "measure: max_time_s = {} must be >= 0 (0: no cap)",
        o.max_time_s);
  using clock = std::chrono::steady_clock;
  const auto sync = [&] {
    if (o.sync) o.sync();
  };
  Measurement m;
  for (int i = 0; i < o.warmup; ++i) fn();
  m.warmup = o.warmup;
  double total = 0;
  m.samples.reserve(static_cast<size_t>(o.iters));
  for (;;) {
    sync();
    const auto t0 = clock::now();
    fn();
    sync();
    const auto t1 = clock::now();
    const double dt = std::chrono::duration<double>(t1 - t0).count();
    m.samples.push_back(dt);
    total += dt;
    if (o.max_time_s > 0 && total >= o.max_time_s) break;
    if (static_cast<int>(m.samples.size()) >= o.iters && total >= o.min_time_s) break;
    // A tiny fn under a long min_time would otherwise grow the sample vector without bound.
    if (m.samples.size() >= std::max<size_t>(static_cast<size_t>(o.iters), kMaxSamples)) break;
  }
  m.stats = compute_stats(m.samples);
  return m;
}

}  // namespace ridge::bench
