// Mixture of Experts in the roofline (issue 40): the expected distinct experts against the closed form and
// against a Monte-Carlo simulation of a skewed routing (fixed seed); an MoE model's decode step, prefill and
// critical batch against counts made by hand; its training step's ops, active parameters and model FLOPs; the
// expert-parallel all-to-all.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ridge/core/error.hpp"
#include "ridge/roofline.hpp"
#include "ridge/roofline/ddp.hpp"
#include "ridge/roofline/decode.hpp"
#include "ridge/roofline/moe.hpp"

namespace rr = ridge::roofline;
using ridge::DType;

namespace {

// A shape: vocab, d_model, layers, heads, d_ff, kv heads, and the MoE fields (experts 0: dense).
rr::ModelArch arch(int64_t v, int64_t d, int64_t l, int64_t h, int64_t f, int64_t kv, int64_t experts,
                   int64_t top_k, int64_t shared, int64_t d_expert, std::vector<int64_t> moe_layers) {
  return {.vocab_size = v,
          .d_model = d,
          .num_layers = l,
          .num_heads = h,
          .d_ff = f,
          .num_kv_heads = kv,
          .num_experts = experts,
          .top_k = top_k,
          .num_shared_experts = shared,
          .d_expert = d_expert,
          .moe_layers = std::move(moe_layers)};
}

// V=16, D=8, L=2, H=2 (d_head 4), one kv head (kd = 4), F=12; layer 1 is MoE: E=4 experts of width 6, top-2,
// one shared expert (S = 6). Layer 0 stays dense.
rr::ModelArch moe_shape() {
  return arch(16, 8, 2, 2, 12, 1, 4, 2, 1, 6, {1});
}

// moe_shape() without experts: a dense model.
rr::ModelArch dense_shape() {
  return arch(16, 8, 2, 2, 12, 1, 0, 0, 0, 0, {});
}

// A training step of `a` on batch x seq tokens with bf16 operands.
rr::ModelShape step_of(const rr::ModelArch& a, int64_t batch, int64_t seq) {
  rr::ModelShape m;
  static_cast<rr::ModelArch&>(m) = a;
  m.batch = batch;
  m.seq = seq;
  m.operand = DType::bf16;
  return m;
}

rr::InferenceDtypes dtypes(DType weights) {
  return {weights, std::nullopt, std::nullopt, DType::bf16};
}

rr::Chip chip(double bf16_peak, double bandwidth) {
  rr::Chip c;
  c.id = "example";
  c.kind = "gpu";
  c.peak_flops["bf16"] = {bf16_peak, "example"};
  c.peak_flops["fp32"] = {bf16_peak / 4, "example"};
  c.memory.push_back({"hbm", "hbm", {bandwidth, "example"}, std::nullopt});
  return c;
}

double bytes_named(const std::vector<rr::Traffic>& v, const std::string& prefix, bool write = false) {
  double s = 0;
  bool found = false;
  for (const auto& t : v)
    if (t.name.rfind(prefix, 0) == 0 && t.write == write) s += static_cast<double>(t.bytes), found = true;
  EXPECT_TRUE(found) << prefix;
  return s;
}

double flops_named(const rr::InferenceCost& c, const std::string& name) {
  for (const auto& p : c.flops)
    if (p.name == name) return static_cast<double>(p.flops);
  ADD_FAILURE() << "no FLOPs part " << name;
  return -1;
}

// B tokens routed by `route`; the distinct experts they read, averaged over `trials`.
template <typename Route>
double simulated_distinct(int64_t experts, int64_t batch, int trials, Route&& route) {
  double sum = 0;
  for (int t = 0; t < trials; ++t) {
    std::vector<char> hit(static_cast<size_t>(experts), 0);
    for (int64_t b = 0; b < batch; ++b)
      for (int e : route()) hit[static_cast<size_t>(e)] = 1;
    sum += std::accumulate(hit.begin(), hit.end(), 0);
  }
  return sum / trials;
}

}  // namespace

TEST(MoeExperts, UniformRoutingIsTheClosedForm) {
  for (auto [e, k, b] :
       std::vector<std::array<int64_t, 3>>{{8, 2, 1}, {8, 2, 5}, {64, 3, 16}, {256, 8, 1000}})
    EXPECT_NEAR(
        rr::expected_distinct_experts(e, k, static_cast<double>(b)),
        static_cast<double>(e) * (1 - std::pow(1 - static_cast<double>(k) / e, static_cast<double>(b))),
        1e-9 * static_cast<double>(e))
        << e << " " << k << " " << b;
  EXPECT_NEAR(rr::expected_distinct_experts(8, 2, 1), 2.0, 1e-12);  // one token reads its k
  EXPECT_EQ(rr::expected_distinct_experts(8, 2, 0), 0.0);           // no token, no expert
  EXPECT_NEAR(rr::expected_distinct_experts(8, 8, 3), 8.0, 1e-12);  // top-k = E reads all at once
  EXPECT_NEAR(rr::expected_distinct_experts(64, 4, 1e6), 64.0, 1e-9);
  // A fractional batch lies between its neighbours (the critical batch solves for a real B).
  const double a = rr::expected_distinct_experts(64, 4, 3), m = rr::expected_distinct_experts(64, 4, 3.5),
               z = rr::expected_distinct_experts(64, 4, 4);
  EXPECT_LT(a, m);
  EXPECT_LT(m, z);
  EXPECT_THROW(rr::expected_distinct_experts(8, 9, 1), ridge::Error);
  EXPECT_THROW(rr::expected_distinct_experts(0, 1, 1), ridge::Error);
  EXPECT_THROW(rr::expected_distinct_experts(8, 2, -1), ridge::Error);
}

// Uniform routing against a simulation of it: each token a uniform k-subset of the experts.
TEST(MoeExperts, UniformRoutingMatchesASimulation) {
  std::mt19937 g(17);
  for (auto [e, k, b] :
       std::vector<std::array<int64_t, 3>>{{8, 2, 1}, {8, 2, 4}, {64, 8, 16}, {256, 8, 64}}) {
    const int trials = 4000;
    double sum = 0;
    std::vector<int32_t> ids(static_cast<size_t>(e));
    for (int tr = 0; tr < trials; ++tr) {
      std::vector<char> hit(static_cast<size_t>(e), 0);
      for (int64_t i = 0; i < b; ++i) {
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin(), ids.end(), g);  // a uniform k-subset: the first k of a shuffle
        for (int64_t j = 0; j < k; ++j) hit[static_cast<size_t>(ids[static_cast<size_t>(j)])] = 1;
      }
      sum += std::accumulate(hit.begin(), hit.end(), 0);
    }
    const double sim = sum / trials, want = rr::expected_distinct_experts(e, k, static_cast<double>(b));
    EXPECT_NEAR(want, sim, 0.02 * want) << "E " << e << " k " << k << " B " << b;
  }
}

// A skewed routing: every token takes the top-k of its logits plus Gumbel noise (a softmax sampled k times
// without replacement), so popular experts are read far more often. The histogram measured from 200,000
// tokens of it predicts the distinct experts of B fresh tokens, which a simulation of the same routing
// counts.
TEST(MoeExperts, AHistogramPredictsTheDistinctExpertsOfASimulatedRouting) {
  const int64_t E = 16, k = 2;
  std::vector<double> logit(E);
  for (int64_t e = 0; e < E; ++e) logit[static_cast<size_t>(e)] = -0.35 * static_cast<double>(e);
  std::mt19937_64 g(20261129);
  std::uniform_real_distribution<double> u(1e-12, 1.0);
  std::vector<int> order(E);
  auto route = [&] {
    std::vector<double> score(E);
    for (int64_t e = 0; e < E; ++e)
      score[static_cast<size_t>(e)] = logit[static_cast<size_t>(e)] - std::log(-std::log(u(g)));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
      return score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)];
    });
    return std::vector<int>(order.begin(), order.begin() + k);
  };
  std::vector<double> counts(E, 0);
  for (int t = 0; t < 200000; ++t)
    for (int e : route()) counts[static_cast<size_t>(e)] += 1;
  const auto shares = rr::routing_shares(counts, E, k);
  EXPECT_NEAR(std::accumulate(shares.begin(), shares.end(), 0.0), 1.0, 1e-12);
  EXPECT_GT(shares[0], 3 * shares[E - 1]);  // skewed indeed
  for (int64_t b : {1, 3, 8, 32}) {
    const double want = rr::expected_distinct_experts(shares, k, static_cast<double>(b));
    const double sim = simulated_distinct(E, b, 20000, route);
    EXPECT_NEAR(want, sim, 0.01 * sim) << "B " << b;
    // Skew reads fewer experts than uniform routing would.
    if (b > 1) {
      EXPECT_LT(want, rr::expected_distinct_experts(E, k, static_cast<double>(b))) << "B " << b;
    }
  }
  // One token reads exactly k, whatever the histogram; a uniform histogram is the uniform formula.
  EXPECT_NEAR(rr::expected_distinct_experts(shares, k, 1), 2.0, 1e-9);
  const auto flat = rr::routing_shares(std::vector<double>(E, 7), E, k);
  EXPECT_NEAR(rr::expected_distinct_experts(flat, k, 9), rr::expected_distinct_experts(E, k, 9), 1e-9);
}

TEST(MoeExperts, HistogramsThatCannotBeATopKRoutingAreRefused) {
  auto refused = [](const std::vector<double>& v, int64_t e, int64_t k, const std::string& says) {
    try {
      rr::routing_shares(v, e, k);
      ADD_FAILURE() << says;
    } catch (const ridge::Error& err) {
      EXPECT_EQ(err.argument(), "expert_shares") << err.what();
      EXPECT_NE(std::string(err.what()).find(says), std::string::npos) << err.what();
    }
  };
  refused({0.5, 0.5}, 4, 2, "2 values for 4 experts");
  refused({0.6, 0.2, 0.1, 0.1}, 4, 2, "more than 1/top_k");  // a top-2 token picks two distinct experts
  refused({1, -1, 1, 1}, 4, 2, "not a share or a count");
  refused({0, 0, 0, 0}, 4, 2, "sum to 0");
  refused({NAN, 1, 1, 1}, 4, 2, "not a share or a count");
  // Counts are shares once divided by their sum: 30 tokens x top-2 = 60 choices.
  const auto s = rr::routing_shares({30, 20, 10, 0}, 4, 2);
  EXPECT_DOUBLE_EQ(s[0], 0.5);
  EXPECT_DOUBLE_EQ(s[3], 0.0);
}

// Batch 3, context 5, bf16: every count below by hand. One layer's attention linears: q 64 + k 32 + v 32 + o
// 64 = 192; layer 0's dense FFN 3 x 8 x 12 = 288; layer 1's shared expert 3 x 8 x 6 = 144, router 4 x 8 = 32,
// routed experts 4 x 144 = 576 (144 each).
TEST(MoeDecode, AnMoeStepByHand) {
  const rr::ModelArch s = moe_shape();
  EXPECT_EQ(static_cast<double>(rr::model_param_count(s)), 2 * 192 + 288 + 144 + 32 + 576 + 40 + 128 + 128);
  EXPECT_EQ(static_cast<double>(rr::model_active_param_count(s)), 1720 - 576 + 2 * 144);
  const auto c = rr::decode_cost(s, dtypes(DType::bf16), 3, 5);
  // 3 tokens x top-2 of 4 experts: 4 (1 - (1/2)^3) = 3.5 distinct experts expected.
  EXPECT_NEAR(c.experts_read, 3.5, 1e-12);
  EXPECT_EQ(flops_named(c, "layer GEMMs"), 2 * 3 * (2 * 192 + 288 + 144));
  EXPECT_EQ(flops_named(c, "routed experts"), 2 * 3 * 2 * 144);  // each token through k experts
  EXPECT_EQ(flops_named(c, "router"), 2 * 3 * 32);
  EXPECT_EQ(flops_named(c, "lm_head"), 2 * 3 * 8 * 16);
  EXPECT_EQ(flops_named(c, "attention"), 4 * 3 * 2 * 4 * 5 * 2);
  EXPECT_EQ(bytes_named(c.weights, "linears"), (2 * 192 + 288 + 144) * 2);
  EXPECT_EQ(bytes_named(c.weights, "routers"), 32 * 4);  // fp32, as training and generation run it
  EXPECT_NEAR(bytes_named(c.weights, "routed experts"), 3.5 * 144 * 2, 1e-9);
  EXPECT_EQ(bytes_named(c.weights, "norm weights"), 40 * 4);
  // Activations: GEMM inputs h1, o, h2 (3D per layer) + g: F for layer 0, k De + S = 18 for layer 1.
  EXPECT_EQ(bytes_named(c.activations, "layer GEMM inputs"), 3 * (2 * 24 + 12 + 18) * 2);
  EXPECT_EQ(bytes_named(c.activations, "router logits", true), 3 * 4 * 4);
  EXPECT_EQ(bytes_named(c.activations, "dispatched rows", true), 3 * 2 * 8 * 2);
  EXPECT_EQ(bytes_named(c.activations, "expert output rows"), 3 * 2 * 8 * 2);
  // The rest: q|k|v etc. 4D + 2kd per layer, and twice the FFN widths (w1|w3 outputs, SwiGLU's inputs).
  EXPECT_EQ(bytes_named(c.activations, "GEMM outputs"), 3 * (2 * (32 + 8) + 2 * (12 + 18)) * 2);

  // fp8 weights: each routed expert read carries its 128x128 scales (w1, w3 [6,8] and w2 [8,6]: 3 blocks).
  const auto f = rr::decode_cost(s, dtypes(DType::fp8_e4m3), 3, 5);
  EXPECT_NEAR(bytes_named(f.weights, "routed experts"), 3.5 * 144, 1e-9);
  EXPECT_NEAR(bytes_named(f.weights, "routed expert scales"), 3.5 * 3 * 4, 1e-9);
  EXPECT_EQ(bytes_named(f.weights, "routers"), 32 * 4);  // the router stays fp32

  // A prefill of 3 prompts of 4 tokens: 12 tokens route together.
  const auto p = rr::prefill_cost(s, dtypes(DType::bf16), 3, 4);
  EXPECT_NEAR(p.experts_read, 4 * (1 - std::pow(0.5, 12)), 1e-12);
  EXPECT_EQ(flops_named(p, "routed experts"), 2 * 12 * 2 * 144);

  // At a batch past every expert the step reads all 576 expert weights.
  const auto big = rr::decode_cost(s, dtypes(DType::bf16), 4096, 5);
  EXPECT_NEAR(bytes_named(big.weights, "routed experts"), 576 * 2, 1e-6);

  // A histogram that sends every token to the same two experts reads two at any batch.
  const auto two = rr::decode_cost(s, dtypes(DType::bf16), 4096, 5, {0.5, 0.5, 0, 0});
  EXPECT_NEAR(two.experts_read, 2.0, 1e-12);
  EXPECT_THROW(rr::decode_cost(s, dtypes(DType::bf16), 3, 5, {1, 1}), ridge::Error);
}

TEST(MoeDecode, ADenseModelIsUnchanged) {
  const rr::ModelArch d = dense_shape();
  const auto c = rr::decode_cost(d, dtypes(DType::bf16), 3, 5);
  EXPECT_EQ(c.experts_read, 0);
  EXPECT_EQ(c.flops.size(), 3u);
  EXPECT_EQ(static_cast<double>(rr::model_active_param_count(d)),
            static_cast<double>(rr::model_param_count(d)));
  // A histogram needs an MoE model.
  EXPECT_THROW(rr::decode_cost(d, dtypes(DType::bf16), 3, 5, {1, 1}), ridge::Error);
}

// The critical batch of an MoE decode step: the smallest B that a scan finds compute-bound, its real crossing
// on the curve W + B k + X(B), and the dense model of the same active size (k experts always) crossing first.
TEST(MoeDecode, CriticalBatchAgainstAScanAndTheDenseEquivalent) {
  // V 64, D 256, 2 layers, 4 heads sharing one kv head, 32 experts of 256 in both layers, top-2.
  const rr::ModelArch s = arch(64, 256, 2, 4, 512, 1, 32, 2, 0, 256, {});
  const auto c = chip(1e12, 1e11);  // ridge point 10 FLOP/B at bf16
  const auto dt = dtypes(DType::bf16);
  const auto r = rr::decode_report(s, dt, 1, 8, c);
  ASSERT_TRUE(r.moe.has_value());
  ASSERT_TRUE(r.critical.batch.has_value());
  const int64_t B = *r.critical.batch;
  auto bound_at = [&](int64_t b) { return rr::inference_bound(rr::decode_cost(s, dt, b, 8), c); };
  EXPECT_EQ(bound_at(B).binding, "compute");
  EXPECT_EQ(bound_at(B - 1).binding, "memory");
  for (int64_t b = 1; b < B; b += std::max<int64_t>(1, B / 50)) EXPECT_EQ(bound_at(b).binding, "memory") << b;
  // The crossing: B t_math(1) bw = W + B k + X(B) with X(B) = L x expected experts x one expert's bytes.
  const double x = r.critical.asymptotic, e1 = 3.0 * 256 * 256 * 2;
  const double t1 = bound_at(1).t_math;
  EXPECT_NEAR(x * t1 * 1e11,
              r.critical.weight_bytes + x * r.critical.bytes_per_sequence +
                  2 * e1 * rr::expected_distinct_experts(32, 2, x),
              1e-6 * x * t1 * 1e11);
  EXPECT_GE(x, static_cast<double>(B - 1));
  EXPECT_LE(x, static_cast<double>(B));
  EXPECT_NEAR(r.critical.expert_bytes_one, 2 * 2 * e1, 1e-6);  // one token: k experts in each of 2 layers
  EXPECT_NEAR(r.critical.expert_bytes_all, 2 * 32 * e1, 1e-6);
  EXPECT_NEAR(r.critical.experts_read_at_batch, rr::expected_distinct_experts(32, 2, static_cast<double>(B)),
              1e-9);
  // The dense equivalent moves W + B k with W holding k experts per layer: the closed form, and far sooner.
  const auto& d = r.moe->dense_equivalent;
  ASSERT_TRUE(d.batch.has_value());
  EXPECT_NEAR(d.weight_bytes, r.critical.weight_bytes + r.critical.expert_bytes_one, 1e-6);
  EXPECT_NEAR(d.asymptotic, d.weight_bytes / (t1 * 1e11 - d.bytes_per_sequence), 1e-9 * d.asymptotic);
  EXPECT_LT(*d.batch * 4, B);
  // Weights only: the MoE's grows with the experts read; the dense one's is the chapter's.
  EXPECT_GT(r.critical.batch_weights_only, 4 * d.batch_weights_only);
  // The sweep reads more experts as the batch grows, all 32 near the end.
  const auto sw = rr::decode_report(s, dt, 1, 8, c, "", 0, true);
  ASSERT_EQ(sw.moe->sweep_experts_read.size(), sw.sweep.size());
  for (size_t i = 1; i < sw.sweep.size(); ++i)
    EXPECT_GT(sw.moe->sweep_experts_read[i], sw.moe->sweep_experts_read[i - 1]);
  EXPECT_GT(sw.moe->sweep_experts_read.back(), 31.0);
}

TEST(MoeDecode, JsonAddsKeysOnlyForMoe) {
  const auto c = chip(1e13, 1e11);
  const auto j = nlohmann::json::parse(
      rr::decode_report_json(rr::decode_report(moe_shape(), dtypes(DType::bf16), 3, 5, c)));
  EXPECT_EQ(j["shape"]["experts"], 4);
  EXPECT_EQ(j["shape"]["top_k"], 2);
  EXPECT_EQ(j["shape"]["moe_layers"], nlohmann::json::array({1}));
  EXPECT_EQ(j["shape"]["params_active"].get<double>(), 1432);
  EXPECT_NEAR(j["decode"]["experts_read"].get<double>(), 3.5, 1e-12);
  EXPECT_NEAR(j["decode"]["bytes_per_token"].get<double>(), j["decode"]["bytes"]["total"].get<double>() / 3,
              1e-9);
  EXPECT_EQ(j["moe"]["routing"], "uniform");
  EXPECT_EQ(j["moe"]["expert_bytes"].get<double>(), 144 * 2);
  EXPECT_TRUE(j["moe"]["dense_equivalent_critical_batch"].contains("batch"));
  const auto jd = nlohmann::json::parse(
      rr::decode_report_json(rr::decode_report(dense_shape(), dtypes(DType::bf16), 3, 5, c)));
  EXPECT_FALSE(jd.contains("moe"));
  EXPECT_FALSE(jd["shape"].contains("experts"));
  EXPECT_FALSE(jd["decode"].contains("experts_read"));
  EXPECT_FALSE(jd["critical_batch"].contains("expert_bytes_all"));
}

// The training step of moe_shape() at batch 1 x 4 tokens (N = 4, N k = 8 rows over 4 experts: 2 each).
TEST(MoeStep, OpsFlopsAndActiveParameters) {
  const rr::ModelShape m = step_of(moe_shape(), 1, 4);
  const auto ops = rr::model_step_ops(m);
  std::map<std::string, const rr::ModelOp*> by;
  for (const auto& o : ops) by[o.name] = &o;
  ASSERT_TRUE(by.count("gemm experts w1 w3"));
  EXPECT_EQ(by["gemm w1 w3"]->count, 1);  // the dense layer
  EXPECT_FALSE(by["gemm w1 w3"]->moe);
  EXPECT_EQ(by["gemm experts w1 w3"]->count, 1);  // the MoE layer
  EXPECT_TRUE(by["gemm experts w1 w3"]->moe);
  EXPECT_EQ(by["gemm qkv"]->count, 2);
  // The experts' w1|w3 at the active rows: 8 rows x [8 -> 12]; every expert's weights read once.
  const auto& w13 = by["gemm experts w1 w3"]->cost;
  EXPECT_EQ(w13.op, "grouped-gemm-contiguous");
  EXPECT_EQ(static_cast<double>(w13.flops), 2.0 * 8 * 12 * 8);
  EXPECT_EQ(static_cast<double>(w13.memory_bytes()), (8 * 8 + 4 * 12 * 8) * 2.0 + 8 * 12 * 4.0);
  EXPECT_EQ(static_cast<double>(by["gemm experts w2"]->cost.flops), 2.0 * 8 * 8 * 6);
  EXPECT_EQ(static_cast<double>(by["gemm router"]->cost.flops), 2.0 * 4 * 8 * 4);
  EXPECT_EQ(static_cast<double>(by["gemm shared w1 w3"]->cost.flops), 2.0 * 4 * 8 * 12);
  // The K-grouped weight gradient: dW2 [4, 8, 6] accumulated in fp32, the 8 rows of dy and g read.
  const auto& dw2 = by["gemm experts w2 dW"]->cost;
  EXPECT_EQ(static_cast<double>(dw2.flops), 2.0 * 8 * 8 * 6);
  EXPECT_EQ(static_cast<double>(dw2.memory_bytes()), (8 * 8 + 8 * 6) * 2.0 + 2 * 4 * 8 * 6 * 4.0);
  // The permute copies each token's h2 row once per choice.
  EXPECT_EQ(static_cast<double>(by["permute"]->cost.memory_bytes()), (4 * 8 + 8 * 8) * 2.0);
  // AdamW over every parameter (all experts), MFU over the active ones: model FLOPs forward are 2 N x the
  // active GEMM weights + lm_head, plus causal attention; backward twice the GEMMs and 2.5x attention.
  EXPECT_EQ(static_cast<double>(by["adamw"]->cost.memory_bytes()), 1720 * 7 * 4.0);
  const double gemm = 2.0 * 4 * (2 * 192 + 288 + 144 + 32 + 2 * 144 + 128);
  const double attention = 2 * (4.0 * 2 * 4 * 4 * 4 / 2);  // 2 layers x 4 H T T d_head / 2 (causal)
  EXPECT_EQ(rr::model_matmul_flops(m, "forward"), gemm + attention);
  EXPECT_EQ(rr::model_matmul_flops(m, "backward"), 2 * gemm + 2.5 * attention);

  // N k below E: only the experts with rows are read (2 tokens x top-1 over 4 experts).
  rr::ModelShape few = m;
  few.seq = 2;
  few.top_k = 1;
  const auto f = rr::model_step_ops(few);
  for (const auto& o : f)
    if (o.name == "gemm experts w2") {
      EXPECT_EQ(o.cost.shape.rfind("groups=2 ", 0), 0u) << o.cost.shape;
    }

  // Bad MoE shapes name the field.
  rr::ModelShape bad = m;
  bad.top_k = 5;
  EXPECT_THROW(rr::model_step_ops(bad), ridge::Error);
  bad = m;
  bad.moe_layers = {2};
  EXPECT_THROW(rr::model_step_ops(bad), ridge::Error);
}

// The data-parallel timeline gives each layer its own feed-forward: the MoE layer's ops to it, the dense
// layer's to the other, and the backward total is every op's.
TEST(MoeStep, DdpGroupsTheMoeLayersOps) {
  const rr::ModelShape m = step_of(moe_shape(), 2, 16);
  const auto c = chip(1e13, 1e11);
  const auto in = rr::ddp_input(m, c);
  double backward = 0, moe = 0, dense = 0;
  for (const auto& op : rr::model_step_ops(m)) {
    if (op.pass != "backward") continue;
    const double t = rr::bound(op.cost, c).t_lower;
    backward += t * static_cast<double>(op.count);
    if (op.moe) moe += t;
    for (const char* name : {"gemm w2 dW", "gemm w2 dX", "swiglu backward", "gemm w1 w3 dW", "gemm w1 w3 dX"})
      if (op.name == name) dense += t;
  }
  EXPECT_NEAR(in.backward_s(), backward, 1e-12 * backward);
  // Layers run in reverse: group 2 is layer 1 (MoE), group 3 layer 0 (dense); the rest of a block is shared.
  EXPECT_NEAR(in.backward_group_s[2] - in.backward_group_s[3], moe - dense, 1e-12 * backward);
}

// Expert parallelism as distributed::DataParallel runs it, counted by hand: 4 x 32 = 128 tokens per rank,
// top-2, d_model 8, bf16 operands, 4 experts over groups of 4 of 8 ranks (2 replicas of each shard).
TEST(MoeExpertParallel, AllToAllBytesTimeOverlapAndGradients) {
  const rr::ModelShape m = step_of(moe_shape(), 4, 32);
  rr::DdpLink link;
  link.name = "example";
  link.bandwidth = 1e9;
  link.hop_latency_s = 1e-6;
  link.base_latency_s = 5e-6;
  link.ranks = 8;
  rr::DdpInput in;
  in.shared_forward_s = 5e-6;  // shorter than a dispatch: it hides 5 us of it
  in.shared_backward_s = 1.0;  // longer: it hides the whole dispatch
  const auto ep = rr::expert_parallel(m, in, link, 4);
  // The dispatch: 128 tokens x top-2 x 8 x 2 bytes; the combine the same rows in fp32; 3/4 leave the rank.
  EXPECT_EQ(ep.dispatch_bytes, 128.0 * 2 * 8 * 2);
  EXPECT_EQ(ep.combine_bytes, 128.0 * 2 * 8 * 4);
  EXPECT_EQ(ep.leaving, 0.75);
  // base + 3 hops + the bytes that leave over the link.
  const double d = 5e-6 + 3e-6 + 0.75 * 4096 / 1e9, c = 5e-6 + 3e-6 + 0.75 * 8192 / 1e9;
  EXPECT_DOUBLE_EQ(ep.dispatch_s, d);
  EXPECT_DOUBLE_EQ(ep.combine_s, c);
  EXPECT_EQ(ep.experts_per_rank, 1);
  EXPECT_EQ(ep.all_to_alls, 4);  // one MoE layer
  EXPECT_DOUBLE_EQ(ep.step_s, 2 * d + 2 * c);
  EXPECT_DOUBLE_EQ(ep.hidden_s, 5e-6 + d);
  EXPECT_DOUBLE_EQ(ep.exposed_s, 2 * d + 2 * c - 5e-6 - d);
  // The experts' gradients: 4 experts x (w1, w3 [6, 8] and w2 [8, 6]) in fp32; each rank's quarter
  // all-reduced between its 2 replicas: base + 2 hops + 2 (2-1)/2 x 576 bytes.
  EXPECT_EQ(ep.expert_grad_bytes, 4.0 * 4 * 3 * 6 * 8);
  EXPECT_EQ(ep.replicas, 2);
  EXPECT_DOUBLE_EQ(ep.replica_reduce_s, 5e-6 + 2e-6 + 576 / 1e9);
  rr::DdpLink four = link;
  four.ranks = 4;
  EXPECT_EQ(rr::expert_parallel(m, in, four, 4).replica_reduce_s, 0);  // one replica: nothing to reduce
  // All experts on each rank: nothing to send, every gradient replicated over the 8 ranks.
  const auto one = rr::expert_parallel(m, in, link, 1);
  EXPECT_EQ(one.step_s, 0);
  EXPECT_EQ(one.hidden_s, 0);
  EXPECT_THROW(rr::expert_parallel(m, in, link, 3), ridge::Error);  // 4 experts over 3 ranks
  link.ranks = 6;
  EXPECT_THROW(rr::expert_parallel(m, in, link, 4), ridge::Error);  // 4 does not divide 6 ranks
  link.ranks = 8;
  EXPECT_THROW(rr::expert_parallel(step_of(dense_shape(), 4, 32), in, link, 2), ridge::Error);
}

// The data-parallel part: the experts' gradients in no reduction, AdamW over the dense parameters and a
// quarter of the experts'; the shared experts' times from the step's ops; a mode's step with the exchange.
TEST(MoeExpertParallel, TheDdpModesLeaveTheExpertsOut) {
  const rr::ModelShape m = step_of(moe_shape(), 2, 16);
  const auto chp = chip(1e13, 1e11);
  const auto in = rr::ddp_input(m, chp);
  double shared_fwd = 0, shared_bwd = 0;
  for (const auto& op : rr::model_step_ops(m))
    if (op.name.find("shared") != std::string::npos)
      (op.pass == "forward" ? shared_fwd : shared_bwd) += rr::bound(op.cost, chp).t_lower;
  EXPECT_GT(shared_fwd, 0);
  EXPECT_DOUBLE_EQ(in.shared_forward_s, shared_fwd);
  EXPECT_DOUBLE_EQ(in.shared_backward_s, shared_bwd);
  rr::DdpLink link;
  link.name = "example";
  link.bandwidth = 1e9;
  link.ranks = 4;
  const auto ep = rr::expert_parallel(m, in, link, 4);
  const auto dp = rr::expert_parallel_ddp_input(in, ep);
  const double experts = 4.0 * 4 * 3 * 6 * 8;
  EXPECT_DOUBLE_EQ(dp.total_bytes(), in.total_bytes() - experts);
  for (const auto& g : dp.grads) EXPECT_EQ(g.name.find(".ffn.experts."), std::string::npos) << g.name;
  EXPECT_DOUBLE_EQ(dp.optimizer_s,
                   in.optimizer_s * (in.total_bytes() - experts + experts / 4) / in.total_bytes());
  rr::DdpSetting flat;
  const auto plain = rr::predict_ddp(dp, link, flat);
  const auto with = rr::add_expert_parallel(plain, ep);
  EXPECT_DOUBLE_EQ(with.step_s, plain.step_s + ep.exposed_s);
  EXPECT_DOUBLE_EQ(with.comm_s, plain.comm_s + ep.step_s);
  EXPECT_DOUBLE_EQ(with.hidden_s, plain.hidden_s + ep.hidden_s);
}
