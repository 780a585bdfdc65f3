// The committed PyTorch reference (tests/data/model_tiny_ref.safetensors, from
// tools/make_model_reference.py), read through SafetensorsFile and checked for the facts that hold without
// running the model: every parameter is there with the config's shape and has its gradients and final value,
// the stored losses equal the cross-entropy recomputed here in double from the stored logits, gradients have
// the structure the loss implies, and the learning rates follow the schedule. This holds the file and the
// reader to each other before the model tests rely on them.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ridge/build_paths.h"  // RIDGE_SOURCE_DIR
#include "ridge/model/config.hpp"
#include "ridge/model/safetensors.hpp"
#include "core/json.hpp"
#include "model/json.hpp"

namespace {

using namespace ridge;
using namespace ridge::model;
using Shape = std::vector<int64_t>;

const SafetensorsFile& ref() {
  static const SafetensorsFile f =
      SafetensorsFile::load(std::string(RIDGE_SOURCE_DIR) + "/tests/data/model_tiny_ref.safetensors");
  return f;
}

ModelConfig config() {
  return nlohmann::json::parse(ref().metadata().at("config")).get<ModelConfig>();
}

// The state_dict names and shapes the issue fixes, built from the config (k_proj and v_proj with
// kv_heads * d_head rows: d_model unless grouped-query).
std::map<std::string, Shape> expected_params(const ModelConfig& c) {
  const int64_t v = c.vocab_size, d = c.d_model, f = c.d_ff, dkv = c.kv_heads() * c.d_head();
  std::map<std::string, Shape> p = {
      {"token_embeddings.weight", {v, d}}, {"ln_final.weight", {d}}, {"lm_head.weight", {v, d}}};
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    for (const char* proj : {"q_proj", "output_proj"}) p[l + "attn." + proj + ".weight"] = {d, d};
    for (const char* proj : {"k_proj", "v_proj"}) p[l + "attn." + proj + ".weight"] = {dkv, d};
    p[l + "ln1.weight"] = {d};
    p[l + "ln2.weight"] = {d};
    p[l + "ffn.w1.weight"] = {f, d};
    p[l + "ffn.w2.weight"] = {d, f};
    p[l + "ffn.w3.weight"] = {f, d};
  }
  return p;
}

// Mean over tokens of logsumexp(z) - z[target], in double.
double cross_entropy(const std::vector<float>& logits, const std::vector<float>& targets, int64_t vocab) {
  const size_t n = targets.size();
  double sum = 0;
  for (size_t t = 0; t < n; ++t) {
    const float* z = logits.data() + t * static_cast<size_t>(vocab);
    double mx = z[0];
    for (int64_t j = 1; j < vocab; ++j) mx = std::max(mx, static_cast<double>(z[j]));
    double s = 0;
    for (int64_t j = 0; j < vocab; ++j) s += std::exp(z[j] - mx);
    sum += mx + std::log(s) - z[static_cast<int64_t>(targets[t])];
  }
  return sum / static_cast<double>(n);
}

TEST(ReferenceFile, ConfigAndParametersMatchTheIssue) {
  const ModelConfig c = config();
  EXPECT_EQ(c, (ModelConfig{256, 16, 64, 2, 4, 160, 10000.0}));
  const auto params = expected_params(c);
  const auto listed =
      nlohmann::json::parse(ref().metadata().at("param_names")).get<std::vector<std::string>>();
  EXPECT_EQ(std::set<std::string>(listed.begin(), listed.end()).size(), params.size());
  int64_t total = 0;
  for (const auto& [name, shape] : params) {
    SCOPED_TRACE(name);
    EXPECT_NE(std::find(listed.begin(), listed.end(), name), listed.end());
    for (const std::string prefix : {"", "fp32.grad.", "bf16.grad.", "train.final."}) {
      ASSERT_TRUE(ref().contains(prefix + name)) << prefix + name;
      EXPECT_EQ(ref().at(prefix + name).dtype, DType::f32);
      EXPECT_EQ(ref().at(prefix + name).shape, shape);
    }
    total += ref().at(name).numel();
  }
  EXPECT_EQ(total, c.param_count());
  // Norm weights are perturbed from 1 (so their gradients are not trivial), linear weights lie within the
  // truncation at 3 std.
  const auto ln = ref().to_f64("layers.0.ln1.weight");
  EXPECT_GT(*std::max_element(ln.begin(), ln.end()) - *std::min_element(ln.begin(), ln.end()), 0.05);
  const double std_w1 = std::sqrt(2.0 / (c.d_model + c.d_ff));
  for (double w : ref().to_f64("layers.1.ffn.w1.weight")) EXPECT_LE(std::abs(w), 3 * std_w1 + 1e-7);
}

TEST(ReferenceFile, StoredLossesEqualTheCrossEntropyOfTheStoredLogits) {
  const ModelConfig c = config();
  const Shape bt = {2, c.context_length};
  for (const char* name : {"inputs", "targets"}) {
    EXPECT_EQ(ref().at(name).dtype, DType::i32);
    EXPECT_EQ(ref().at(name).shape, bt);
    for (double t : ref().to_f64(name)) EXPECT_TRUE(t >= 0 && t < static_cast<double>(c.vocab_size));
  }
  const auto targets = ref().to_f32("targets");
  for (const std::string p : {"fp32", "bf16"}) {
    SCOPED_TRACE(p);
    EXPECT_EQ(ref().at(p + ".logits").shape, (Shape{2, c.context_length, c.vocab_size}));
    ASSERT_EQ(ref().at(p + ".loss").numel(), 1);
    const double stored = ref().to_f64(p + ".loss")[0];
    const double recomputed = cross_entropy(ref().to_f32(p + ".logits"), targets, c.vocab_size);
    // fp32 log-sum-exp over 256 terms and a mean over 32 tokens: a few float ulps of ~6.
    EXPECT_NEAR(stored, recomputed, 1e-5 * recomputed);
  }
  // bf16 logits are rounded activations of the same model: close to fp32, not equal.
  const auto a = ref().to_f64("fp32.logits"), b = ref().to_f64("bf16.logits");
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += a[i] * a[i];
  EXPECT_GT(num, 0.0);
  EXPECT_LT(std::sqrt(num / den), 0.05);
}

TEST(ReferenceFile, GradientsHaveTheStructureTheLossImplies) {
  const ModelConfig c = config();
  const int64_t v = c.vocab_size, d = c.d_model;
  for (const std::string p : {"fp32", "bf16"}) {
    SCOPED_TRACE(p);
    // The embedding gradient is non-zero exactly on the rows of tokens that occur in the input.
    const auto inputs = ref().to_f64("inputs");
    const std::set<int64_t> seen(inputs.begin(), inputs.end());
    const auto ge = ref().to_f64(p + ".grad.token_embeddings.weight");
    for (int64_t row = 0; row < v; ++row) {
      double s = 0;
      for (int64_t j = 0; j < d; ++j) s += std::abs(ge[static_cast<size_t>(row * d + j)]);
      EXPECT_EQ(s > 0, seen.count(row) == 1) << "row " << row;
    }
    // d loss / d logits sums to zero over the vocabulary for each token (softmax minus one-hot), so the
    // lm_head gradient, sum over tokens of dlogits (x) h, has columns that sum to zero over its rows. Under
    // bf16 the product rounds dlogits and h to bf16 first, so the sum is zero only to within the rounding
    // of each term: at most 2 * 2^-8 of the sum of magnitudes (two roundings, unit roundoff 2^-8).
    const double tol = p == "fp32" ? 1e-4 : 2.0 / 256;
    const auto gh = ref().to_f64(p + ".grad.lm_head.weight");
    for (int64_t j = 0; j < d; ++j) {
      double s = 0, m = 0;
      for (int64_t row = 0; row < v; ++row) {
        s += gh[static_cast<size_t>(row * d + j)];
        m += std::abs(gh[static_cast<size_t>(row * d + j)]);
      }
      EXPECT_LT(std::abs(s), tol * m) << "column " << j;
    }
  }
  // bf16 gradients approximate the fp32 ones.
  for (const auto& [name, shape] : expected_params(c)) {
    const auto a = ref().to_f64("fp32.grad." + name), b = ref().to_f64("bf16.grad." + name);
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += a[i] * a[i];
    EXPECT_GT(den, 0.0) << name;
    EXPECT_LT(std::sqrt(num / den), 0.1) << name;
  }
}

TEST(ReferenceFile, TrainingTrajectoryFollowsTheScheduleAndMovesTheWeights) {
  const auto tr = nlohmann::json::parse(ref().metadata().at("train"));
  const int64_t steps = tr.at("steps");
  const double lo = tr.at("lr_min"), hi = tr.at("lr_max");
  const double tw = tr.at("warmup_iters"), tc = tr.at("cosine_cycle_iters");
  const auto lr = ref().to_f64("train.lr");
  ASSERT_EQ(static_cast<int64_t>(lr.size()), steps);
  const double pi = std::acos(-1.0);
  for (int64_t t = 0; t < steps; ++t) {
    const double x = static_cast<double>(t);
    const double want = x < tw    ? x / tw * hi
                        : x <= tc ? lo + 0.5 * (1 + std::cos(pi * (x - tw) / (tc - tw))) * (hi - lo)
                                  : lo;
    EXPECT_NEAR(lr[static_cast<size_t>(t)], want, 1e-7 * hi) << "step " << t;
  }
  EXPECT_EQ(ref().at("train.inputs").shape, (Shape{steps, 2, 16}));
  EXPECT_EQ(ref().at("train.targets").shape, (Shape{steps, 2, 16}));
  for (const char* n : {"train.losses", "train.grad_norm"}) {
    EXPECT_EQ(ref().at(n).shape, (Shape{steps}));
    for (double x : ref().to_f64(n)) EXPECT_TRUE(std::isfinite(x) && x > 0) << n;
  }
  // Step 0 has lr 0, so the first weights only move from step 1 on; with clipping to norm 1 and Adam's
  // normalised steps, no weight moves more than sum(lr) * (1 + wd * |w|) / (1 - beta1) in 10 steps.
  double sum_lr = 0;
  for (double x : lr) sum_lr += x;
  const double b1 = tr.at("betas")[0], wd = tr.at("weight_decay");
  for (const auto& [name, shape] : expected_params(config())) {
    const auto w0 = ref().to_f64(name), w1 = ref().to_f64("train.final." + name);
    double moved = 0;
    for (size_t i = 0; i < w0.size(); ++i) {
      moved = std::max(moved, std::abs(w1[i] - w0[i]));
      EXPECT_LE(std::abs(w1[i] - w0[i]), sum_lr * (1 + wd * std::abs(w0[i])) / (1 - b1)) << name;
    }
    EXPECT_GT(moved, 0.0) << name;
  }
}

// The grouped-query cases (tests/data/model_gqa_ref.safetensors, tools/make_model_reference.py --gqa):
// heads 4 sharing 2 kv heads and 1; every tensor with the shape its config implies (k_proj and v_proj
// [kv_heads * d_head, d_model]), and each stored loss the cross-entropy of its stored logits.
TEST(ReferenceFile, GqaCasesHaveTheirShapesAndConsistentLosses) {
  static const SafetensorsFile f =
      SafetensorsFile::load(std::string(RIDGE_SOURCE_DIR) + "/tests/data/model_gqa_ref.safetensors");
  const auto cases = nlohmann::json::parse(f.metadata().at("cases")).get<std::vector<std::string>>();
  EXPECT_EQ(cases, (std::vector<std::string>{"kv2", "kv1"}));
  for (const std::string& k : cases) {
    SCOPED_TRACE(k);
    const ModelConfig c = nlohmann::json::parse(f.metadata().at("config." + k)).get<ModelConfig>();
    EXPECT_EQ(c.num_heads, 4);
    EXPECT_EQ(c.kv_heads(), k == "kv2" ? 2 : 1);
    int64_t total = 0;
    for (const auto& [name, shape] : expected_params(c)) {
      for (const std::string prefix : {"", "fp32.grad.", "bf16.grad."}) {
        ASSERT_TRUE(f.contains(k + "." + prefix + name)) << prefix + name;
        EXPECT_EQ(f.at(k + "." + prefix + name).shape, shape) << prefix + name;
      }
      total += f.at(k + "." + name).numel();
    }
    EXPECT_EQ(total, c.param_count());
    const auto targets = f.to_f32(k + ".targets");
    for (const std::string p : {"fp32", "bf16"}) {
      const double stored = f.to_f64(k + "." + p + ".loss")[0];
      EXPECT_NEAR(stored, cross_entropy(f.to_f32(k + "." + p + ".logits"), targets, c.vocab_size),
                  1e-5 * stored)
          << p;
    }
  }
}

}  // namespace
