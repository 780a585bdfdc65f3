// MoE routing (ridge/model/moe.hpp) against references written here from the definitions: a full sort
// of every token's scores in long double, the gate weights and the auxiliary loss as formulas, their
// gradients by central differences of those formulas, the layouts by a stable sort of (expert, token),
// and the expected distinct experts by simulation.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ridge/core/error.hpp"
#include "ridge/core/threads.hpp"
#include "ridge/model/moe.hpp"

namespace {

using namespace ridge::model::moe;
using LD = long double;

std::vector<float> random_logits(int64_t t, int64_t e, uint32_t seed, bool ties) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, 2.0f);
  std::vector<float> l(static_cast<size_t>(t * e));
  for (auto& v : l) v = n(g);
  if (ties) {
    // Whole rows equal, and rows where pairs of experts share a value.
    for (int64_t i = 0; i < t; i += 5) std::fill_n(l.begin() + i * e, e, 0.25f);
    for (int64_t i = 2; i < t; i += 7)
      for (int64_t x = 0; x + 1 < e; x += 2)
        l[static_cast<size_t>(i * e + x + 1)] = l[static_cast<size_t>(i * e + x)];
  }
  return l;
}

// The gate's scores of one token in long double: softmax probabilities or sigmoids.
std::vector<LD> scores(const float* l, int64_t e, Gate gate) {
  std::vector<LD> q(static_cast<size_t>(e));
  if (gate == Gate::softmax) {
    LD m = l[0];
    for (int64_t i = 1; i < e; ++i) m = std::max(m, static_cast<LD>(l[i]));
    LD s = 0;
    for (int64_t i = 0; i < e; ++i) s += q[static_cast<size_t>(i)] = std::exp(static_cast<LD>(l[i]) - m);
    for (auto& v : q) v /= s;
  } else {
    for (int64_t i = 0; i < e; ++i) q[static_cast<size_t>(i)] = 1 / (1 + std::exp(-static_cast<LD>(l[i])));
  }
  return q;
}

struct Ref {
  std::vector<int32_t> expert;
  std::vector<LD> weight;
};

Ref reference_route(const std::vector<float>& logits, int64_t t, int64_t e, int64_t k, Gate gate,
                    const std::vector<float>& bias) {
  Ref r;
  for (int64_t i = 0; i < t; ++i) {
    const auto q = scores(logits.data() + i * e, e, gate);
    std::vector<std::pair<double, int32_t>> key;
    for (int64_t x = 0; x < e; ++x)
      key.emplace_back(static_cast<double>(q[static_cast<size_t>(x)]) +
                           (bias.empty() ? 0.0 : bias[static_cast<size_t>(x)]),
                       static_cast<int32_t>(x));
    // A full sort: key descending, then expert id ascending.
    std::sort(key.begin(), key.end(), [](auto a, auto b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    LD s = 0;
    for (int64_t j = 0; j < k; ++j) s += q[static_cast<size_t>(key[static_cast<size_t>(j)].second)];
    for (int64_t j = 0; j < k; ++j) {
      r.expert.push_back(key[static_cast<size_t>(j)].second);
      r.weight.push_back(q[static_cast<size_t>(key[static_cast<size_t>(j)].second)] / s);
    }
  }
  return r;
}

struct Case {
  int64_t t, e, k;
  Gate gate;
  bool ties, bias;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  for (Gate g : {Gate::softmax, Gate::sigmoid})
    for (bool ties : {false, true}) {
      c.push_back({37, 8, 2, g, ties, false});
      c.push_back({37, 8, 1, g, ties, false});
      c.push_back({37, 8, 8, g, ties, false});  // top-k = E
      c.push_back({129, 64, 8, g, ties, true});
      c.push_back({3, 1, 1, g, ties, false});  // one expert
    }
  return c;
}

std::vector<float> random_bias(int64_t e, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  std::vector<float> b(static_cast<size_t>(e));
  for (auto& v : b) v = u(g);
  return b;
}

TEST(MoeRouting, ChoicesAndWeightsMatchAFullSortWithTiesToTheLowerExpert) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(::testing::Message()
                 << "T " << c.t << " E " << c.e << " k " << c.k << " " << gate_name(c.gate)
                 << (c.ties ? " ties" : "") << (c.bias ? " bias" : ""));
    const auto logits = random_logits(c.t, c.e, 7, c.ties);
    const auto bias = c.bias ? random_bias(c.e, 9) : std::vector<float>{};
    Routing r;
    route(logits, c.t, c.e, c.k, c.gate, bias, r);
    const Ref ref = reference_route(logits, c.t, c.e, c.k, c.gate, bias);
    ASSERT_EQ(r.expert, ref.expert);
    std::vector<int64_t> count(static_cast<size_t>(c.e), 0);
    for (size_t i = 0; i < r.weight.size(); ++i) {
      EXPECT_NEAR(r.weight[i], static_cast<double>(ref.weight[i]),
                  1e-6 * std::max(1.0, static_cast<double>(ref.weight[i])));
      ++count[static_cast<size_t>(ref.expert[i])];
    }
    EXPECT_EQ(r.count, count);
    for (int64_t i = 0; i < c.t; ++i) {
      std::set<int32_t> distinct(r.expert.begin() + i * c.k, r.expert.begin() + (i + 1) * c.k);
      EXPECT_EQ(static_cast<int64_t>(distinct.size()), c.k);
    }
  }
}

TEST(MoeRouting, TheSameAtEveryThreadCount) {
  const int64_t t = 4096, e = 64, k = 8;
  const auto logits = random_logits(t, e, 3, true);
  const auto bias = random_bias(e, 4);
  const int saved = ridge::get_num_threads();
  Routing one, four;
  ridge::set_num_threads(1);
  route(logits, t, e, k, Gate::sigmoid, bias, one);
  ridge::set_num_threads(4);
  route(logits, t, e, k, Gate::sigmoid, bias, four);
  ridge::set_num_threads(saved);
  EXPECT_EQ(one.expert, four.expert);
  EXPECT_EQ(one.weight, four.weight);
}

TEST(MoeRouting, AnExpertWithEveryTokenAndExpertsWithNone) {
  const int64_t t = 50, e = 6;
  std::vector<float> logits(static_cast<size_t>(t * e), -3.0f);
  for (int64_t i = 0; i < t; ++i) logits[static_cast<size_t>(i * e + 4)] = 5.0f;  // expert 4 wins everywhere
  Routing r;
  route(logits, t, e, 1, Gate::softmax, {}, r);
  EXPECT_EQ(r.count, (std::vector<int64_t>{0, 0, 0, 0, t, 0}));
  EXPECT_DOUBLE_EQ(r.load_imbalance(), static_cast<double>(e));
  for (float w : r.weight) EXPECT_EQ(w, 1.0f);  // top-1 normalised: weight 1
  const ContiguousLayout c = contiguous_layout(r, 32);
  EXPECT_EQ(c.rows, 64);  // 50 rows padded to 64; empty experts take none
  EXPECT_EQ(c.offset, (std::vector<int64_t>{0, 0, 0, 0, 0, 64, 64}));
}

// The gate weights of token i as a function of its logits, the choice held fixed.
LD weights_dot(const std::vector<float>& l, int64_t e, const int32_t* ex, int64_t k, Gate gate,
               const float* dw, int64_t x, LD shift) {
  std::vector<LD> u(static_cast<size_t>(k));
  LD s = 0;
  for (int64_t j = 0; j < k; ++j) {
    const LD v = static_cast<LD>(l[static_cast<size_t>(ex[j])]) + (ex[j] == x ? shift : 0);
    s += u[static_cast<size_t>(j)] = gate == Gate::softmax ? std::exp(v) : 1 / (1 + std::exp(-v));
  }
  (void)e;
  LD out = 0;
  for (int64_t j = 0; j < k; ++j) out += dw[j] * u[static_cast<size_t>(j)] / s;
  return out;
}

TEST(MoeRouting, GateBackwardMatchesCentralDifferences) {
  for (Gate gate : {Gate::softmax, Gate::sigmoid})
    for (int64_t k : {1, 2, 8}) {
      SCOPED_TRACE(::testing::Message() << gate_name(gate) << " k " << k);
      const int64_t t = 11, e = 8;
      const auto logits = random_logits(t, e, 21, false);
      Routing r;
      route(logits, t, e, k, gate, {}, r);
      std::vector<float> dw(static_cast<size_t>(t * k));
      std::mt19937 g(5);
      std::normal_distribution<float> n;
      for (auto& v : dw) v = n(g);
      std::vector<float> dl(static_cast<size_t>(t * e));
      gate_backward(logits, r, dw, dl);
      const LD h = 1e-4L;
      for (int64_t i = 0; i < t; ++i) {
        const std::vector<float> row(logits.begin() + i * e, logits.begin() + (i + 1) * e);
        for (int64_t x = 0; x < e; ++x) {
          const LD num = (weights_dot(row, e, r.expert.data() + i * k, k, gate, dw.data() + i * k, x, h) -
                          weights_dot(row, e, r.expert.data() + i * k, k, gate, dw.data() + i * k, x, -h)) /
                         (2 * h);
          EXPECT_NEAR(dl[static_cast<size_t>(i * e + x)], static_cast<double>(num), 1e-5)
              << "token " << i << " expert " << x;
        }
      }
    }
}

// L_aux from its definition, the counts held fixed; `shift` moves one logit.
LD aux_reference(const std::vector<float>& logits, int64_t t, int64_t e, const std::vector<int64_t>& count,
                 Gate gate, LD coef, int64_t at, LD shift) {
  std::vector<LD> p(static_cast<size_t>(e), 0);
  for (int64_t i = 0; i < t; ++i) {
    std::vector<LD> l(static_cast<size_t>(e));
    for (int64_t x = 0; x < e; ++x)
      l[static_cast<size_t>(x)] = logits[static_cast<size_t>(i * e + x)] + (i * e + x == at ? shift : 0);
    std::vector<LD> q(static_cast<size_t>(e));
    LD s = 0;
    for (int64_t x = 0; x < e; ++x)
      s += q[static_cast<size_t>(x)] = gate == Gate::softmax ? std::exp(l[static_cast<size_t>(x)])
                                                             : 1 / (1 + std::exp(-l[static_cast<size_t>(x)]));
    for (int64_t x = 0; x < e; ++x) p[static_cast<size_t>(x)] += q[static_cast<size_t>(x)] / s;
  }
  LD sum = 0;
  for (int64_t x = 0; x < e; ++x)
    sum += static_cast<LD>(count[static_cast<size_t>(x)]) / t * (p[static_cast<size_t>(x)] / t);
  return coef * e * sum;
}

TEST(MoeRouting, AuxLossAndItsGradientMatchTheDefinition) {
  for (Gate gate : {Gate::softmax, Gate::sigmoid}) {
    SCOPED_TRACE(gate_name(gate));
    const int64_t t = 13, e = 6, k = 2;
    const double coef = 0.02, scale = 1.5;
    const auto logits = random_logits(t, e, 31, false);
    Routing r;
    route(logits, t, e, k, gate, {}, r);
    EXPECT_NEAR(aux_loss(logits, r, coef),
                static_cast<double>(aux_reference(logits, t, e, r.count, gate, coef, -1, 0)), 1e-12);
    std::vector<float> dl(static_cast<size_t>(t * e), 0.5f);  // added into
    aux_loss_backward(logits, r, coef, scale, dl);
    const LD h = 1e-4L;
    for (int64_t i = 0; i < t * e; ++i) {
      const LD num = (aux_reference(logits, t, e, r.count, gate, coef, i, h) -
                      aux_reference(logits, t, e, r.count, gate, coef, i, -h)) /
                     (2 * h);
      EXPECT_NEAR(dl[static_cast<size_t>(i)], 0.5 + scale * static_cast<double>(num), 1e-6) << i;
    }
  }
  // A perfect balance gives coef * k: every token's distribution uniform, every expert chosen equally.
  const int64_t t = 8, e = 4, k = 2;
  std::vector<float> logits(static_cast<size_t>(t * e), 0.0f);
  Routing r;
  route(logits, t, e, k, Gate::softmax, {}, r);
  r.count.assign(static_cast<size_t>(e), t * k / e);
  EXPECT_NEAR(aux_loss(logits, r, 0.01), 0.01 * k, 1e-15);
}

TEST(MoeRouting, BiasFallsForTheOverloadedAndRisesForTheIdle) {
  Routing r;
  r.tokens = 6;
  r.experts = 3;
  r.top_k = 1;
  r.count = {4, 2, 0};  // mean 2
  std::vector<float> b = {0.0f, 0.5f, -0.5f};
  update_bias(r, 0.001, b);
  EXPECT_EQ(b, (std::vector<float>{0.0f - 0.001f, 0.5f, -0.5f + 0.001f}));
  EXPECT_THROW(update_bias(r, 0.0, b), ridge::Error);
}

TEST(MoeLayouts, ContiguousAndMaskedMatchAStableSortOfExpertAndToken) {
  for (int64_t align : {1, 4, 32}) {
    SCOPED_TRACE(align);
    const int64_t t = 77, e = 8, k = 2;
    const auto logits = random_logits(t, e, 41, true);
    Routing r;
    route(logits, t, e, k, Gate::softmax, {}, r);
    // (expert, token, slot), stably sorted by expert: the order of the rows within each expert.
    std::vector<std::array<int64_t, 3>> order;
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < k; ++j) order.push_back({r.expert[static_cast<size_t>(i * k + j)], i, j});
    std::stable_sort(order.begin(), order.end(), [](auto a, auto b) { return a[0] < b[0]; });
    const ContiguousLayout c = contiguous_layout(r, align);
    EXPECT_EQ(c.rows % align, 0);
    int64_t start = 0, prev = -1, seen = 0;
    for (const auto& [x, i, j] : order) {
      if (x != prev) {
        if (prev >= 0) start += (seen + align - 1) / align * align;
        seen = 0;
        prev = x;
      }
      // Experts before x took their counts rounded up to the alignment.
      int64_t expect_start = 0;
      for (int64_t y = 0; y < x; ++y)
        expect_start += (r.count[static_cast<size_t>(y)] + align - 1) / align * align;
      EXPECT_EQ(c.row[static_cast<size_t>(i * k + j)], expect_start + seen);
      EXPECT_EQ(c.m_indices[static_cast<size_t>(expect_start + seen)], x);
      ++seen;
    }
    int64_t padding = 0;
    for (int32_t m : c.m_indices) padding += m == -1;
    EXPECT_EQ(padding, c.rows - t * k);
    // Each aligned block holds one expert (and padding).
    for (int64_t b = 0; b < c.rows; b += align) {
      std::set<int32_t> s;
      for (int64_t x = b; x < b + align; ++x)
        if (c.m_indices[static_cast<size_t>(x)] >= 0) s.insert(c.m_indices[static_cast<size_t>(x)]);
      EXPECT_LE(s.size(), 1u);
    }

    const int64_t most = *std::max_element(r.count.begin(), r.count.end());
    const MaskedLayout m = masked_layout(r, most);
    std::vector<int64_t> next(static_cast<size_t>(e), 0);
    for (const auto& [x, i, j] : order)
      EXPECT_EQ(m.row[static_cast<size_t>(i * k + j)], x * most + next[static_cast<size_t>(x)]++);
    for (int64_t x = 0; x < e; ++x)
      EXPECT_EQ(m.masked_m[static_cast<size_t>(x)], r.count[static_cast<size_t>(x)]);
    EXPECT_THROW(masked_layout(r, most - 1), ridge::Error);
  }
}

TEST(MoeLayouts, PermuteCombineAndItsBackwardMatchDirectSums) {
  const int64_t t = 29, e = 5, k = 3, d = 19;
  const auto logits = random_logits(t, e, 51, false);
  Routing r;
  route(logits, t, e, k, Gate::sigmoid, {}, r);
  const ContiguousLayout c = contiguous_layout(r, 8);
  std::mt19937 g(3);
  std::normal_distribution<float> n;
  std::vector<float> x(static_cast<size_t>(t * d)), dy(static_cast<size_t>(t * d));
  for (auto& v : x) v = n(g);
  for (auto& v : dy) v = n(g);
  std::vector<float> xs(static_cast<size_t>(c.rows * d), -7.0f);
  permute_rows(x.data(), d, c.row, r, d, xs.data(), d);
  for (int64_t row = 0; row < c.rows; ++row) {
    if (c.m_indices[static_cast<size_t>(row)] < 0) {
      EXPECT_EQ(xs[static_cast<size_t>(row * d)], -7.0f);  // padding untouched
    }
  }
  // An "expert" per row: ys = (1 + expert) * xs.
  std::vector<float> ys(xs.size(), 0.0f);
  for (int64_t row = 0; row < c.rows; ++row)
    for (int64_t i = 0; i < d; ++i)
      ys[static_cast<size_t>(row * d + i)] =
          static_cast<float>(1 + std::max(0, c.m_indices[static_cast<size_t>(row)])) *
          xs[static_cast<size_t>(row * d + i)];
  std::vector<float> y(static_cast<size_t>(t * d), 100.0f);
  combine_rows(ys.data(), d, c.row, r.weight, r, d, y.data(), d, false);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t q = 0; q < d; ++q) {
      double want = 0;
      for (int64_t j = 0; j < k; ++j)
        want += static_cast<double>(r.weight[static_cast<size_t>(i * k + j)]) *
                (1 + r.expert[static_cast<size_t>(i * k + j)]) * x[static_cast<size_t>(i * d + q)];
      EXPECT_NEAR(y[static_cast<size_t>(i * d + q)], want, 1e-5 * (1 + std::fabs(want)));
    }
  // The backward of permute is the unweighted combine: dx[t] = sum_j dxs[row(t, j)].
  std::vector<float> dx(static_cast<size_t>(t * d));
  combine_rows(ys.data(), d, c.row, {}, r, d, dx.data(), d, false);
  for (int64_t i = 0; i < t; ++i) {
    double want = 0;
    for (int64_t j = 0; j < k; ++j)
      want +=
          (1 + r.expert[static_cast<size_t>(i * k + j)]) * static_cast<double>(x[static_cast<size_t>(i * d)]);
    EXPECT_NEAR(dx[static_cast<size_t>(i * d)], want, 1e-5 * (1 + std::fabs(want)));
  }
  std::vector<float> dys(ys.size(), 0.0f), dw(static_cast<size_t>(t * k));
  combine_rows_backward(dy.data(), d, ys.data(), d, c.row, r, d, dys.data(), d, dw);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t row = c.row[static_cast<size_t>(i * k + j)];
      double dot = 0;
      for (int64_t q = 0; q < d; ++q) {
        dot += static_cast<double>(dy[static_cast<size_t>(i * d + q)]) * ys[static_cast<size_t>(row * d + q)];
        EXPECT_EQ(dys[static_cast<size_t>(row * d + q)],
                  r.weight[static_cast<size_t>(i * k + j)] * dy[static_cast<size_t>(i * d + q)]);
      }
      EXPECT_NEAR(dw[static_cast<size_t>(i * k + j)], dot, 1e-5 * (1 + std::fabs(dot)));
    }
}

TEST(MoeRouting, BadArgumentsNameTheArgument) {
  const std::vector<float> l(8, 0.0f);
  Routing r;
  auto names = [&](auto f, const std::string& arg) {
    try {
      f();
      ADD_FAILURE() << "no error for " << arg;
    } catch (const ridge::Error& err) {
      EXPECT_EQ(std::string(err.what()).rfind(arg + ":", 0), 0u) << err.what();
    }
  };
  names([&] { route(l, 2, 4, 5, Gate::softmax, {}, r); }, "top_k");
  names([&] { route(l, 2, 4, 0, Gate::softmax, {}, r); }, "top_k");
  names([&] { route(l, 8, 0, 1, Gate::softmax, {}, r); }, "experts");
  names([&] { route(l, 3, 4, 1, Gate::softmax, {}, r); }, "logits");
  std::vector<float> nan = l;
  nan[5] = NAN;
  names([&] { route(nan, 2, 4, 1, Gate::sigmoid, {}, r); }, "logits");
  names([&] { route(l, 2, 4, 1, Gate::sigmoid, std::vector<float>(3, 0.0f), r); }, "bias");
  names([&] { parse_gate("tanh"); }, "router");
  names([&] { parse_balance("none", "--balance"); }, "--balance");
  EXPECT_EQ(parse_gate("sigmoid"), Gate::sigmoid);
  EXPECT_EQ(parse_balance("bias"), Balance::bias);
}

}  // namespace
