// The model's backward pass against central finite differences in fp64, and the fp32 model (ridge's
// GEMMs and FlashAttention, on every ISA path) against that fp64 model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "ridge/core/cpu.hpp"
#include "ridge/model/model.hpp"
#include "ridge/model/moe.hpp"

namespace rm = ridge::model;

namespace {

rm::ModelConfig tiny_config() {
  rm::ModelConfig c;
  c.vocab_size = 13;
  c.context_length = 7;
  c.d_model = 8;
  c.num_layers = 2;
  c.num_heads = 2;
  c.d_ff = 12;
  return c;
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = dist(gen);
  return t;
}

// Norm weights away from 1, so their gradients are exercised with a non-trivial scale.
template <typename S>
void perturb_norms(rm::TransformerLM<S>& m, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> n(0.0, 0.1);
  for (const auto& t : m.tensors())
    if (t.shape.size() == 1)
      for (auto& w : m.param(t.name)) w = static_cast<S>(1.0 + n(gen));
}

// Every parameter of a model: d loss / d p from backward equals (L(p + h) - L(p - h)) / 2h, on every
// entry of the small tensors and 40 (the first and last among them) of the larger ones.
void expect_backward_matches_finite_differences(const rm::ModelConfig& c) {
  rm::TransformerLM<double> m(c);
  m.init(7);
  perturb_norms(m, 3);
  const int64_t B = 2, T = 7;
  const auto x = random_tokens(B * T, c.vocab_size, 1);
  const auto y = random_tokens(B * T, c.vocab_size, 2);

  m.zero_grad();
  m.forward(x.data(), y.data(), B, T);
  m.backward();
  const std::vector<double> g(m.grads().begin(), m.grads().end());

  const double h = 1e-5;
  auto params = m.params();
  int checked = 0;
  std::mt19937 pick(17);
  for (const auto& t : m.tensors()) {
    std::vector<int64_t> idx;
    if (t.numel <= 40) {
      for (int64_t i = 0; i < t.numel; ++i) idx.push_back(i);
    } else {
      idx = {0, t.numel - 1};
      std::uniform_int_distribution<int64_t> u(0, t.numel - 1);
      while (idx.size() < 40) idx.push_back(u(pick));
    }
    for (const int64_t i : idx) {
      double& p = params[static_cast<size_t>(t.offset + i)];
      const double keep = p;
      p = keep + h;
      const double lp = m.forward(x.data(), y.data(), B, T);
      p = keep - h;
      const double lm = m.forward(x.data(), y.data(), B, T);
      p = keep;
      const double fd = (lp - lm) / (2 * h);
      const double an = g[static_cast<size_t>(t.offset + i)];
      ASSERT_NEAR(an, fd, 1e-7 + 1e-6 * std::abs(fd)) << t.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GE(checked, 40 * 10);
}

}  // namespace

// A 2-layer model. With h = 1e-5 the truncation error is O(h^2 |L'''|) ~ 1e-10 and the cancellation
// error ~ eps64 |L| / h ~ 1e-11, so a 1e-7 absolute tolerance (plus 1e-6 relative) leaves a wide margin
// while any wrong term in a backward formula moves a gradient by far more.
TEST(ModelGradients, BackwardMatchesFiniteDifferencesFp64) {
  expect_backward_matches_finite_differences(tiny_config());
}

// Grouped-query attention: 4 query heads (d_head 2) sharing 2 kv heads, and all sharing 1. The k and v
// gradients sum over the query heads that read them: a kernel that kept one head's share, or wrote
// each head's over the last, is off by the others'.
TEST(ModelGradients, GqaBackwardMatchesFiniteDifferencesFp64) {
  for (const int64_t kv : {2, 1}) {
    SCOPED_TRACE(kv);
    rm::ModelConfig c = tiny_config();
    c.num_heads = 4;
    c.num_kv_heads = kv;
    expect_backward_matches_finite_differences(c);
  }
}

// The gradient of a sequence shorter than the context and of a batch of one (different N, T).
TEST(ModelGradients, ShortSequenceFiniteDifferencesFp64) {
  rm::ModelConfig c = tiny_config();
  c.num_layers = 1;
  rm::TransformerLM<double> m(c);
  m.init(11);
  const int64_t B = 1, T = 3;
  const auto x = random_tokens(B * T, c.vocab_size, 5);
  const auto y = random_tokens(B * T, c.vocab_size, 6);
  m.zero_grad();
  m.forward(x.data(), y.data(), B, T);
  m.backward();
  const std::vector<double> g(m.grads().begin(), m.grads().end());
  auto params = m.params();
  const double h = 1e-5;
  for (size_t i = 0; i < params.size(); i += 3) {
    const double keep = params[i];
    params[i] = keep + h;
    const double lp = m.forward(x.data(), y.data(), B, T);
    params[i] = keep - h;
    const double lm = m.forward(x.data(), y.data(), B, T);
    params[i] = keep;
    ASSERT_NEAR(g[i], (lp - lm) / (2 * h), 1e-7 + 1e-6 * std::abs(g[i])) << "param " << i;
  }
}

namespace {

// The fp32 model (ridge's GEMMs, FlashAttention or the math path) against the fp64 model with the same
// weights, on every ISA path this machine runs. Bound: each of the ~12 GEMM-like reductions per layer
// adds at most k * u relative error (u = 2^-24, k <= max(N, D, F, V) = the longest reduction), so
// |g32 - g64| <= ops * k * u * max|g64| per tensor; with ops = 12 * layers + 6 that is ~1e-4 here, and we
// allow 4x of it. A wrong kernel result is off by O(1) of the tensor's scale.
void expect_fp32_matches_fp64(const rm::ModelConfig& c, int64_t B, int64_t T) {
  const int64_t N = B * T;
  rm::TransformerLM<double> ref(c);
  ref.init(5);
  perturb_norms(ref, 9);
  const auto x = random_tokens(N, c.vocab_size, 3);
  const auto y = random_tokens(N, c.vocab_size, 4);
  ref.zero_grad();
  const double loss64 = ref.forward(x.data(), y.data(), B, T);
  const std::vector<double> logits64(ref.logits().begin(), ref.logits().end());
  ref.backward();

  const double u = std::ldexp(1.0, -24);
  const double k = static_cast<double>(std::max({N, c.d_model, c.d_ff, c.vocab_size}));
  const double ops = 12.0 * static_cast<double>(c.num_layers) + 6.0;
  const double bound = 4.0 * ops * k * u;

  const auto saved = ridge::cpu::active_isa();
  for (const auto isa : ridge::cpu::supported_isas()) {
    ridge::cpu::set_isa(isa);
    for (const auto path : {rm::AttentionPath::flash, rm::AttentionPath::math}) {
      SCOPED_TRACE(std::string(ridge::cpu::isa_name(isa)) + " " + rm::attention_path_name(path));
      rm::TransformerLM<float> m(c, rm::Precision::fp32, path);
      auto p32 = m.params();
      auto p64 = ref.params();
      for (size_t i = 0; i < p32.size(); ++i) p32[i] = static_cast<float>(p64[i]);
      m.zero_grad();
      const float loss32 = m.forward(x.data(), y.data(), B, T);
      EXPECT_NEAR(loss32, loss64, bound * std::abs(loss64));
      double lmax = 0, lerr = 0;
      for (size_t i = 0; i < logits64.size(); ++i) {
        lmax = std::max(lmax, std::abs(logits64[i]));
        lerr = std::max(lerr, std::abs(static_cast<double>(m.logits()[i]) - logits64[i]));
      }
      EXPECT_LE(lerr, bound * lmax);
      m.backward();
      for (const auto& t : m.tensors()) {
        double gmax = 0, err = 0;
        for (int64_t i = 0; i < t.numel; ++i) {
          const double g64 = ref.grads()[static_cast<size_t>(t.offset + i)];
          gmax = std::max(gmax, std::abs(g64));
          err = std::max(err,
                         std::abs(static_cast<double>(m.grads()[static_cast<size_t>(t.offset + i)]) - g64));
        }
        EXPECT_LE(err, bound * gmax) << t.name;
        EXPECT_GT(gmax, 0.0) << t.name << " has an all-zero gradient";
      }
    }
  }
  ridge::cpu::set_isa(saved);
}

}  // namespace

TEST(ModelGradients, Fp32MatchesFp64OnEveryIsaPath) {
  rm::ModelConfig c = tiny_config();
  c.d_model = 32;  // FlashAttention needs a head dimension >= 16
  c.d_ff = 48;
  c.vocab_size = 37;
  c.context_length = 19;
  expect_fp32_matches_fp64(c, 2, 19);
}

// Grouped-query attention through FlashAttention and the math path: 4 query heads of 16 sharing 2 kv
// heads, and 1, against the fp64 model (whose math path shares them the same way, in double).
TEST(ModelGradients, GqaFp32MatchesFp64OnEveryIsaPath) {
  for (const int64_t kv : {2, 1}) {
    SCOPED_TRACE(kv);
    rm::ModelConfig c = tiny_config();
    c.d_model = 64;
    c.num_heads = 4;
    c.num_kv_heads = kv;
    c.d_ff = 48;
    c.vocab_size = 37;
    c.context_length = 19;
    expect_fp32_matches_fp64(c, 2, 19);
  }
}

namespace {

// A tiny MoE model (issue 40): 4 experts of width 6, top-2, attention included (the MoE block's own
// reference test leaves it out).
rm::ModelConfig tiny_moe_config() {
  rm::ModelConfig c = tiny_config();
  c.num_experts = 4, c.top_k = 2, c.d_expert = 6, c.aux_loss_coef = 0.05;
  return c;
}

}  // namespace

// The MoE block's backward (the router through the gate weights and the auxiliary loss, the experts, the
// shared experts, the input) against central differences of the whole model's loss, auxiliary loss
// included: both gates, both balances, with and without shared experts, MoE in every layer or one.
// The routing is piecewise constant, and no choice of these weights lies within h of a tie.
TEST(ModelGradients, MoeBackwardMatchesFiniteDifferencesFp64) {
  for (const auto gate : {rm::moe::Gate::softmax, rm::moe::Gate::sigmoid})
    for (const auto balance : {rm::moe::Balance::aux, rm::moe::Balance::bias}) {
      rm::ModelConfig c = tiny_moe_config();
      c.router = gate;
      c.balance = balance;
      c.num_shared_experts = balance == rm::moe::Balance::aux ? 1 : 0;
      c.moe_layers = gate == rm::moe::Gate::softmax ? std::vector<int64_t>{} : std::vector<int64_t>{1};
      SCOPED_TRACE(std::string(rm::moe::gate_name(gate)) + " " + rm::moe::balance_name(balance));
      expect_backward_matches_finite_differences(c);
    }
}

// The fp32 MoE model on every ISA path and both attention paths against the fp64 one, at the dense
// model's bound.
TEST(ModelGradients, MoeFp32MatchesFp64OnEveryIsaPath) {
  rm::ModelConfig c = tiny_moe_config();
  c.d_model = 32, c.d_ff = 48, c.d_expert = 24, c.vocab_size = 37, c.context_length = 19;  // d_head 16
  c.num_shared_experts = 1, c.router = rm::moe::Gate::sigmoid;
  expect_fp32_matches_fp64(c, 2, 19);
}
