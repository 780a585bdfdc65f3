// Sampling (ridge/generate/sample.hpp). Weights w_i = exp((l_i - max) / T) in double, so a temperature near 0
// or a logit far below the maximum underflows to 0 instead of overflowing. Tokens are ordered by logit
// (equal to ordering by probability, since exp is monotone) and then by index, exactly: ties are equal
// logits, never an artefact of rounding in exp.
#include "ridge/generate/sample.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "ridge/core/error.hpp"
#include "core/check.hpp"

namespace ridge::generate {

using text::Rng;
namespace {

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The largest logit and the lowest index holding it, after checking every logit (a vectorisable pass for
// the maximum and for NaN or +inf; the offending index is looked for only when there is one).
struct Max {
  float value;
  int64_t index;
};
Max check_logits(std::span<const float> logits) {
  check_arg(!logits.empty(), "logits", "no logits (a vocabulary of 0 tokens)");
  check_arg(logits.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()), "logits",
            "{} logits: a token id must fit in int32", logits.size());
  constexpr float inf = std::numeric_limits<float>::infinity();
  float mx = -inf;
  bool bad = false;
  for (const float l : logits) {
    bad |= (l != l) | (l == inf);
    mx = l > mx ? l : mx;
  }
  if (bad)
    for (size_t i = 0; i < logits.size(); ++i)
      check_arg(logits[i] == logits[i] && logits[i] != inf, "logits",
                "logits[{}] is {} (a logit must be finite, or -inf to mask its token)", i, logits[i]);
  check_arg(mx > -inf, "logits", "every one of the {} logits is -inf: no token can be drawn", logits.size());
  size_t i = 0;
  while (logits[i] != mx) ++i;
  return {mx, static_cast<int64_t>(i)};
}

// Higher logit first, then lower index: a strict total order on the tokens.
struct ByLogit {
  const float* l;
  bool operator()(int32_t a, int32_t b) const { return l[a] > l[b] || (l[a] == l[b] && a < b); }
};

// What sample_token and sampling_distribution share: the weights of the kept tokens and which they are.
struct Prepared {
  bool greedy = false;
  int32_t argmax = 0;
  bool all = true;                       // every token is kept: `kept` is unused, every w[i] is set
  std::vector<int32_t>* kept = nullptr;  // otherwise the kept tokens (w[i] is set for these only)
  std::vector<double>* w = nullptr;      // unnormalised weights exp((l - max) / T)
  double mass = 0;                       // the kept tokens' weight
};

// Scratch kept per thread: a 50k vocabulary would otherwise allocate (and fault in) about 1 MB per token.
struct Scratch {
  std::vector<double> w;
  std::vector<int32_t> kept, ties, in_bin;
  std::vector<float> values;
  std::vector<double> bin_mass;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// The nucleus of `cands` (their weights in w, summing to `mass`): the shortest run of them in ByLogit order
// whose weight reaches `target`, left in `cands`; returns its weight. A bucket pass finds the bucket of
// (max - logit) / T where the running mass crosses the target, so only that bucket's tokens are sorted: every
// token of a higher bucket has a strictly higher logit and is kept, every token of a lower one is not.
double nucleus(std::vector<int32_t>& cands, const std::vector<double>& w, const float* l, float mx, double t,
               double target) {
  const ByLogit by{l};
  auto prefix = [&](std::vector<int32_t>& v, size_t from, double cum) {
    std::sort(v.begin() + static_cast<std::ptrdiff_t>(from), v.end(), by);
    size_t end = from;
    while (end < v.size() && cum < target) cum += w[static_cast<size_t>(v[end++])];
    // Rounding can leave the running sum a hair short of the target: then the whole run stays.
    v.resize(end);
    return cum;
  };
  if (cands.size() <= 1024) return prefix(cands, 0, 0.0);
  constexpr int kBins = 2048;
  constexpr double kPerNat = 32;  // bucket width 1/32 in (max - logit) / T; beyond 64 the weight is < 1e-27
  auto bin = [&](int32_t i) {
    const double x = (static_cast<double>(mx) - l[i]) / t * kPerNat;  // +inf for a masked token
    return x < kBins - 1 ? static_cast<int>(x) : kBins - 1;
  };
  Scratch& s = scratch();
  s.bin_mass.assign(kBins, 0.0);
  for (int32_t i : cands) s.bin_mass[static_cast<size_t>(bin(i))] += w[static_cast<size_t>(i)];
  int cross = 0;
  double below = 0;  // the weight of the buckets before `cross`
  while (cross < kBins - 1 && below + s.bin_mass[static_cast<size_t>(cross)] < target)
    below += s.bin_mass[static_cast<size_t>(cross++)];
  s.in_bin.clear();
  size_t kept = 0;
  for (int32_t i : cands) {
    const int b = bin(i);
    if (b < cross)
      cands[kept++] = i;
    else if (b == cross)
      s.in_bin.push_back(i);
  }
  cands.resize(kept);
  const double sum = prefix(s.in_bin, 0, below);
  cands.insert(cands.end(), s.in_bin.begin(), s.in_bin.end());
  return sum;
}

Prepared prepare(std::span<const float> logits, const SamplingParams& p) {
  p.validate();
  Prepared r;
  const Max m = check_logits(logits);
  r.argmax = static_cast<int32_t>(m.index);
  if (p.temperature == 0) {
    r.greedy = true;
    return r;
  }
  Scratch& s = scratch();
  const size_t n = logits.size();
  const float* l = logits.data();
  const double mx = m.value, t = p.temperature;
  s.w.resize(n);
  r.w = &s.w;
  r.kept = &s.kept;
  auto weight = [&](size_t i) {
    return s.w[i] = std::exp((static_cast<double>(l[i]) - mx) / t);
  };  // -inf -> 0
  const bool top_k = p.top_k > 0 && static_cast<uint64_t>(p.top_k) < n, top_p = p.top_p < 1;
  double mass = 0;
  if (!top_k) {
    for (size_t i = 0; i < n; ++i) mass += weight(i);
    r.mass = mass;
    if (!top_p) return r;
    s.kept.resize(n);
    for (size_t i = 0; i < n; ++i) s.kept[i] = static_cast<int32_t>(i);
  } else {
    // The k-th largest logit; the kept tokens are those above it and, of those equal to it, the lowest
    // indices. Weights only for them. A small k keeps a min-heap of the k largest so far (one predictable
    // comparison per token: a selection's partitioning mispredicts about every other one); a large k selects
    // on a copy of the values.
    const size_t k = static_cast<size_t>(p.top_k);
    float kth;
    if (k <= n / 16) {
      s.values.assign(logits.begin(), logits.begin() + static_cast<std::ptrdiff_t>(k));
      std::make_heap(s.values.begin(), s.values.end(), std::greater<float>());
      for (size_t i = k; i < n; ++i)
        if (l[i] > s.values.front()) {
          std::pop_heap(s.values.begin(), s.values.end(), std::greater<float>());
          s.values.back() = l[i];
          std::push_heap(s.values.begin(), s.values.end(), std::greater<float>());
        }
      kth = s.values.front();
    } else {
      s.values.assign(logits.begin(), logits.end());
      std::nth_element(s.values.begin(), s.values.begin() + static_cast<std::ptrdiff_t>(k - 1),
                       s.values.end(), std::greater<float>());
      kth = s.values[k - 1];
    }
    s.kept.clear();
    s.ties.clear();
    for (size_t i = 0; i < n; ++i) {
      if (l[i] > kth)
        s.kept.push_back(static_cast<int32_t>(i));
      else if (l[i] == kth && s.ties.size() < k)
        s.ties.push_back(static_cast<int32_t>(i));
    }
    s.kept.insert(s.kept.end(), s.ties.begin(),
                  s.ties.begin() + static_cast<std::ptrdiff_t>(k - s.kept.size()));
    for (int32_t i : s.kept) mass += weight(static_cast<size_t>(i));
  }
  r.all = false;
  r.mass = top_p ? nucleus(s.kept, s.w, l, m.value, t, p.top_p * mass) : mass;
  return r;
}

}  // namespace

void SamplingParams::validate() const {
  check_arg(std::isfinite(temperature) && temperature >= 0, "temperature",
            "{} is not a temperature (accepted: a finite number >= 0; 0 is greedy)", temperature);
  check_arg(top_p > 0 && top_p <= 1, "top_p", "{} is not in (0, 1] (1 keeps every token)", top_p);
  check_arg(top_k >= 0, "top_k", "{} is negative (accepted: 0 for off, or the number of tokens to keep)",
            top_k);
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& p, Rng& rng) {
  const Prepared r = prepare(logits, p);
  const double u = rng.uniform();
  if (r.greedy) return r.argmax;
  const std::vector<double>& w = *r.w;
  const double target = u * r.mass;  // in [0, mass)
  double cum = 0;
  int32_t last = r.argmax;  // the answer if rounding leaves cum <= target after the last token
  auto visit = [&](int32_t i) {
    const double wi = w[static_cast<size_t>(i)];
    if (wi <= 0) return false;
    last = i;
    cum += wi;
    return cum > target;
  };
  if (r.all) {
    for (size_t i = 0; i < w.size(); ++i)
      if (visit(static_cast<int32_t>(i))) return static_cast<int32_t>(i);
  } else {
    for (int32_t i : *r.kept)
      if (visit(i)) return i;
  }
  return last;
}

void sampling_distribution(std::span<const float> logits, const SamplingParams& p, std::span<double> probs) {
  check_arg(probs.size() == logits.size(), "probs", "holds {} values for {} logits", probs.size(),
            logits.size());
  const Prepared r = prepare(logits, p);
  std::fill(probs.begin(), probs.end(), 0.0);
  if (r.greedy) {
    probs[static_cast<size_t>(r.argmax)] = 1;
    return;
  }
  const std::vector<double>& w = *r.w;
  if (r.all) {
    for (size_t i = 0; i < w.size(); ++i) probs[i] = w[i] / r.mass;
  } else {
    for (int32_t i : *r.kept) probs[static_cast<size_t>(i)] = w[static_cast<size_t>(i)] / r.mass;
  }
}

Rng sampling_rng(uint64_t seed, uint64_t sequence, uint64_t step) {
  return Rng(mix64(mix64(mix64(seed) ^ sequence) ^ step));
}

}  // namespace ridge::generate
