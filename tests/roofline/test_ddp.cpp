// The data-parallel communication model against timelines worked by hand (docs/distributed.md walks the same
// example): ring collective times, what each DDP design hides behind backward, the best bucket size,
// the model's gradient list and the memory optimizer sharding saves.
#include <gtest/gtest.h>

#include "ridge/core/error.hpp"
#include "ridge/roofline.hpp"
#include "ridge/roofline/ddp.hpp"

namespace rr = ridge::roofline;

namespace {

constexpr double ms = 1e-3, us = 1e-6;

rr::DdpLink link(int64_t ranks, double gbps, double hop_s = 0, double base_s = 0) {
  rr::DdpLink l;
  l.name = "test";
  l.ranks = ranks;
  l.bandwidth = gbps * 1e9;
  l.hop_latency_s = hop_s;
  l.base_latency_s = base_s;
  return l;
}

// Three backward groups of 1 ms each, one 1 MB gradient final after each; forward 2 ms, AdamW 1 ms.
// On 2 ranks at 1 GB/s a ring all-reduce of 1 MB moves 2(2-1)/2 x 1 MB = 1 MB per rank: 1 ms.
rr::DdpInput three_groups() {
  rr::DdpInput in;
  in.grads = {{"a", 1e6, 0}, {"b", 1e6, 1}, {"c", 1e6, 2}};
  in.backward_group_s = {1 * ms, 1 * ms, 1 * ms};
  in.forward_s = 2 * ms;
  in.optimizer_s = 1 * ms;
  return in;
}

rr::DdpSetting mode(const std::string& m, double bucket_mb = 25, const std::string& sharding = "none") {
  rr::DdpSetting s;
  s.mode = m;
  s.bucket_mb = bucket_mb;
  s.sharding = sharding;
  return s;
}

void expect_times(const rr::DdpPrediction& p, double comm, double hidden, double exposed, double step) {
  EXPECT_NEAR(p.comm_s, comm, 1e-12) << p.setting.label();
  EXPECT_NEAR(p.hidden_s, hidden, 1e-12) << p.setting.label();
  EXPECT_NEAR(p.exposed_s, exposed, 1e-12) << p.setting.label();
  EXPECT_NEAR(p.step_s, step, 1e-12) << p.setting.label();
}

}  // namespace

TEST(DdpModel, RingCollectiveTimes) {
  // 4 ranks, 1 GB/s, 1 us per step, 2 us per collective, 1 MB.
  const auto l = link(4, 1, 1 * us, 2 * us);
  EXPECT_NEAR(rr::ring_all_reduce_s(1e6, l), (2 + 6) * us + 1.5 * ms, 1e-12);   // 2(N-1)/N = 1.5
  EXPECT_NEAR(rr::ring_all_gather_s(1e6, l), (2 + 3) * us + 0.75 * ms, 1e-12);  // (N-1)/N = 0.75
  EXPECT_NEAR(rr::ring_reduce_scatter_s(1e6, l), (2 + 3) * us + 0.75 * ms, 1e-12);
  EXPECT_NEAR(rr::ring_broadcast_s(1e6, l), (2 + 3) * us + 1 * ms, 1e-12);
  EXPECT_EQ(rr::ring_all_reduce_s(1e6, link(1, 1, 1 * us)), 0.0);  // one rank: nothing to do
  EXPECT_EQ(rr::ring_all_reduce_s(0, l), 0.0);
}

TEST(DdpModel, NaiveAndFlatExposeEverything) {
  const auto in = three_groups();
  const auto l = link(2, 1);
  // Three (one) 1 ms (3 ms) all-reduces after backward: step = 2 + 3 + 1 + 3 ms.
  const auto naive = rr::predict_ddp(in, l, mode("naive"));
  expect_times(naive, 3 * ms, 0, 3 * ms, 9 * ms);
  EXPECT_EQ(naive.collectives, 3);
  const auto flat = rr::predict_ddp(in, l, mode("flat"));
  expect_times(flat, 3 * ms, 0, 3 * ms, 9 * ms);
  EXPECT_EQ(flat.collectives, 1);
  EXPECT_DOUBLE_EQ(flat.bytes, 3e6);
}

TEST(DdpModel, OverlapAndBucketsHideWhatFinishesBeforeBackwardEnds) {
  const auto in = three_groups();
  const auto l = link(2, 1);
  // overlap: a [1,2], b [2,3], c [3,4] ms: 2 ms hidden, 1 exposed.
  const auto ov = rr::predict_ddp(in, l, mode("overlap"));
  expect_times(ov, 3 * ms, 2 * ms, 1 * ms, 7 * ms);
  ASSERT_EQ(ov.spans.size(), 3u);
  EXPECT_NEAR(ov.spans[1].start_s, 2 * ms, 1e-12);
  // 2 MB buckets: {a, b} final at 2 ms -> [2,4], {c} waits for the link -> [4,5]: 1 ms hidden.
  const auto b2 = rr::predict_ddp(in, l, mode("bucketed", 2));
  expect_times(b2, 3 * ms, 1 * ms, 2 * ms, 8 * ms);
  EXPECT_EQ(b2.collectives, 2);
  // A bucket as large as everything is flat started at the end of backward.
  expect_times(rr::predict_ddp(in, l, mode("bucketed", 1000)), 3 * ms, 0, 3 * ms, 9 * ms);
}

TEST(DdpModel, LatencyMakesSmallBucketsPay) {
  const auto in = three_groups();
  // 0.1 ms per step, 2 steps per all-reduce on 2 ranks: per-tensor buckets still win
  // (overlap [1,2.2] [2.2,3.4] [3.4,4.6]: 1.6 ms exposed; 2 MB: 2.4; 3 MB: 3.2).
  auto sweep = rr::best_bucket(in, link(2, 1, 0.1 * ms), {1, 2, 3});
  ASSERT_EQ(sweep.tried.size(), 3u);
  EXPECT_NEAR(sweep.tried[0].exposed_s, 1.6 * ms, 1e-12);
  EXPECT_NEAR(sweep.tried[1].exposed_s, 2.4 * ms, 1e-12);
  EXPECT_NEAR(sweep.tried[2].exposed_s, 3.2 * ms, 1e-12);
  EXPECT_EQ(sweep.best, 0u);
  // 1 ms per step (2 ms per collective): one bucket wins ([3,8]: 5 exposed; 2 MB: [2,6] [6,9]: 6;
  // 1 MB: [1,4] [4,7] [7,10]: 7).
  sweep = rr::best_bucket(in, link(2, 1, 1 * ms), {1, 2, 3});
  EXPECT_NEAR(sweep.tried[0].exposed_s, 7 * ms, 1e-12);
  EXPECT_NEAR(sweep.tried[1].exposed_s, 6 * ms, 1e-12);
  EXPECT_NEAR(sweep.tried[2].exposed_s, 5 * ms, 1e-12);
  EXPECT_EQ(sweep.best, 2u);
  EXPECT_THROW(rr::best_bucket(in, link(2, 1), {}), ridge::Error);
  EXPECT_THROW(rr::best_bucket(in, link(2, 1), {0}), ridge::Error);
}

TEST(DdpModel, ShardedOptimizers) {
  const auto in = three_groups();
  const auto l = link(2, 1);
  // zero1: reduce-scatter 3 MB ((N-1)/N = 1/2: 1.5 ms) [3,4.5], AdamW on half (0.5 ms), all-gather
  // [5,6.5]: 3 ms exposed; compute 2 + 3 + 0.5.
  const auto z = rr::predict_ddp(in, l, mode("flat", 25, "zero1"));
  expect_times(z, 3 * ms, 0, 3 * ms, 8.5 * ms);
  EXPECT_NEAR(z.compute_s, 5.5 * ms, 1e-12);
  ASSERT_EQ(z.spans.size(), 2u);
  EXPECT_NEAR(z.spans[1].start_s, 5 * ms, 1e-12);
  // cs336 on flat: all-reduce [3,6], AdamW on half, then three 1 MB broadcasts of 1 ms: 6 ms exposed.
  const auto c = rr::predict_ddp(in, l, mode("flat", 25, "cs336"));
  expect_times(c, 6 * ms, 0, 6 * ms, 11.5 * ms);
  EXPECT_EQ(c.collectives, 4);
  // cs336 on overlap keeps the overlap of the gradient reduction: 2 ms hidden.
  const auto co = rr::predict_ddp(in, l, mode("overlap", 25, "cs336"));
  expect_times(co, 6 * ms, 2 * ms, 4 * ms, 9.5 * ms);
  EXPECT_EQ(c.setting.label(), "cs336 (flat)");
  // zero1 on overlap reduce-scatters each 1 MB gradient when it is final (0.5 ms each): [1,1.5] and
  // [2,2.5] hidden, [3,3.5] exposed; AdamW on half [3.5,4], all-gather 3 MB [4,5.5] exposed.
  const auto zo = rr::predict_ddp(in, l, mode("overlap", 25, "zero1"));
  expect_times(zo, 3 * ms, 1 * ms, 2 * ms, 7.5 * ms);
  EXPECT_EQ(zo.collectives, 4);
  EXPECT_DOUBLE_EQ(zo.bytes, 6e6);
  ASSERT_EQ(zo.spans.size(), 4u);
  EXPECT_EQ(zo.spans[0].what, "reduce-scatter a");
  EXPECT_NEAR(zo.spans[3].start_s, 4 * ms, 1e-12);
  EXPECT_EQ(zo.setting.label(), "zero1 (overlap)");
  EXPECT_EQ(z.setting.label(), "zero1");
  EXPECT_EQ(rr::DdpSetting{}.label(), "flat");
}

TEST(DdpModel, BadInputNamesTheField) {
  const auto in = three_groups();
  const auto l = link(2, 1);
  EXPECT_THROW(rr::predict_ddp(in, l, mode("ring")), ridge::Error);
  EXPECT_THROW(rr::predict_ddp(in, l, mode("overlap", 25, "zero2")), ridge::Error);
  EXPECT_THROW(rr::predict_ddp(in, l, mode("bucketed", -1)), ridge::Error);
  auto bad = in;
  bad.grads[1].group = 0;
  bad.grads[0].group = 1;  // not in backward order
  EXPECT_THROW(rr::predict_ddp(bad, l, mode("flat")), ridge::Error);
  bad = in;
  bad.grads[2].group = 3;  // no such group
  EXPECT_THROW(rr::predict_ddp(bad, l, mode("flat")), ridge::Error);
  EXPECT_THROW(rr::predict_ddp(in, link(2, 0), mode("flat")), ridge::Error);
  EXPECT_THROW(rr::predict_ddp(in, link(0, 1), mode("flat")), ridge::Error);
  try {
    rr::ddp_link_preset("ethernet", 2);
    FAIL();
  } catch (const ridge::Error& e) {
    EXPECT_NE(std::string(e.what()).find("accepted: nvlink, ib"), std::string::npos);
    EXPECT_EQ(e.argument(), "name");  // the library's argument; `ridge roofline ddp` checks --link itself
  }
}

TEST(DdpModel, LinkPresetsComeFromTheH100File) {
  const auto chip = rr::load_chip("h100");
  const auto nv = rr::ddp_link_preset("nvlink", 8);
  EXPECT_EQ(nv.bandwidth, chip.link_bandwidth("intra_node"));
  EXPECT_EQ(nv.ranks, 8);
  EXPECT_EQ(rr::ddp_link_preset("ib", 16).bandwidth, chip.link_bandwidth("inter_node"));
}

TEST(DdpModel, ModelGradientsAndPhasesMatchTheStepRoofline) {
  rr::ModelShape m;
  m.vocab_size = 1000;
  m.d_model = 64;
  m.num_layers = 3;
  m.num_heads = 4;
  m.d_ff = 176;
  m.batch = 2;
  m.seq = 32;
  const auto chip = rr::load_chip("h100");
  const auto in = rr::ddp_input(m, chip);
  EXPECT_EQ(in.backward_group_s.size(), 6u);  // lm_head, ln_final, 3 layers, embedding
  EXPECT_EQ(in.grads.size(), 2u + 9u * 3 + 1);
  EXPECT_DOUBLE_EQ(in.total_bytes(), 4.0 * static_cast<double>(rr::model_param_count(m)));
  EXPECT_EQ(in.grads.front().name, "lm_head.weight");
  EXPECT_EQ(in.grads[2].name, "layers.2.ffn.w2.weight");
  EXPECT_EQ(in.grads.back().group, 5);
  // Every op of the step is counted once: the phases add up to the sum of the bounds.
  double want = 0;
  for (const auto& op : rr::model_step_ops(m))
    want += rr::bound(op.cost, chip).t_lower * static_cast<double>(op.count);
  EXPECT_NEAR(in.forward_s + in.backward_s() + in.optimizer_s + in.other_s, want, 1e-9 * want);
  // The layers are alike.
  EXPECT_DOUBLE_EQ(in.backward_group_s[2], in.backward_group_s[4]);
  EXPECT_GT(in.backward_group_s[0], 0);
  // One rank: no communication, step = compute.
  auto one = rr::ddp_link_preset("nvlink", 1);
  const auto p = rr::predict_ddp(in, one, mode("overlap"));
  EXPECT_EQ(p.comm_s, 0);
  EXPECT_DOUBLE_EQ(p.step_s, p.compute_s);
}

// Grouped-query attention: k_proj and v_proj, and so their gradients, have kv_heads * d_head rows. The
// timeline's gradients are the model's parameters, 4 bytes each, whatever the attention.
TEST(DdpModel, GroupedQueryGradientsAreTheParameters) {
  rr::ModelShape m;
  m.vocab_size = 1000, m.d_model = 64, m.num_layers = 3, m.num_heads = 4, m.num_kv_heads = 1, m.d_ff = 176;
  m.batch = 2, m.seq = 32;
  const auto in = rr::ddp_input(m, rr::load_chip("h100"));
  // 2 V D + L (2 D D + 2 Dkv D + 3 D F + 2 D) + D with Dkv = 16.
  EXPECT_DOUBLE_EQ(in.total_bytes(),
                   4.0 * (2 * 1000 * 64 + 3 * (2 * 64 * 64 + 2 * 16 * 64 + 3 * 64 * 176 + 2 * 64) + 64));
  for (const auto& g : in.grads) {
    if (g.name == "layers.0.attn.k_proj.weight" || g.name == "layers.0.attn.v_proj.weight") {
      EXPECT_EQ(g.bytes, 4.0 * 16 * 64) << g.name;  // [kv_heads * d_head, D] = [16, 64]
    }
  }
}

TEST(DdpModel, ShardingSavesOneNthOfTheOptimizerState) {
  // 1e9 parameters, bf16 on 8 ranks: 2 + 4 (master) + 4 (grads) + 8 (m, v) = 18 GB; sharded
  // 2 + 0.5 + 4 + 1 = 7.5 GB.
  const auto b = rr::ddp_memory(1e9, ridge::DType::bf16, 8);
  EXPECT_DOUBLE_EQ(b.total(), 18e9);
  EXPECT_DOUBLE_EQ(b.sharded_total(), 7.5e9);
  // fp32 parameters are their own master: 4 + 4 + 8 = 16 GB; sharded 4 + 4 + 1 = 9 GB.
  const auto f = rr::ddp_memory(1e9, ridge::DType::f32, 8);
  EXPECT_DOUBLE_EQ(f.total(), 16e9);
  EXPECT_DOUBLE_EQ(f.sharded_total(), 9e9);
  EXPECT_THROW(rr::ddp_memory(1e9, ridge::DType::i32, 8), ridge::Error);
  EXPECT_THROW(rr::ddp_memory(0, ridge::DType::f32, 8), ridge::Error);
}

TEST(DdpModel, ChipWithoutTheOperandPeakFallsBackLikeTheStepRoofline) {
  rr::ModelShape m;
  m.vocab_size = 1000;
  m.d_model = 64;
  m.num_layers = 2;
  m.num_heads = 4;
  m.d_ff = 176;
  m.operand = ridge::DType::f32;  // TPU v5e has no fp32 peak: its fp32 ops are bounded at bf16
  const auto tpu = rr::load_chip("tpu-v5e");
  ASSERT_FALSE(tpu.has_peak("fp32"));
  const auto in = rr::ddp_input(m, tpu);
  double want = 0;
  for (const auto& op : rr::model_step_ops(m)) {
    auto c = op.cost;
    if (!tpu.has_peak(c.compute)) c.compute = "bf16";
    want += rr::bound(c, tpu).t_lower * static_cast<double>(op.count);
  }
  EXPECT_NEAR(in.forward_s + in.backward_s() + in.optimizer_s + in.other_s, want, 1e-9 * want);
}
