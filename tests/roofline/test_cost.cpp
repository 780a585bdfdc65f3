// The cost models reproduce the worked numbers of the roofline chapter (shared/hardware-sources.md)
// from the figures it states, and the bounds obey T_lower <= T_upper <= 2 T_lower.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ridge/core/error.hpp"
#include "ridge/roofline.hpp"

namespace rr = ridge::roofline;
using ridge::DType;

namespace {

// A chip with exactly the figures a worked example states.
rr::Chip chip(double peak_bf16, double bw, double peak_int8 = 0, double link = 0) {
  rr::Chip c;
  c.id = "example";
  c.kind = "tpu";
  c.peak_flops["bf16"] = {peak_bf16, "example"};
  if (peak_int8 > 0) c.peak_flops["int8"] = {peak_int8, "example"};
  c.memory.push_back({"hbm", "HBM", {bw, "example"}, std::nullopt});
  if (link > 0) c.intra_node = rr::Link{"ICI", {link, "example"}};
  return c;
}

}  // namespace

TEST(WorkedNumbers, DotProductIntensityTendsToOneHalf) {
  for (int64_t n : {1, 2, 7, 1000, 1 << 20}) {
    const auto c = rr::dot(n, DType::bf16);
    const double expect = (2.0 * n - 1) / (4.0 * n + 2);  // (2N-1) FLOPs over 2N+2N reads + 2 written
    EXPECT_DOUBLE_EQ(c.intensity(), expect) << n;
  }
  EXPECT_NEAR(rr::dot(int64_t{1} << 36, DType::bf16).intensity(), 0.5, 1e-9);
}

TEST(WorkedNumbers, Bf16MatmulOnTpuV5eTurnsComputeBoundAbove240) {
  const auto v5e = chip(1.97e14, 8.2e11);
  const auto cb = rr::critical_batch(v5e, 1 << 20, 1 << 20);
  EXPECT_NEAR(cb.asymptotic, 1.97e14 / 8.2e11, 1e-9);
  EXPECT_EQ(static_cast<int>(cb.asymptotic), 240);
  ASSERT_TRUE(cb.exact);
  EXPECT_EQ(*cb.exact, 241);  // the smallest whole B above 240.2
  // The same from the bound itself: B = 241 is compute-bound, B = 240 is not.
  EXPECT_EQ(rr::bound(rr::matmul(241, 1 << 20, 1 << 20), v5e).binding, "compute");
  EXPECT_EQ(rr::bound(rr::matmul(240, 1 << 20, 1 << 20), v5e).binding, "memory");
  // The database's v5e (819 GB/s) gives the same answer.
  EXPECT_EQ(static_cast<int>(rr::critical_batch(rr::load_chip("tpu-v5e"), 8192, 8192).asymptotic), 240);
}

TEST(WorkedNumbers, ExactCriticalBatchExceedsTheApproximationForFiniteShapes) {
  const auto v5e = chip(1.97e14, 8.2e11);
  const auto cb = rr::critical_batch(v5e, 4096, 4096);
  ASSERT_TRUE(cb.exact);
  // B >= r D F / (D F - r (D + F)) with r = 240.24: for D = F = 4096, 271.9 -> 272.
  const double r = 1.97e14 / 8.2e11, D = 4096, F = 4096;
  EXPECT_EQ(*cb.exact, static_cast<int64_t>(std::ceil(r * D * F / (D * F - r * (D + F)))));
  EXPECT_GT(*cb.exact, 241);
  // Too thin a matmul is never compute-bound: D F <= r (D + F).
  EXPECT_FALSE(rr::critical_batch(v5e, 256, 256).exact);
}

TEST(WorkedNumbers, Int8MatmulComputeBoundAbove243) {
  const auto c = chip(1.97e14, 8.1e11, 3.94e14);
  rr::MatmulDtypes dt{DType::i8, DType::i8, DType::i8, ""};
  const auto m = rr::matmul(512, 8192, 8192, dt);
  const double B = 512, D = 8192, F = 8192;
  EXPECT_DOUBLE_EQ(m.intensity(), 2 * B * D * F / (B * D + D * F + B * F));
  const auto cb = rr::critical_batch(c, 1 << 20, 1 << 20, dt);
  EXPECT_EQ(cb.compute, "int8");
  EXPECT_EQ(static_cast<int>(cb.asymptotic), 243);
  EXPECT_EQ(*cb.exact, 244);
}

TEST(WorkedNumbers, Int8WeightsBf16ActivationsComputeBoundAbove120) {
  const auto c = chip(1.97e14, 8.2e11, 3.94e14);
  rr::MatmulDtypes dt{DType::bf16, DType::i8, DType::bf16, ""};
  EXPECT_EQ(dt.compute_key(), "bf16");
  const auto cb = rr::critical_batch(c, 1 << 20, 1 << 20, dt);
  EXPECT_EQ(static_cast<int>(cb.asymptotic), 120);
  EXPECT_EQ(*cb.exact, 121);
  const auto m = rr::matmul(64, 1024, 2048, dt);
  EXPECT_DOUBLE_EQ(static_cast<double>(m.memory_bytes()), 2.0 * 64 * 1024 + 1024 * 2048 + 2.0 * 64 * 2048);
}

TEST(WorkedNumbers, PerExampleWeightsIntensityAboutTwoWhateverB) {
  rr::MatmulDtypes dt{DType::i8, DType::i8, DType::i8, ""};
  for (int64_t b : {1, 16, 256, 4096}) {
    const auto m = rr::matmul_per_example(b, 8192, 8192, dt);
    const double B = b, D = 8192, F = 8192;
    EXPECT_DOUBLE_EQ(m.intensity(), 2 * B * D * F / (B * D + B * D * F + B * F));
    EXPECT_NEAR(m.intensity(), 2, 0.001) << b;
  }
}

TEST(WorkedNumbers, H100CriticalBatch295To298) {
  const auto h100 = rr::load_chip("h100");
  EXPECT_EQ(static_cast<int>(rr::critical_batch(h100, 8192, 8192).asymptotic), 295);
  EXPECT_EQ(static_cast<int>(rr::critical_batch(chip(1e15, 3.35e12), 8192, 8192).asymptotic), 298);
}

TEST(WorkedNumbers, DSplitOverTwoChipsComputeBoundForDAbove8755) {
  const auto c = chip(1.97e14, 8.2e11, 0, 4.5e10);
  const auto s = rr::critical_split_d(c, 2);
  EXPECT_NEAR(s.threshold, 2 * 1.97e14 / 4.5e10, 1e-6);  // D/2 > 4377
  EXPECT_EQ(s.exact, 8756);                              // D > 8755
  // T_math = B D F / 1.97e14 and T_comm = 2 B F / 4.5e10, whatever B and F.
  for (int64_t b : {16, 1024}) {
    const auto m = rr::matmul_split_d(b, 8192, 4096, 2);
    const auto bd = rr::bound(m, c);
    EXPECT_NEAR(bd.t_math, double(b) * 8192 * 4096 / 1.97e14, 1e-15);
    EXPECT_NEAR(bd.t_link, 2.0 * b * 4096 / 4.5e10, 1e-15);
    EXPECT_EQ(bd.binding, "link");
    EXPECT_EQ(rr::bound(rr::matmul_split_d(b, 8756, 4096, 2), c).binding, "compute");
    EXPECT_EQ(rr::bound(rr::matmul_split_d(b, 8754, 4096, 2), c).binding, "link");
  }
}

TEST(Collectives, RingFormulas) {
  const auto h100 = rr::load_chip("h100");
  const int64_t S = int64_t{1} << 30;
  for (int64_t n : {2, 8, 64}) {
    const double f = double(n - 1) / n;
    EXPECT_NEAR(rr::bound(rr::all_reduce(S, n), h100).t_link, 2 * f * S / 4.5e11, 1e-12);
    EXPECT_NEAR(rr::bound(rr::all_gather(S, n), h100).t_link, f * S / 4.5e11, 1e-12);
    EXPECT_NEAR(rr::bound(rr::reduce_scatter(S, n), h100).t_link, f * S / 4.5e11, 1e-12);
    EXPECT_EQ(rr::bound(rr::all_reduce(S, n), h100).binding, "link");
  }
  EXPECT_NEAR(rr::bound(rr::send(S), h100).t_link, S / 4.5e11, 1e-12);
  rr::BoundOptions inter;
  inter.link = "inter_node";
  EXPECT_NEAR(rr::bound(rr::all_reduce(S, 8), h100, inter).t_link, 2 * 7.0 / 8 * S / 5e10, 1e-12);
  EXPECT_THROW(rr::all_reduce(S, 1), ridge::Error);
  EXPECT_THROW(rr::all_reduce(0, 8), ridge::Error);
}

TEST(Attention, NaiveMovesTheScoresFlashDoesNot) {
  rr::AttentionShape s;
  s.batch = 8;
  s.seq_q = s.seq_kv = 4096;
  s.head_dim = 64;
  const auto naive = rr::attention_naive(s), flash = rr::attention_flash(s);
  const double n2 = 8.0 * 4096 * 4096, qkvo = 4.0 * 8 * 4096 * 64;
  EXPECT_DOUBLE_EQ(static_cast<double>(flash.memory_bytes()), 2 * qkvo + 4.0 * 8 * 4096);
  EXPECT_DOUBLE_EQ(static_cast<double>(naive.memory_bytes()), 2 * qkvo + 2 * 4 * n2);
  EXPECT_DOUBLE_EQ(static_cast<double>(flash.flops), 4 * n2 * 64);
  s.causal = true;
  EXPECT_DOUBLE_EQ(static_cast<double>(rr::attention_flash(s).flops), 2 * n2 * 64);
  const auto h100 = rr::load_chip("h100");
  EXPECT_EQ(rr::bound(naive, h100).binding, "memory");
  EXPECT_EQ(rr::bound(flash, h100).binding, "compute");
}

TEST(Fp8Gemm, CountsBlockScales) {
  const auto c = rr::fp8_gemm(128, 7168, 2048);
  const double scales = 4.0 * (128 * 16 + 56 * 16);  // fp32: A per 1x128, B per 128x128
  EXPECT_DOUBLE_EQ(static_cast<double>(c.memory_bytes()),
                   128.0 * 2048 + 7168.0 * 2048 + scales + 2.0 * 128 * 7168);
  EXPECT_EQ(c.compute, "fp8");
  // K not a multiple of 128 rounds the scale blocks up.
  const auto odd = rr::fp8_gemm(1, 129, 129);
  EXPECT_DOUBLE_EQ(static_cast<double>(odd.memory_bytes()), 129 + 129.0 * 129 + 4.0 * (2 + 4) + 2.0 * 129);
}

TEST(GroupedGemm, MaskedCountsOnlyValidRows) {
  const auto full = rr::grouped_gemm_contiguous({100, 300}, 4096, 7168);
  const auto masked = rr::grouped_gemm_masked(1024, {100, 300}, 4096, 7168);
  EXPECT_DOUBLE_EQ(static_cast<double>(full.flops), 2.0 * 400 * 4096 * 7168);
  EXPECT_EQ(static_cast<double>(full.flops), static_cast<double>(masked.flops));
  EXPECT_EQ(static_cast<double>(full.memory_bytes()), static_cast<double>(masked.memory_bytes()));
  // A group with no valid rows reads no weights.
  const auto one = rr::grouped_gemm_masked(1024, {400, 0}, 4096, 7168);
  EXPECT_NEAR(static_cast<double>(masked.memory_bytes() - one.memory_bytes()), 4096.0 * 7168 + 4.0 * 32 * 56,
              1e-3);
  EXPECT_THROW(rr::grouped_gemm_masked(100, {101}, 64, 64), ridge::Error);
  EXPECT_THROW(rr::grouped_gemm_masked(100, {0, 0}, 64, 64), ridge::Error);
}

TEST(Bounds, RejectBadShapes) {
  EXPECT_THROW(rr::matmul(0, 1, 1), ridge::Error);
  EXPECT_THROW(rr::matmul(-5, 1, 1), ridge::Error);
  EXPECT_THROW(rr::matmul(int64_t{1} << 41, 1, 1), ridge::Error);
  // Each dim is allowed but the tensor would hold 2^80 elements: an error, not an overflow.
  EXPECT_THROW(rr::matmul(int64_t{1} << 40, int64_t{1} << 40, 1), ridge::Error);
  EXPECT_THROW(rr::dot(0, DType::bf16), ridge::Error);
  EXPECT_THROW(rr::softmax(1, -1, DType::f32), ridge::Error);
  EXPECT_THROW(rr::bound(rr::matmul(8, 8, 8), rr::load_chip("v100")), ridge::Error);  // no bf16
}

TEST(Bounds, UpperAtMostTwiceLowerOverRandomOps) {
  std::mt19937_64 rng(12345);
  auto dimr = [&](int lo, int hi) { return int64_t{1} << std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<rr::Chip> chips;
  for (const auto& id : rr::chip_ids()) chips.push_back(rr::load_chip(id));
  const DType types[] = {DType::bf16, DType::i8, DType::f32};
  int checked = 0;
  for (int i = 0; i < 3000; ++i) {
    const auto& c = chips[rng() % chips.size()];
    const DType t = types[rng() % 3];
    rr::Cost op;
    switch (rng() % 7) {
      case 0:
        op = rr::matmul(dimr(0, 14) + 3, dimr(4, 14), dimr(4, 14) - 1, {t, t, t, ""});
        break;
      case 1:
        op = rr::dot(dimr(0, 30), t);
        break;
      case 2:
        op = rr::softmax(dimr(0, 12), dimr(0, 16), t);
        break;
      case 3:
        op = rr::all_reduce(dimr(10, 34), 2 + rng() % 100, t);
        break;
      case 4:
        op = rr::matmul_split_d(dimr(0, 12), dimr(4, 16), dimr(4, 14), 2, {t, t, t, ""});
        break;
      case 5: {
        rr::AttentionShape s;
        s.seq_q = s.seq_kv = dimr(4, 14);
        s.head_dim = dimr(4, 7);
        s.dtype = t == DType::i8 ? DType::bf16 : t;
        s.causal = rng() % 2;
        s.backward = rng() % 2;
        op = rng() % 2 ? rr::attention_naive(s) : rr::attention_flash(s);
        break;
      }
      default:
        op = rr::matmul_per_example(dimr(0, 8), dimr(4, 10), dimr(4, 10), {t, t, t, ""});
    }
    if (!c.has_peak(op.compute)) continue;
    if (!op.link.empty() && !c.intra_node) continue;  // a CPU socket's file lists no link
    const auto b = rr::bound(op, c);
    ASSERT_LE(b.t_lower, b.t_upper);
    ASSERT_LE(b.t_upper, 2 * b.t_lower * (1 + 1e-12)) << op.op << " " << op.shape << " on " << c.id;
    ASSERT_EQ(b.t_lower, std::max(b.t_math, b.t_comm));
    ASSERT_GE(b.fraction_of_peak, 0);
    ASSERT_LE(b.fraction_of_peak, 1);
    ++checked;
  }
  EXPECT_GT(checked, 1500);
}
