// The generation roofline (ridge/roofline/decode.hpp) against numbers worked by hand for a tiny model, the
// critical batch against a scan of the batch, the saturation that keeps a long context memory-bound, the
// fp8 block scales, and the memory level the bytes come from.
#include <gtest/gtest.h>

#include <cmath>

#include "ridge/core/error.hpp"
#include "ridge/roofline.hpp"
#include "ridge/roofline/decode.hpp"

namespace rr = ridge::roofline;
using ridge::DType;

namespace {

// V=16, D=8, L=2, H=2 (d_head 4), one kv head (kd = 4), F=12.
rr::ModelArch tiny() {
  rr::ModelArch s;
  s.vocab_size = 16;
  s.d_model = 8;
  s.num_layers = 2;
  s.num_heads = 2;
  s.num_kv_heads = 1;
  s.d_ff = 12;
  return s;
}

rr::InferenceDtypes dtypes(DType weights, DType kv = DType::bf16) {
  rr::InferenceDtypes d;
  d.weights = weights;
  d.kv = kv;
  return d;
}

// A chip with round figures: one peak per listed dtype, memory levels outermost first.
struct LevelFigures {
  const char* level;
  double bandwidth, capacity;  // capacity 0: none in the file
};
rr::Chip chip(std::initializer_list<std::pair<const char*, double>> peaks,
              std::initializer_list<LevelFigures> levels) {
  rr::Chip c;
  c.id = "example";
  c.kind = "cpu";
  for (const auto& [k, v] : peaks) c.peak_flops[k] = {v, "example"};
  for (const auto& l : levels) {
    rr::MemoryLevel m{l.level, l.level, {l.bandwidth, "example"}, std::nullopt};
    if (l.capacity > 0) m.capacity = rr::Sourced{l.capacity, "example"};
    c.memory.push_back(m);
  }
  return c;
}

double bytes_of(const std::vector<rr::Traffic>& v, const std::string& name, bool write) {
  for (const auto& t : v)
    if (t.name == name && t.write == write) return static_cast<double>(t.bytes);
  ADD_FAILURE() << "no traffic " << name << (write ? " (write)" : " (read)");
  return -1;
}

bool has(const std::vector<rr::Traffic>& v, const std::string& name) {
  for (const auto& t : v)
    if (t.name == name) return true;
  return false;
}

}  // namespace

// Batch 3, context 5, bf16 weights and KV cache, every count below worked by hand.
TEST(DecodeCost, TinyModelByHand) {
  const auto c = rr::decode_cost(tiny(), dtypes(DType::bf16), 3, 5);
  EXPECT_EQ(c.phase, "decode");
  // One layer's linears: q 8x8 + k 4x8 + v 4x8 + o 8x8 + w1 12x8 + w3 12x8 + w2 8x12 = 480 elements.
  // FLOPs: 2 x 3 tokens x 2 layers x 480 = 5760; lm_head 2 x 3 x 8 x 16 = 768; attention
  // 4 x B 3 x H 2 x d_head 4 x C 5 x L 2 = 960.
  ASSERT_EQ(c.flops.size(), 3u);
  EXPECT_EQ(static_cast<double>(c.flops[0].flops), 5760);
  EXPECT_EQ(static_cast<double>(c.flops[1].flops), 768);
  EXPECT_EQ(static_cast<double>(c.flops[2].flops), 960);
  EXPECT_EQ(c.flops[0].compute, "bf16");
  EXPECT_EQ(static_cast<double>(c.total_flops()), 7488);
  // Weights: 960 linear elements x 2 B = 1920; norms (2 L + 1) D = 40 fp32 = 160; lm_head 128 x 2 = 256;
  // embedding rows 3 x 8 x 2 = 48.
  EXPECT_EQ(bytes_of(c.weights, "layer linears (q,k,v,o,w1,w2,w3)", false), 1920);
  EXPECT_EQ(bytes_of(c.weights, "norm weights", false), 160);
  EXPECT_EQ(bytes_of(c.weights, "lm_head [V,D]", false), 256);
  EXPECT_EQ(bytes_of(c.weights, "embedding rows", false), 48);
  EXPECT_EQ(static_cast<double>(c.weight_bytes()), 2384);
  // KV cache: B 3 x C 5 x L 2 x 2 (K and V) x kd 4 = 240 bf16 read; the new tokens' 3 x 2 x 2 x 4 = 48
  // written.
  EXPECT_EQ(static_cast<double>(c.kv_read_bytes()), 480);
  EXPECT_EQ(static_cast<double>(c.kv_write_bytes()), 96);
  // Activations, 3 tokens: the fp32 residual stream read 3 (2 x 4D) + 3 D (final norm) = 216 elements and
  // written 3 (2 x 2D + D) = 120; GEMM inputs (3D + F = 36 per layer) 216 bf16 each way; the rest
  // (4D + 2 kd + 2F = 64 per layer) 384 bf16 each way; lm_head input 24 bf16 each way; logits 48 fp32 each
  // way.
  EXPECT_EQ(bytes_of(c.activations, "residual stream", false), 864);
  EXPECT_EQ(bytes_of(c.activations, "residual stream", true), 480);
  EXPECT_EQ(bytes_of(c.activations, "layer GEMM inputs", false), 432);
  EXPECT_EQ(bytes_of(c.activations, "GEMM outputs, q, k, v", true), 768);
  EXPECT_EQ(bytes_of(c.activations, "lm_head input", false), 48);
  EXPECT_EQ(bytes_of(c.activations, "logits", true), 192);
  EXPECT_EQ(static_cast<double>(c.activation_bytes()), 864 + 480 + 864 + 1536 + 96 + 384);
  EXPECT_EQ(static_cast<double>(c.memory_bytes()), 2384 + 480 + 96 + 4224);
  EXPECT_DOUBLE_EQ(c.intensity(), 7488.0 / 7184.0);
  EXPECT_EQ(static_cast<double>(c.resident_bytes()), 2384 + 480);
  EXPECT_FALSE(has(c.weights, "layer linear scales (128x128)"));
}

TEST(DecodeCost, Fp32ModelMovesFourBytesEverywhere) {
  const auto c = rr::decode_cost(tiny(), dtypes(DType::f32, DType::f32), 3, 5);
  EXPECT_EQ(c.flops[0].compute, "fp32");
  EXPECT_EQ(c.flops[2].compute, "fp32");
  EXPECT_EQ(static_cast<double>(c.weight_bytes()), 4 * (960 + 40 + 128 + 24));
  EXPECT_EQ(static_cast<double>(c.kv_read_bytes()), 960);
  EXPECT_EQ(static_cast<double>(c.activation_bytes()), 4 * (216 + 120 + 2 * 216 + 2 * 384 + 2 * 24 + 2 * 48));
}

// The prefill of 2 prompts of 4 tokens: 8 tokens through the layers, the logits of 2.
TEST(DecodeCost, PrefillByHand) {
  const auto c = rr::prefill_cost(tiny(), dtypes(DType::bf16), 2, 4);
  EXPECT_EQ(c.phase, "prefill");
  EXPECT_EQ(static_cast<double>(c.flops[0].flops), 2.0 * 8 * 2 * 480);
  EXPECT_EQ(static_cast<double>(c.flops[1].flops), 2.0 * 2 * 8 * 16);
  // Causal: query i attends to i + 1 keys; summed over the prompt by a loop, not the closed form.
  double keys = 0;
  for (int i = 0; i < 4; ++i) keys += i + 1;
  EXPECT_EQ(static_cast<double>(c.flops[2].flops), 4.0 * 2 * 2 * 4 * keys * 2);
  EXPECT_EQ(static_cast<double>(c.kv_write_bytes()), 8.0 * 2 * 2 * 4 * 2);
  EXPECT_EQ(static_cast<double>(c.kv_read_bytes()), 8.0 * 2 * 2 * 4 * 2);
  EXPECT_EQ(bytes_of(c.weights, "embedding rows", false), 8.0 * 8 * 2);
  EXPECT_EQ(bytes_of(c.activations, "logits", true), 2.0 * 16 * 4);
  EXPECT_EQ(bytes_of(c.activations, "layer GEMM inputs", false), 8.0 * 2 * 36 * 2);
  EXPECT_EQ(static_cast<double>(c.resident_bytes()),
            static_cast<double>(c.weight_bytes() + c.kv_write_bytes()));
}

// D = 200, F = 300, kd = 100: blocks of 128 that do not divide the sizes.
TEST(DecodeCost, Fp8BlockScales) {
  rr::ModelArch s;
  s.vocab_size = 130;
  s.d_model = 200;
  s.num_layers = 1;
  s.num_heads = 2;
  s.num_kv_heads = 1;
  s.d_ff = 300;
  auto d = dtypes(DType::fp8_e4m3);
  d.head = DType::fp8_e4m3;
  const auto c = rr::decode_cost(s, d, 3, 7);
  EXPECT_EQ(c.flops[0].compute, "fp8");
  EXPECT_EQ(c.flops[1].compute, "fp8");
  EXPECT_EQ(c.flops[2].compute, "bf16");
  // q [200,200] 2x2 blocks, k and v [100,200] 1x2, o 2x2, w1 and w3 [300,200] 3x2, w2 [200,300] 2x3: 30.
  EXPECT_EQ(bytes_of(c.weights, "layer linear scales (128x128)", false), 30 * 4);
  EXPECT_EQ(bytes_of(c.weights, "layer linears (q,k,v,o,w1,w2,w3)", false),
            2 * 200 * 200 + 2 * 100 * 200 + 3 * 200 * 300);
  // lm_head [130,200] in fp8: 26000 bytes and 2x2 scales.
  EXPECT_EQ(bytes_of(c.weights, "lm_head [V,D]", false), 130 * 200);
  EXPECT_EQ(bytes_of(c.weights, "lm_head scales (128x128)", false), 4 * 4);
  // The embedding stays bf16 with fp8 weights.
  EXPECT_EQ(bytes_of(c.weights, "embedding rows", false), 3 * 200 * 2);
  // Activations cast per token, one fp32 scale per 128 values: h1, o, h2 (2 each) and g (3) = 9 per token.
  EXPECT_EQ(bytes_of(c.activations, "layer GEMM input scales (1x128)", false), 3 * 9 * 4);
  EXPECT_EQ(bytes_of(c.activations, "layer GEMM input scales (1x128)", true), 3 * 9 * 4);
  EXPECT_EQ(bytes_of(c.activations, "layer GEMM inputs", false), 3 * (3 * 200 + 300));
  EXPECT_EQ(bytes_of(c.activations, "lm_head input scales (1x128)", false), 3 * 2 * 4);
  // By default the head stays bf16 with fp8 weights: no head scales.
  const auto b = rr::decode_cost(s, dtypes(DType::fp8_e4m3), 3, 7);
  EXPECT_FALSE(has(b.weights, "lm_head scales (128x128)"));
  EXPECT_EQ(bytes_of(b.weights, "lm_head [V,D]", false), 130 * 200 * 2);
  EXPECT_EQ(b.flops[1].compute, "bf16");
}

// A chip whose roofs meet at 1 FLOP/B: the tiny model's step moves W = 2336 bytes (weights without the
// embedding rows) + B x 1616 (embedding row 16, KV 160 + 32, activations 1408) and computes B x 2496 FLOPs,
// so it is compute-bound from B (2496 - 1616) >= 2336, B >= 2.65: B = 3.
TEST(DecodeCritical, CrossingByHand) {
  const auto ex = chip({{"bf16", 1e12}}, {{"hbm", 1e12, 0}});
  const auto cb = rr::decode_critical_batch(tiny(), dtypes(DType::bf16), 5, ex);
  EXPECT_DOUBLE_EQ(cb.weight_bytes, 2336);
  EXPECT_DOUBLE_EQ(cb.bytes_per_sequence, 1616);
  EXPECT_DOUBLE_EQ(cb.kv_bytes_per_sequence, 192);
  EXPECT_DOUBLE_EQ(cb.flops_per_sequence, 2496);
  EXPECT_NEAR(cb.asymptotic, 2336.0 / 880, 1e-12);
  ASSERT_TRUE(cb.batch);
  EXPECT_EQ(*cb.batch, 3);
  EXPECT_DOUBLE_EQ(cb.limit_intensity, 2496.0 / 1616);
  EXPECT_DOUBLE_EQ(cb.ridge_intensity, 1.0);
  // Weights only: B x 2176 GEMM FLOPs (5760 + 768 over 3) against 2336 bytes: B = 2.
  EXPECT_EQ(cb.batch_weights_only, 2);
  // At B = 3 the chip holds the weights (2384 bytes with 3 embedding rows) and the KV cache (480).
  EXPECT_DOUBLE_EQ(cb.resident_bytes, 2864);
  EXPECT_FALSE(cb.exceeds_memory);
  const auto small = chip({{"bf16", 1e12}}, {{"hbm", 1e12, 2800}});
  EXPECT_TRUE(rr::decode_critical_batch(tiny(), dtypes(DType::bf16), 5, small).exceeds_memory);
  EXPECT_EQ(rr::inference_bound(rr::decode_cost(tiny(), dtypes(DType::bf16), 2, 5), ex).binding, "memory");
  EXPECT_EQ(rr::inference_bound(rr::decode_cost(tiny(), dtypes(DType::bf16), 3, 5), ex).binding, "compute");
}

// A model that turns compute-bound on the h100 at a short context: the critical batch is the first batch
// of a scan at which the bound says compute, and every batch after it stays so.
TEST(DecodeCritical, MatchesAScanOfTheBatch) {
  rr::ModelArch s;
  s.vocab_size = 32000;
  s.d_model = 4096;
  s.num_layers = 4;
  s.num_heads = 32;
  s.num_kv_heads = 8;
  s.d_ff = 14336;
  const auto h100 = rr::load_chip("h100");
  for (DType w : {DType::bf16, DType::fp8_e4m3}) {
    for (int64_t context : {1, 16, 64}) {
      const auto cb = rr::decode_critical_batch(s, dtypes(w), context, h100);
      ASSERT_TRUE(cb.batch) << context;
      int64_t first = 0;
      for (int64_t B = 1; B <= 4 * *cb.batch; ++B) {
        const bool compute =
            rr::inference_bound(rr::decode_cost(s, dtypes(w), B, context), h100).binding == "compute";
        if (compute && first == 0) first = B;
        if (first) {
          EXPECT_TRUE(compute) << "B " << B << " after the crossing at " << first;
        }
      }
      EXPECT_EQ(first, *cb.batch) << ridge::dtype_name(w) << " context " << context;
      EXPECT_GT(cb.limit_intensity, cb.ridge_intensity);
      // The KV cache and the activations only push the crossing later than the weights-only one.
      EXPECT_GE(*cb.batch, cb.batch_weights_only);
    }
  }
  // The chapter's H100 figure: bf16 weights alone cross at about 989e12 / 3.35e12 = 295.
  const auto bf16 = rr::decode_critical_batch(s, dtypes(DType::bf16), 1, h100);
  EXPECT_NEAR(static_cast<double>(bf16.batch_weights_only), 9.89e14 / 3.35e12, 3);
}

// At a long context the KV cache's bytes grow with B as the FLOPs do: the intensity saturates below the
// ridge point and the step is memory-bound at every batch.
TEST(DecodeCritical, NeverComputeBoundAtALongContext) {
  rr::ModelArch s;  // the "small" preset's shape
  s.vocab_size = 10000;
  s.d_model = 768;
  s.num_layers = 12;
  s.num_heads = 12;
  s.d_ff = 3072;
  const auto h100 = rr::load_chip("h100");
  const auto cb = rr::decode_critical_batch(s, dtypes(DType::bf16), 1024, h100);
  EXPECT_FALSE(cb.batch);
  EXPECT_TRUE(std::isinf(cb.asymptotic));
  EXPECT_LT(cb.limit_intensity, cb.ridge_intensity);
  // The limit: per-sequence FLOPs over per-sequence bytes, which a huge batch approaches from below.
  double previous = 0;
  for (int64_t B = 1; B <= (int64_t{1} << 30); B *= 32) {
    const auto b = rr::inference_bound(rr::decode_cost(s, dtypes(DType::bf16), B, 1024), h100);
    EXPECT_EQ(b.binding, "memory") << B;
    EXPECT_GT(b.intensity, previous);
    EXPECT_LT(b.intensity, cb.limit_intensity);
    previous = b.intensity;
  }
  EXPECT_NEAR(previous, cb.limit_intensity, 1e-6 * cb.limit_intensity);
  // The tiny model on a chip whose roofs meet at 100 FLOP/B: never either, at the intensity worked by hand.
  const auto tiny_cb =
      rr::decode_critical_batch(tiny(), dtypes(DType::bf16), 5, chip({{"bf16", 1e12}}, {{"hbm", 1e10, 0}}));
  EXPECT_FALSE(tiny_cb.batch);
  EXPECT_DOUBLE_EQ(tiny_cb.limit_intensity, 2496.0 / 1616);
}

TEST(DecodeBound, EachPartAtItsOwnPeak) {
  const auto ex = chip({{"fp8", 4e12}, {"bf16", 2e12}, {"fp32", 1e12}}, {{"hbm", 1e10, 0}});
  auto d = dtypes(DType::fp8_e4m3, DType::f32);
  d.head = DType::bf16;
  const auto c = rr::decode_cost(tiny(), d, 3, 5);
  const auto b = rr::inference_bound(c, ex);
  ASSERT_EQ(b.roofs.size(), 3u);
  EXPECT_EQ(b.roofs[0].compute, "fp8");
  EXPECT_EQ(b.roofs[1].compute, "bf16");
  EXPECT_EQ(b.roofs[2].compute, "fp32");
  const double t_math = 5760 / 4e12 + 768 / 2e12 + 960 / 1e12;
  EXPECT_NEAR(b.t_math, t_math, 1e-24);
  EXPECT_DOUBLE_EQ(b.t_memory, static_cast<double>(c.memory_bytes()) / 1e10);
  EXPECT_EQ(b.t_lower, std::max(b.t_math, b.t_memory));
  EXPECT_EQ(b.binding, "memory");
  EXPECT_DOUBLE_EQ(b.tokens_per_s, 3 / b.t_lower);
  EXPECT_NEAR(b.ridge_intensity, 7488 / t_math / 1e10, 1e-9 * b.ridge_intensity);
  EXPECT_TRUE(b.notes.empty());
  // Prefill tokens per second count every prompt token.
  const auto p = rr::inference_bound(rr::prefill_cost(tiny(), d, 2, 4), ex);
  EXPECT_DOUBLE_EQ(p.tokens_per_s, 8 / p.t_lower);
}

TEST(DecodeBound, APeakTheChipLacksFallsBackToAWiderOne) {
  const auto cpu = chip({{"bf16", 1e12}, {"fp32", 5e11}}, {{"dram", 1e10, 0}});
  const auto b = rr::inference_bound(rr::decode_cost(tiny(), dtypes(DType::fp8_e4m3), 1, 5), cpu);
  EXPECT_EQ(b.roofs[0].compute, "bf16");
  ASSERT_FALSE(b.notes.empty());
  EXPECT_NE(b.notes[0].find("no fp8 peak"), std::string::npos) << b.notes[0];
  const auto fp32_only = chip({{"fp32", 5e11}}, {{"dram", 1e10, 0}});
  EXPECT_EQ(
      rr::inference_bound(rr::decode_cost(tiny(), dtypes(DType::bf16), 1, 5), fp32_only).roofs[2].compute,
      "fp32");
  const auto fp64_only = chip({{"fp64", 5e11}}, {{"dram", 1e10, 0}});
  EXPECT_THROW(rr::inference_bound(rr::decode_cost(tiny(), dtypes(DType::bf16), 1, 5), fp64_only),
               ridge::Error);
}

TEST(DecodeBound, TheLevelTheBytesComeFrom) {
  const auto cpu = chip({{"bf16", 1e12}, {"fp32", 5e11}},
                        {{"dram", 2e10, 1e10}, {"l3", 2e11, 32 << 20}, {"l2", 4e11, 2 << 20}});
  // The tiny model's 2.8 KB fit in l2.
  const auto c = rr::decode_cost(tiny(), dtypes(DType::bf16), 3, 5);
  EXPECT_EQ(rr::inference_bound(c, cpu).level, "dram");
  EXPECT_EQ(rr::inference_bound(c, cpu).fits_level, "l2");
  const auto a = rr::inference_bound(c, cpu, "auto");
  EXPECT_EQ(a.level, "l2");
  EXPECT_EQ(a.bandwidth, 4e11);
  // The small model's bf16 weights (about 230 MiB) fit only in dram; 8 MB of weights fit in l3.
  rr::ModelArch mid = tiny();
  mid.d_model = 512;
  mid.num_heads = 8;
  mid.num_kv_heads = 0;
  mid.d_ff = 1536;
  mid.num_layers = 2;
  mid.vocab_size = 1000;
  const auto m = rr::decode_cost(mid, dtypes(DType::bf16), 1, 64);
  ASSERT_GT(static_cast<double>(m.resident_bytes()), 2 << 20);
  ASSERT_LT(static_cast<double>(m.resident_bytes()), 32 << 20);
  const auto mb = rr::inference_bound(m, cpu, "auto");
  EXPECT_EQ(mb.level, "l3");
  EXPECT_DOUBLE_EQ(mb.t_memory, static_cast<double>(m.memory_bytes()) / 2e11);
  // Asking for a level too small for them says the bound is optimistic.
  const auto l2 = rr::inference_bound(m, cpu, "l2");
  bool said = false;
  for (const auto& n : l2.notes) said = said || n.find("do not fit in l2") != std::string::npos;
  EXPECT_TRUE(said);
  // More than the outermost level holds: the step does not fit.
  const auto small_hbm = chip({{"bf16", 1e12}}, {{"hbm", 1e12, 1e6}});
  const auto big = rr::inference_bound(m, small_hbm);
  EXPECT_TRUE(big.exceeds_memory);
  EXPECT_EQ(big.fits_level, "");
}

TEST(DecodeReport, SweepStopsPastTheCriticalBatch) {
  const auto ex = chip({{"bf16", 1e12}}, {{"hbm", 1e12, 0}});
  const auto r = rr::decode_report(tiny(), dtypes(DType::bf16), 2, 5, ex, "", 4, true);
  ASSERT_TRUE(r.critical.batch);
  ASSERT_EQ(r.sweep_batches, (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(r.sweep.back().binding, "compute");
  EXPECT_EQ(r.sweep[1].binding, "memory");
  ASSERT_TRUE(r.prefill);
  EXPECT_EQ(r.prefill->prompt, 4);
  EXPECT_EQ(*r.dtypes.head, DType::bf16);
  // A model that never turns compute-bound: the sweep runs until the intensity is near its limit.
  const auto n = rr::decode_report(tiny(), dtypes(DType::bf16), 1, 5,
                                   chip({{"bf16", 1e12}}, {{"hbm", 1e10, 0}}), "", 0, true);
  EXPECT_FALSE(n.critical.batch);
  EXPECT_FALSE(n.prefill);
  ASSERT_GE(n.sweep.size(), 2u);
  EXPECT_GE(n.sweep.back().intensity, 0.99 * n.critical.limit_intensity);
  EXPECT_LT(n.sweep[n.sweep.size() - 2].intensity, 0.99 * n.critical.limit_intensity);
  const auto j = rr::decode_report_json(r);
  EXPECT_NE(j.find("\"critical_batch\""), std::string::npos);
}

TEST(DecodeErrors, NameTheArgument) {
  auto arg = [](auto&& f) {
    try {
      f();
    } catch (const ridge::Error& e) {
      return e.argument();
    }
    return std::string("(no error)");
  };
  auto s = tiny();
  s.num_kv_heads = 3;
  EXPECT_EQ(arg([&] { rr::decode_cost(s, dtypes(DType::bf16), 1, 1); }), "kv_heads");
  s = tiny();
  s.num_heads = 3;
  EXPECT_EQ(arg([&] { rr::decode_cost(s, dtypes(DType::bf16), 1, 1); }), "heads");
  EXPECT_EQ(arg([&] { rr::decode_cost(tiny(), dtypes(DType::fp16), 1, 1); }), "weights");
  EXPECT_EQ(arg([&] { rr::decode_cost(tiny(), dtypes(DType::bf16, DType::fp8_e4m3), 1, 1); }), "kv");
  auto e = dtypes(DType::bf16);
  e.embedding = DType::fp8_e4m3;
  EXPECT_EQ(arg([&] { rr::decode_cost(tiny(), e, 1, 1); }), "embedding");
  e = dtypes(DType::bf16);
  e.head = DType::i8;
  EXPECT_EQ(arg([&] { rr::decode_cost(tiny(), e, 1, 1); }), "head");
  EXPECT_EQ(arg([&] { rr::decode_cost(tiny(), dtypes(DType::bf16), 0, 1); }), "batch");
  EXPECT_EQ(arg([&] { rr::decode_cost(tiny(), dtypes(DType::bf16), 1, 0); }), "context");
  EXPECT_EQ(arg([&] { rr::prefill_cost(tiny(), dtypes(DType::bf16), 1, -2); }), "prompt");
  EXPECT_EQ(arg([&] { rr::decode_cost(tiny(), dtypes(DType::bf16), int64_t{1} << 40, int64_t{1} << 40); }),
            "shape");
  const auto ex = chip({{"bf16", 1e12}}, {{"hbm", 1e12, 0}});
  EXPECT_EQ(arg([&] { rr::decode_critical_batch(tiny(), dtypes(DType::bf16), 5, ex, "auto"); }), "level");
  EXPECT_EQ(arg([&] { rr::inference_bound(rr::decode_cost(tiny(), dtypes(DType::bf16), 1, 1), ex, "l3"); }),
            "level");
}
