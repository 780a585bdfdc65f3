// Grouped-query attention against the multi-head model it is a special case of: a model whose k and v
// heads are shared by groups of query heads computes exactly what a multi-head model computes when each
// query head's k and v weights are copies of its group's. So the GQA model with weights W and the
// multi-head model with k_proj and v_proj rows tiled from W must give the same loss and logits, the same
// gradients for every other tensor, and k and v gradients equal to the multi-head ones summed over each
// group. Every precision (fp32, bf16, fp16), both attention paths, every ISA path, and the fp64 model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "ridge/core/cpu.hpp"
#include "ridge/model/model.hpp"

namespace rm = ridge::model;

namespace {

rm::ModelConfig gqa_config(int64_t kv_heads) {
  rm::ModelConfig c;
  c.vocab_size = 41;
  c.context_length = 21;
  c.d_model = 64;
  c.num_layers = 2;
  c.num_heads = 4;  // d_head 16, FlashAttention's smallest
  c.num_kv_heads = kv_heads;
  c.d_ff = 72;
  return c;
}

bool is_kv_proj(const std::string& name) {
  return name.find("attn.k_proj") != std::string::npos || name.find("attn.v_proj") != std::string::npos;
}

// The multi-head model's weights from the GQA model's: k_proj and v_proj rows of query head h are the
// rows of kv head h / group; every other tensor as it is.
template <typename S>
void tile_weights(const rm::TransformerLM<S>& gqa, rm::TransformerLM<S>& mha) {
  const rm::ModelConfig& c = gqa.config();
  const int64_t dh = c.d_head(), D = c.d_model, group = c.num_heads / c.kv_heads();
  auto& g = const_cast<rm::TransformerLM<S>&>(gqa);
  for (const auto& t : mha.tensors()) {
    const auto src = g.param(t.name);
    auto dst = mha.param(t.name);
    if (!is_kv_proj(t.name)) {
      std::copy(src.begin(), src.end(), dst.begin());
      continue;
    }
    for (int64_t h = 0; h < c.num_heads; ++h)
      std::copy_n(src.begin() + (h / group) * dh * D, dh * D, dst.begin() + h * dh * D);
  }
}

// The multi-head gradient in the GQA model's shape: k and v rows summed over each group.
template <typename S>
std::vector<double> folded_grad(const rm::TransformerLM<S>& mha, const rm::ModelConfig& gqa,
                                const std::string& name) {
  auto& m = const_cast<rm::TransformerLM<S>&>(mha);
  const auto g = m.grad(name);
  if (!is_kv_proj(name)) return {g.begin(), g.end()};
  const int64_t dh = gqa.d_head(), D = gqa.d_model, group = gqa.num_heads / gqa.kv_heads();
  std::vector<double> out(static_cast<size_t>(gqa.kv_heads() * dh * D), 0.0);
  for (int64_t h = 0; h < gqa.num_heads; ++h)
    for (int64_t i = 0; i < dh * D; ++i)
      out[static_cast<size_t>((h / group) * dh * D + i)] +=
          static_cast<double>(g[static_cast<size_t>(h * dh * D + i)]);
  return out;
}

template <typename A>
double max_abs(const A& a) {
  double m = 0;
  for (auto x : a) m = std::max(m, std::abs(static_cast<double>(x)));
  return m;
}
template <typename A, typename B>
double max_diff(const A& a, const B& b) {
  double m = 0;
  for (size_t i = 0; i < b.size(); ++i)
    m = std::max(m, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  return m;
}

// Runs both models on the same batch and holds GQA to the folded multi-head results within `bound`
// of each tensor's scale.
template <typename S>
void expect_gqa_equals_tiled_mha(int64_t kv, rm::Precision p, rm::AttentionPath path, double bound) {
  const rm::ModelConfig gc = gqa_config(kv);
  rm::ModelConfig mc = gc;
  mc.num_kv_heads = 0;
  rm::TransformerLM<S> gqa(gc, p, path), mha(mc, p, path);
  gqa.init(3);
  std::mt19937 gen(5);
  std::normal_distribution<double> nd(0.0, 0.1);
  for (const auto& t : gqa.tensors())  // norm weights away from 1
    if (t.shape.size() == 1)
      for (auto& w : gqa.param(t.name)) w = static_cast<S>(1.0 + nd(gen));
  tile_weights(gqa, mha);

  const int64_t B = 2, T = 21;
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(gc.vocab_size - 1));
  std::vector<int32_t> x(static_cast<size_t>(B * T)), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = tok(gen), y[i] = tok(gen);

  gqa.zero_grad();
  mha.zero_grad();
  const double lg = static_cast<double>(gqa.forward(x.data(), y.data(), B, T));
  const double lm = static_cast<double>(mha.forward(x.data(), y.data(), B, T));
  EXPECT_NEAR(lg, lm, bound * std::abs(lm));
  const std::vector<double> logits_m(mha.logits().begin(), mha.logits().end());
  EXPECT_LE(max_diff(gqa.logits(), logits_m), bound * max_abs(logits_m));
  gqa.backward();
  mha.backward();
  for (const auto& t : gqa.tensors()) {
    const auto want = folded_grad(mha, gc, t.name);
    ASSERT_EQ(static_cast<int64_t>(want.size()), t.numel) << t.name;
    EXPECT_LE(max_diff(gqa.grad(t.name), want), bound * max_abs(want)) << t.name;
    EXPECT_GT(max_abs(want), 0.0) << t.name;
  }
}

}  // namespace

// fp32: the two models' GEMMs have other widths (D + 2 Dkv against 3D columns) and the GQA backward sums
// dk, dv over a group inside the attention kernel where the multi-head one sums them in the weight
// GEMM, so only the order of fp32 additions differs: each of the ~12 reductions per layer (length at most
// k = max(N, D, F, V)) by k u, u = 2^-24, as in ModelGradients.Fp32MatchesFp64OnEveryIsaPath. Rounded
// operands (bf16, fp16): an operand whose fp32 value moved by that much can round to the neighbouring
// bf16 or fp16 value, an error of one unit (2^-8, 2^-11 relative) in that element; allowed: 4 units of
// each tensor's scale. A query head reading another group's kv head is off by O(1).
TEST(GroupedQueryAttention, EqualsMultiHeadWithSharedWeightsEveryPrecisionAndPath) {
  const rm::ModelConfig c = gqa_config(1);
  const double k = static_cast<double>(std::max({int64_t{2 * 21}, c.d_model, c.d_ff, c.vocab_size}));
  const double fp32_bound = 4.0 * (12.0 * static_cast<double>(c.num_layers) + 6.0) * k * std::ldexp(1.0, -24);
  const auto saved = ridge::cpu::active_isa();
  for (const auto isa : ridge::cpu::supported_isas()) {
    ridge::cpu::set_isa(isa);
    for (const int64_t kv : {2, 1})
      for (const auto path : {rm::AttentionPath::flash, rm::AttentionPath::math})
        for (const auto p : {rm::Precision::fp32, rm::Precision::bf16, rm::Precision::fp16}) {
          SCOPED_TRACE(std::string(ridge::cpu::isa_name(isa)) + " kv_heads " + std::to_string(kv) + " " +
                       rm::attention_path_name(path) + " " + rm::precision_name(p));
          const double bound = p == rm::Precision::fp32   ? fp32_bound
                               : p == rm::Precision::bf16 ? 4 * std::ldexp(1.0, -8)
                                                          : 4 * std::ldexp(1.0, -11);
          expect_gqa_equals_tiled_mha<float>(kv, p, path, bound);
        }
  }
  ridge::cpu::set_isa(saved);
}

// The fp64 reference model (the math path in double): the same identity to within double rounding.
TEST(GroupedQueryAttention, EqualsMultiHeadWithSharedWeightsFp64) {
  for (const int64_t kv : {2, 1}) {
    SCOPED_TRACE(kv);
    expect_gqa_equals_tiled_mha<double>(kv, rm::Precision::fp32, rm::AttentionPath::math, 1e-12);
  }
}
