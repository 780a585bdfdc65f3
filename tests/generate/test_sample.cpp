// Sampling (ridge/generate/sample.hpp) against references written here: the argmax, top-k by a stable sort,
// top-p's smallest set by enumerating every subset of a small vocabulary, and the frequencies of 10^5 draws
// against softmax(logits / T) (filtered where top-k or top-p is on) by a chi-square test at p = 0.001.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "ridge/core/error.hpp"
#include "ridge/generate/sample.hpp"

namespace rg = ridge::generate;
namespace rt = ridge::text;

namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();

rg::SamplingParams params(double t, double top_p = 1.0, int64_t top_k = 0) {
  rg::SamplingParams p;
  p.temperature = t;
  p.top_p = top_p;
  p.top_k = top_k;
  return p;
}

// softmax(logits / t) in long double, written apart from the library (its own max, its own sums).
std::vector<long double> softmax(const std::vector<float>& l, double t) {
  long double m = -INFINITY;
  for (float x : l) m = std::max<long double>(m, x);
  std::vector<long double> q(l.size());
  long double s = 0;
  for (size_t i = 0; i < l.size(); ++i) s += q[i] = std::isinf(l[i]) ? 0.0L : std::exp((l[i] - m) / t);
  for (auto& x : q) x /= s;
  return q;
}

// Token ids by descending logit, ties by index (a stable sort of the ids on the logit alone).
std::vector<int> by_rank(const std::vector<float>& l) {
  std::vector<int> ids(l.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return l[a] > l[b]; });
  return ids;
}

// The reference distribution: softmax, then the first k by rank, then the shortest prefix by rank whose mass
// (of the top-k renormalised) reaches top_p; renormalised. Prefix sums over the rank order.
std::vector<long double> reference(const std::vector<float>& l, const rg::SamplingParams& p) {
  const auto q = softmax(l, p.temperature);
  auto ids = by_rank(l);
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < ids.size()) ids.resize(static_cast<size_t>(p.top_k));
  long double mass = 0;
  for (int i : ids) mass += q[i];
  if (p.top_p < 1) {
    long double cum = 0;
    size_t n = 0;
    while (n < ids.size() && cum < p.top_p * mass) cum += q[ids[n++]];
    ids.resize(n);
    mass = cum;
  }
  std::vector<long double> r(l.size(), 0);
  for (int i : ids) r[i] = q[i] / mass;
  return r;
}

std::vector<double> distribution(const std::vector<float>& l, const rg::SamplingParams& p) {
  std::vector<double> probs(l.size());
  rg::sampling_distribution(l, p, probs);
  return probs;
}

// The upper 0.001 quantile of chi-square with k degrees of freedom by Wilson and Hilferty's cube-root normal
// approximation, k (1 - 2/(9k) + z sqrt(2/(9k)))^3, with z the standard normal's upper 0.001 quantile found
// by bisection on erfc.
double chi_square_critical(int k, double alpha = 0.001) {
  double lo = 0, hi = 10;
  for (int i = 0; i < 200; ++i) {
    const double z = (lo + hi) / 2;
    (0.5 * std::erfc(z / std::sqrt(2.0)) > alpha ? lo : hi) = z;
  }
  const double z = (lo + hi) / 2, a = 2.0 / (9.0 * k);
  return k * std::pow(1 - a + z * std::sqrt(a), 3);
}

// Draws n tokens with one generator and tests their frequencies against `expect` (which sums to 1): bins with
// an expected count below 5 pooled into one; the statistic against the critical value for (bins - 1) degrees
// of freedom. Also checks that no token outside the support is ever drawn.
void chi_square(const std::vector<float>& l, const rg::SamplingParams& p,
                const std::vector<long double>& expect, uint64_t seed, int n = 100000) {
  rt::Rng rng(seed);
  std::vector<int64_t> count(l.size(), 0);
  for (int i = 0; i < n; ++i) {
    const int32_t t = rg::sample_token(l, p, rng);
    ASSERT_GE(t, 0);
    ASSERT_LT(static_cast<size_t>(t), l.size());
    ASSERT_GT(expect[t], 0) << "token " << t << " is outside the kept set";
    ++count[t];
  }
  double stat = 0, pooled_e = 0, pooled_o = 0;
  int bins = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    const double e = static_cast<double>(expect[i]) * n;
    if (e <= 0) continue;
    if (e < 5) {
      pooled_e += e;
      pooled_o += static_cast<double>(count[i]);
      continue;
    }
    stat += (count[i] - e) * (count[i] - e) / e;
    ++bins;
  }
  if (pooled_e > 0) {
    stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
    ++bins;
  }
  ASSERT_GE(bins, 2);
  EXPECT_LT(stat, chi_square_critical(bins - 1))
      << "T " << p.temperature << " top_p " << p.top_p << " top_k " << p.top_k << ", " << bins << " bins";
}

std::vector<float> normal_logits(size_t n, double sd, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0, static_cast<float>(sd));
  std::vector<float> l(n);
  for (auto& x : l) x = d(g);
  return l;
}

std::string arg_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ridge::Error& e) {
    return e.argument();
  }
  return "(no error)";
}

}  // namespace

TEST(Sample, ChiSquareCriticalValue) {
  // Tabulated upper 0.001 points of chi-square: 10.83 (1), 29.59 (10), 86.66 (50); Wilson-Hilferty is within
  // 1% from 10 degrees of freedom, within 5% at 1.
  EXPECT_NEAR(chi_square_critical(10), 29.59, 0.3);
  EXPECT_NEAR(chi_square_critical(50), 86.66, 0.5);
  EXPECT_NEAR(chi_square_critical(1), 10.83, 0.6);
}

TEST(Sample, TemperatureZeroIsTheArgmaxTiesToTheLowestIndex) {
  rt::Rng rng(1);
  for (uint64_t s = 0; s < 50; ++s) {
    auto l = normal_logits(1 + s % 37, 1.0, s);
    const auto ids = by_rank(l);
    EXPECT_EQ(rg::sample_token(l, params(0), rng), ids[0]);
    const auto d = distribution(l, params(0, 0.3, 5));  // top-k and top-p change nothing for greedy
    for (size_t i = 0; i < l.size(); ++i) EXPECT_EQ(d[i], static_cast<int>(i) == ids[0] ? 1.0 : 0.0);
  }
  const std::vector<float> ties{1, 3, kMasked, 3, -2, 3};
  EXPECT_EQ(rg::sample_token(ties, params(0), rng), 1);
  const std::vector<float> masked_first{kMasked, kMasked, -5, -5};
  EXPECT_EQ(rg::sample_token(masked_first, params(0), rng), 2);
  // A greedy draw uses one uniform like any other, so the generator advances alike whatever the parameters.
  rt::Rng a(7), b(7);
  rg::sample_token(ties, params(0), a);
  b.uniform();
  EXPECT_EQ(a.state(), b.state());
  // A temperature so small that every other weight underflows: the argmax, every time.
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(rg::sample_token(std::vector<float>{0.5f, 0.5001f, 0.2f}, params(1e-30), rng), 1);
}

// Every subset of an 8-token vocabulary: the kept set is as small as any set whose mass reaches top_p,
// reaches it, and is that many tokens of highest probability, ties to the lower index.
TEST(Sample, TopPKeepsTheSmallestSetByBruteForce) {
  std::mt19937_64 g(3);
  std::uniform_real_distribution<double> up(0.05, 1.0), ut(0.3, 2.0);
  int checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const size_t n = 8;
    std::vector<float> l(n);
    // Few distinct values, so that equal probabilities (ties) are common; now and then a masked token.
    for (auto& x : l) x = static_cast<float>(static_cast<int>(g() % 5)) * 0.75f;
    if (trial % 5 == 0) l[g() % n] = kMasked;
    const double top_p = up(g), t = ut(g);
    const auto q = softmax(l, t);
    // The smallest subset size reaching top_p, over all 2^8 subsets; skip a draw whose top_p sits within
    // 1e-9 of some subset's mass, where rounding could decide either way.
    size_t smallest = n + 1;
    bool near = false;
    for (uint32_t mask = 1; mask < (1u << n); ++mask) {
      long double mass = 0;
      for (size_t i = 0; i < n; ++i)
        if (mask >> i & 1) mass += q[i];
      near = near || std::fabs(static_cast<double>(mass) - top_p) < 1e-9;
      if (mass >= top_p) smallest = std::min<size_t>(smallest, std::popcount(mask));
    }
    if (near) continue;
    ++checked;
    const auto d = distribution(l, params(t, top_p));
    std::vector<int> kept;
    long double kept_mass = 0;
    for (size_t i = 0; i < n; ++i)
      if (d[i] > 0) kept.push_back(static_cast<int>(i)), kept_mass += q[i];
    EXPECT_EQ(kept.size(), smallest) << "trial " << trial;
    EXPECT_GE(kept_mass, top_p);
    // Ties by index: the kept set is the first `smallest` tokens by rank.
    auto first = by_rank(l);
    first.resize(smallest);
    std::sort(first.begin(), first.end());
    EXPECT_EQ(kept, first) << "trial " << trial;
    // Renormalised: q / (the kept mass).
    for (int i : kept) EXPECT_NEAR(d[i], static_cast<double>(q[i] / kept_mass), 1e-12);
  }
  EXPECT_GT(checked, 300);
}

TEST(Sample, TopKKeepsTheKMostProbableTiesByIndex) {
  const std::vector<float> l{1, 3, 3, 3, 0, kMasked, 2};
  const auto d = distribution(l, params(1.0, 1.0, 2));
  EXPECT_GT(d[1], 0);
  EXPECT_GT(d[2], 0);
  for (size_t i : {0, 3, 4, 5, 6}) EXPECT_EQ(d[i], 0) << i;
  EXPECT_DOUBLE_EQ(d[1], 0.5);
  // k at or past the vocabulary keeps everything.
  const auto all = distribution(l, params(1.0, 1.0, 7));
  const auto q = softmax(l, 1.0);
  for (size_t i = 0; i < l.size(); ++i) EXPECT_NEAR(all[i], static_cast<double>(q[i]), 1e-15);
  // Random logits, k against a stable sort, with top-p on the top-k renormalised.
  for (uint64_t s = 0; s < 40; ++s) {
    const auto r = normal_logits(50, 2.0, 100 + s);
    const auto p = params(0.8, s % 2 ? 0.7 : 1.0, 1 + static_cast<int64_t>(s % 13));
    const auto got = distribution(r, p);
    const auto want = reference(r, p);
    for (size_t i = 0; i < r.size(); ++i)
      EXPECT_NEAR(got[i], static_cast<double>(want[i]), 1e-12) << s << " " << i;
  }
}

TEST(Sample, FrequenciesMatchSoftmaxByChiSquare) {
  const auto l = normal_logits(20, 2.0, 11);
  for (double t : {1.0, 0.7, 2.5})
    chi_square(l, params(t), reference(l, params(t)), 1000 + static_cast<uint64_t>(t * 10));
  // The reference with top-k and top-p applied by the test's own sort, not the library's.
  for (const auto& p : {params(1.0, 1.0, 7), params(0.9, 0.8), params(1.3, 0.9, 12)})
    chi_square(l, p, reference(l, p), 77);
  // Masked tokens are never drawn.
  auto m = l;
  m[3] = m[8] = m[19] = kMasked;
  chi_square(m, params(1.0), reference(m, params(1.0)), 5);
  // A flat vocabulary of 3000 where top-p keeps thousands of tokens (more than the library sorts outright).
  const auto flat = normal_logits(3000, 0.3, 12);
  const auto p = params(1.0, 0.9);
  const auto ref = reference(flat, p);
  EXPECT_GT(std::count_if(ref.begin(), ref.end(), [](long double x) { return x > 0; }), 2000);
  chi_square(flat, p, ref, 99);
}

TEST(Sample, LargeVocabularyDistributionMatchesTheReference) {
  auto l = normal_logits(50257, 3.0, 21);
  for (const auto& p : {params(1.0), params(0.8, 0.95), params(1.0, 1.0, 40), params(0.6, 0.5, 1000),
                        params(1.0, 0.7, 20000), params(1e-3, 0.9)}) {
    const auto got = distribution(l, p);
    const auto want = reference(l, p);
    double diff = 0;
    for (size_t i = 0; i < l.size(); ++i) {
      ASSERT_EQ(got[i] > 0, want[i] > 0) << i;
      diff = std::max(diff, std::fabs(got[i] - static_cast<double>(want[i])));
    }
    EXPECT_LT(diff, 1e-12);
  }
  // Many exact ties (logits on a grid of 1/8), some masked: the set kept at the crossing is cut by index.
  std::mt19937_64 g(8);
  for (auto& x : l) x = static_cast<float>(static_cast<int>(g() % 64)) / 8;
  for (size_t i = 0; i < l.size(); i += 97) l[i] = kMasked;
  std::uniform_real_distribution<double> u(0.05, 0.99);
  for (int trial = 0; trial < 20; ++trial) {
    // top-k off, small (a heap of the k largest) and large (a selection).
    const int64_t k = trial % 3 == 0 ? 0 : trial % 3 == 1 ? 300 + trial : 5000 + trial;
    const auto p = params(0.5 + trial * 0.1, trial % 4 ? u(g) : 1.0, k);
    const auto got = distribution(l, p);
    const auto want = reference(l, p);
    for (size_t i = 0; i < l.size(); ++i) {
      ASSERT_EQ(got[i] > 0, want[i] > 0) << "trial " << trial << " token " << i;
      ASSERT_NEAR(got[i], static_cast<double>(want[i]), 1e-12);
    }
  }
}

TEST(Sample, SameSeedSameTokensAtAnyThreadCount) {
  const auto l = normal_logits(300, 1.5, 5);
  const auto p = params(0.9, 0.95, 100);
  rt::Rng a(42), b(42), c(43);
  std::vector<int32_t> x, y, z;
  for (int i = 0; i < 2000; ++i) {
    x.push_back(rg::sample_token(l, p, a));
    y.push_back(rg::sample_token(l, p, b));
    z.push_back(rg::sample_token(l, p, c));
  }
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
  // One generator per (seed, sequence, step): 16 sequences of 64 steps drawn in order on one thread, and in
  // reverse order over several threads, give the same tokens.
  const int S = 16, T = 64;
  std::vector<int32_t> serial(S * T), parallel(S * T);
  for (int s = 0; s < S; ++s)
    for (int t = 0; t < T; ++t) {
      rt::Rng r = rg::sampling_rng(9, static_cast<uint64_t>(s), static_cast<uint64_t>(t));
      serial[s * T + t] = rg::sample_token(l, p, r);
    }
#pragma omp parallel for schedule(dynamic, 1) num_threads(4)
  for (int k = S * T - 1; k >= 0; --k) {
    rt::Rng r = rg::sampling_rng(9, static_cast<uint64_t>(k / T), static_cast<uint64_t>(k % T));
    parallel[k] = rg::sample_token(l, p, r);
  }
  EXPECT_EQ(serial, parallel);
  // Distinct (seed, sequence, step) give distinct streams.
  EXPECT_NE(rg::sampling_rng(9, 0, 1).state(), rg::sampling_rng(9, 1, 0).state());
  EXPECT_NE(rg::sampling_rng(9, 0, 0).state(), rg::sampling_rng(10, 0, 0).state());
}

TEST(Sample, BadParametersAndLogitsNameTheArgument) {
  const std::vector<float> l{0, 1, 2};
  rt::Rng rng(0);
  auto draw = [&](rg::SamplingParams p, std::vector<float> x = {0, 1, 2}) {
    return arg_of([&] { rg::sample_token(x, p, rng); });
  };
  EXPECT_EQ(draw(params(-0.5)), "temperature");
  EXPECT_EQ(draw(params(std::nan(""))), "temperature");
  EXPECT_EQ(draw(params(INFINITY)), "temperature");
  EXPECT_EQ(draw(params(1, 0)), "top_p");
  EXPECT_EQ(draw(params(1, 1.5)), "top_p");
  EXPECT_EQ(draw(params(1, -0.1)), "top_p");
  EXPECT_EQ(draw(params(1, std::nan(""))), "top_p");
  EXPECT_EQ(draw(params(1, 1, -1)), "top_k");
  EXPECT_EQ(draw(params(1), {0, INFINITY, 1}), "logits");
  EXPECT_EQ(draw(params(0), {0, std::nanf(""), 1}), "logits");
  EXPECT_EQ(draw(params(1), {kMasked, kMasked}), "logits");
  EXPECT_EQ(draw(params(1), {}), "logits");
  std::vector<double> probs(2);
  EXPECT_EQ(arg_of([&] { rg::sampling_distribution(l, params(1), probs); }), "probs");
  try {
    rg::sample_token(std::vector<float>{0, 1, NAN}, params(1), rng);
  } catch (const ridge::Error& e) {
    EXPECT_NE(std::string(e.what()).find("logits[2]"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(params(0, 1, 0).validate());
}
