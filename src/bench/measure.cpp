#include "ridge/bench/measure.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "ridge/core/error.hpp"
#include "core/check.hpp"

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
  check(o.min_time_s >= 0 && std::isfinite(o.min_time_s), "measure: min_time_s = {} must be >= 0",
        o.min_time_s);
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

std::vector<Measurement> measure_interleaved(const std::vector<std::function<void()>>& fns,
                                             const std::vector<Options>& options, int rounds) {
  check(!fns.empty(), "measure_interleaved: no functions to time");
  check(options.size() == 1 || options.size() == fns.size(),
        "measure_interleaved: options has {} entries (expected 1 or one per function, {})", options.size(),
        fns.size());
  check(rounds >= 1, "measure_interleaved: rounds = {} must be >= 1", rounds);
  std::vector<Measurement> out(fns.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t f = 0; f < fns.size(); ++f) {
      const Options& opt = options.size() == 1 ? options[0] : options[f];
      Options o = opt;
      o.iters = std::max(1, (opt.iters + rounds - 1) / rounds);
      o.min_time_s = opt.min_time_s / rounds;
      o.max_time_s = opt.max_time_s > 0 ? opt.max_time_s / rounds : 0;
      if (r > 0) o.warmup = std::min(opt.warmup, 1);
      auto m = measure(fns[f], o);
      out[f].samples.insert(out[f].samples.end(), m.samples.begin(), m.samples.end());
      out[f].warmup += m.warmup;
      out[f].round_medians.push_back(m.stats.median);
    }
  }
  for (auto& m : out) m.stats = compute_stats(m.samples);
  return out;
}

Spread spread_of_figures(std::span<const double> figures, double threshold) {
  Spread s;
  if (figures.size() < 2) return s;
  const auto [mn, mx] = std::minmax_element(figures.begin(), figures.end());
  const double med = quantile(figures, 0.5);
  if (!(*mn > 0) || !(med > 0)) return s;
  s.ratio = *mx / *mn;
  s.pct = 100.0 * (*mx - *mn) / med;
  s.unstable = s.ratio > threshold;
  return s;
}

Spread spread_of(const Measurement& m, double threshold) {
  if (m.round_medians.size() >= 2) return spread_of_figures(m.round_medians, threshold);
  if (m.samples.size() < 2) return {};
  const double f[2] = {quantile(m.samples, 0.1), quantile(m.samples, 0.9)};
  return spread_of_figures(f, threshold);
}

}  // namespace ridge::bench
