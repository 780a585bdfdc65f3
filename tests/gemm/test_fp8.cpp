// FP8 GEMM with DeepGEMM semantics: every ISA path against the scalar reference and an fp64
// product of the dequantized operands, DeepGEMM's calc_diff against the unquantized product,
// packed weights, grouped layouts (padding rows untouched), quantization helpers, bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ridge/core.hpp"
#include "ridge/gemm.hpp"
#include "ridge/gemm_fp8.hpp"
#include "common/expect_error.hpp"
#include "core/dispatch.hpp"

namespace {

using ridge::bf16;
using ridge::fp8_e4m3;
using ridge::MatrixView;
using ridge::TensorView;
namespace cpu = ridge::cpu;
namespace gemm = ridge::gemm;
namespace dispatch = ridge::dispatch;

bool small() {
  const char* s = std::getenv("RIDGE_TEST_SMALL");
  return s && std::string(s) == "1";
}

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// DeepGEMM's similarity metric: 0 for identical tensors, ~1 for unrelated ones.
double calc_diff(const std::vector<double>& x, const std::vector<double>& y) {
  double xy = 0, xx_yy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    xy += x[i] * y[i];
    xx_yy += x[i] * x[i] + y[i] * y[i];
  }
  return 1.0 - 2.0 * xy / xx_yy;
}

// A quantized operand pair plus everything the checks need.
struct Operands {
  int64_t m, n, k;
  std::vector<float> af, bf;  // unquantized
  gemm::Fp8Matrix a, b;       // per-token A, per-block B
  Operands(int64_t m_, int64_t n_, int64_t k_, uint32_t seed) : m(m_), n(n_), k(k_) {
    af = randn(static_cast<size_t>(m * k), seed);
    bf = randn(static_cast<size_t>(n * k), seed + 1);
    a = gemm::per_token_cast_to_fp8(MatrixView<const float>{af.data(), m, k, k});
    b = gemm::per_block_cast_to_fp8(MatrixView<const float>{bf.data(), n, k, k});
  }
  double adq(int64_t i, int64_t kk) const {
    return double(ridge::to_float(a.values[i * k + kk])) * a.scales[i * a.scale_cols + kk / 128];
  }
  double bdq(int64_t j, int64_t kk) const {
    return double(ridge::to_float(b.values[j * k + kk])) * b.scales[(j / 128) * b.scale_cols + kk / 128];
  }
  // fp64 product of the dequantized operands, and sum of |terms| for the rounding bound.
  void exact(std::vector<double>& out, std::vector<double>& abssum) const {
    out.assign(static_cast<size_t>(m * n), 0.0);
    abssum.assign(static_cast<size_t>(m * n), 0.0);
    std::vector<double> ad(static_cast<size_t>(m * k)), bd(static_cast<size_t>(n * k));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t kk = 0; kk < k; ++kk) ad[i * k + kk] = adq(i, kk);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t kk = 0; kk < k; ++kk) bd[j * k + kk] = bdq(j, kk);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, sa = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const double t = ad[i * k + kk] * bd[j * k + kk];
          s += t;
          sa += std::fabs(t);
        }
        out[i * n + j] = s;
        abssum[i * n + j] = sa;
      }
  }
  // fp32 rounding bound for a 128-term exact-product block sum plus the block promotion chain.
  double tol_factor() const { return (128.0 + double((k + 127) / 128) + 4.0) * std::ldexp(1.0, -24); }
};

// Every path this machine runs whose FP8 kernels differ (core/dispatch.hpp): each ISA, on avx512bf16
// (and amx's decode rows) both fp8 widenings (byte permutes with VBMI, arithmetic without) when the
// CPU has VBMI, and the AMX tile kernels on the emulator.
std::vector<dispatch::Path> isas() {
  return dispatch::paths({dispatch::Dtype::fp8});
}

struct Shape {
  int64_t m, n, k;
};

std::vector<Shape> shapes() {
  std::vector<Shape> s = {{1, 1, 1},
                          {1, 7, 17},
                          {7, 1, 3},
                          {7, 33, 130},
                          {17, 7, 129},
                          {6, 32, 128},
                          {13, 37, 257},
                          {29, 61, 576},
                          {3, 300, 100},
                          {1, 129, 1000},
                          // decode steps: B's rows in address order (short rows, A in L1), then
                          // streaming (A past half of L1; rows of B past 4 KiB)
                          {2, 40, 700},
                          {4, 33, 2500},
                          {1, 20, 4500}};
  if (!small()) {
    s.push_back({129, 127, 576});
    s.push_back({64, 2112, 256});
    s.push_back({70, 96, 1153});
    s.push_back({16, 515, 700});
    s.push_back({600, 256, 300});  // several row blocks per thread: B packed over all of K once
  }
  return s;
}

TEST(Fp8Gemm, EveryIsaMatchesReferenceAndExactProduct) {
  uint32_t seed = 1;
  for (const auto& sh : shapes()) {
    Operands op(sh.m, sh.n, sh.k, seed++);
    std::vector<double> ex, abssum;
    op.exact(ex, abssum);
    std::vector<float> ref(static_cast<size_t>(sh.m * sh.n));
    gemm::fp8_gemm_nt_reference(op.a.view(), op.a.scale_view(), op.b.view(), op.b.scale_view(),
                                MatrixView<float>{ref.data(), sh.m, sh.n, sh.n});
    const double tf = op.tol_factor();
    for (size_t i = 0; i < ref.size(); ++i)
      ASSERT_NEAR(ref[i], ex[i], tf * abssum[i] + 1e-30)
          << "reference m=" << sh.m << " n=" << sh.n << " k=" << sh.k;
    for (const auto& path : isas()) {
      dispatch::ScopedPath guard(path);
      std::vector<float> d(static_cast<size_t>(sh.m * sh.n), NAN);
      gemm::fp8_gemm_nt(op.a.view(), op.a.scale_view(), op.b.view(), op.b.scale_view(),
                        MatrixView<float>{d.data(), sh.m, sh.n, sh.n});
      std::vector<bf16> db(static_cast<size_t>(sh.m * sh.n));
      gemm::fp8_gemm_nt(op.a.view(), op.a.scale_view(), op.b.view(), op.b.scale_view(),
                        MatrixView<bf16>{db.data(), sh.m, sh.n, sh.n});
      for (size_t i = 0; i < d.size(); ++i) {
        const double t = tf * abssum[i] + 1e-30;
        ASSERT_NEAR(d[i], ex[i], t) << dispatch::name(path) << " m=" << sh.m << " n=" << sh.n << " k=" << sh.k
                                    << " at " << i;
        ASSERT_NEAR(d[i], ref[i], 2 * t) << dispatch::name(path);
        // bf16 output: one rounding of the fp32 result.
        ASSERT_NEAR(ridge::to_float(db[i]), ex[i], std::fabs(ex[i]) * std::ldexp(1.0, -8) + t)
            << dispatch::name(path) << " bf16 out";
      }
    }
  }
}

// Every e4m3 code (subnormals included) must widen exactly: D[0, j] = A[0, j] through an identity B.
TEST(Fp8Gemm, WideningIsExactForEveryCode) {
  const int64_t k = 256, n = 256;
  std::vector<fp8_e4m3> a(k), b(static_cast<size_t>(n * k), fp8_e4m3{0});
  for (int64_t i = 0; i < k; ++i) a[i] = fp8_e4m3{static_cast<uint8_t>((i & 0x7F) == 0x7F ? 0 : i)};
  for (int64_t j = 0; j < n; ++j) b[j * k + j] = ridge::to_fp8_e4m3(1.0f);
  std::vector<float> sa(2, 1.0f), sb(4, 1.0f);
  for (const auto& path : isas()) {
    dispatch::ScopedPath guard(path);
    std::vector<float> d(n, NAN);
    gemm::fp8_gemm_nt(MatrixView<const fp8_e4m3>{a.data(), 1, k, k},
                      MatrixView<const float>{sa.data(), 1, 2, 2},
                      MatrixView<const fp8_e4m3>{b.data(), n, k, k},
                      MatrixView<const float>{sb.data(), 2, 2, 2}, MatrixView<float>{d.data(), 1, n, n});
    for (int64_t j = 0; j < n; ++j)
      ASSERT_EQ(d[j], ridge::to_float(a[j])) << dispatch::name(path) << " code " << j;
  }
}

// A PackedFp8B records whether its codes hold a NaN (magnitude 0x7F); where none does, the AVX2 decode
// kernel widens without the NaN fix. B with two NaN codes (columns 5 and 64) against the same B with those
// codes 0: the NaN columns are NaN in every row on every path, packed and raw, and every other column is
// the same bits whether its packed B held a NaN (the NaN-aware widening) or not (the one without).
TEST(Fp8Gemm, PackedWeightsKeepNanCodesAndFiniteOnesBitForBit) {
  const int64_t n = 70, k = 301;
  for (const int64_t m : {1, 2, 3, 4, 7}) {
    Operands op(m, n, k, static_cast<uint32_t>(31 + m));
    op.b.values[5 * k + 200] = fp8_e4m3{0};
    op.b.values[64 * k + 3] = fp8_e4m3{0};
    const auto clean = gemm::PackedFp8B::pack(op.b.view(), op.b.scale_view());
    op.b.values[5 * k + 200] = fp8_e4m3{0x7F};
    op.b.values[64 * k + 3] = fp8_e4m3{0xFF};
    const auto with_nan = gemm::PackedFp8B::pack(op.b.view(), op.b.scale_view());
    for (const auto& path : isas()) {
      dispatch::ScopedPath guard(path);
      SCOPED_TRACE(dispatch::name(path) + " m=" + std::to_string(m));
      std::vector<float> raw(static_cast<size_t>(m * n)), pn(raw.size()), pc(raw.size());
      gemm::fp8_gemm_nt(op.a.view(), op.a.scale_view(), op.b.view(), op.b.scale_view(),
                        MatrixView<float>{raw.data(), m, n, n});
      gemm::fp8_gemm_nt(op.a.view(), op.a.scale_view(), with_nan, MatrixView<float>{pn.data(), m, n, n});
      gemm::fp8_gemm_nt(op.a.view(), op.a.scale_view(), clean, MatrixView<float>{pc.data(), m, n, n});
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const bool nan_column = j == 5 || j == 64;
          ASSERT_EQ(std::isnan(pn[i * n + j]), nan_column) << "packed, row " << i << " column " << j;
          ASSERT_EQ(std::isnan(raw[i * n + j]), nan_column) << "raw, row " << i << " column " << j;
          ASSERT_FALSE(std::isnan(pc[i * n + j])) << "row " << i << " column " << j;
          if (!nan_column) {
            ASSERT_EQ(pn[i * n + j], pc[i * n + j]) << "row " << i << " column " << j;
          }
        }
    }
  }
}

TEST(Fp8Gemm, CalcDiffAgainstUnquantizedProduct) {
  const std::vector<Shape> s = small() ? std::vector<Shape>{{16, 64, 576}, {1, 130, 512}}
                                       : std::vector<Shape>{{64, 256, 1024}, {129, 300, 576}, {4, 2112, 512}};
  uint32_t seed = 100;
  for (const auto& sh : s) {
    Operands op(sh.m, sh.n, sh.k, seed++);
    std::vector<double> truth(static_cast<size_t>(sh.m * sh.n));
    for (int64_t i = 0; i < sh.m; ++i)
      for (int64_t j = 0; j < sh.n; ++j) {
        double acc = 0;
        for (int64_t kk = 0; kk < sh.k; ++kk) acc += double(op.af[i * sh.k + kk]) * op.bf[j * sh.k + kk];
        truth[i * sh.n + j] = acc;
      }
    for (const auto& path : isas()) {
      dispatch::ScopedPath guard(path);
      std::vector<bf16> d(static_cast<size_t>(sh.m * sh.n));
      gemm::fp8_gemm_nt(op.a.view(), op.a.scale_view(), op.b.view(), op.b.scale_view(),
                        MatrixView<bf16>{d.data(), sh.m, sh.n, sh.n});
      std::vector<double> got(d.size());
      for (size_t i = 0; i < d.size(); ++i) got[i] = ridge::to_float(d[i]);
      const double diff = calc_diff(got, truth);
      EXPECT_LT(diff, 1e-3) << dispatch::name(path) << " m=" << sh.m << " n=" << sh.n << " k=" << sh.k;
      EXPECT_GE(diff, 0.0);
    }
  }
}

// Strided A and D, accumulate (C beside D and C aliasing D), bf16 output with C, and packed weights,
// at row counts that reach every small-m path: streaming (3), rows in ymm / zmm lanes (7, 13),
// narrow (19), blocked (40).
TEST(Fp8Gemm, AccumulateStridesAndPackedWeights) {
  const int64_t n = 70, k = 301, lda = 310, ldd = 75;  // k odd: a half pair; n: a ragged last panel
  for (const int64_t m : {1, 2, 3, 4, 7, 13, 19, 40}) {
    Operands op(m, n, k, static_cast<uint32_t>(7 + m));
    // A copy of A with a wider row stride, and a strided D.
    std::vector<fp8_e4m3> as(static_cast<size_t>(m * lda), fp8_e4m3{0x7F});
    for (int64_t i = 0; i < m; ++i) std::memcpy(&as[i * lda], &op.a.values[i * k], k);
    const auto c = randn(static_cast<size_t>(m * ldd), 9);
    std::vector<float> ref(static_cast<size_t>(m * n));
    gemm::fp8_gemm_nt_reference(op.a.view(), op.a.scale_view(), op.b.view(), op.b.scale_view(),
                                MatrixView<float>{ref.data(), m, n, n});
    const auto packed = gemm::PackedFp8B::pack(op.b.view(), op.b.scale_view());
    EXPECT_EQ(packed.n(), n);
    EXPECT_EQ(packed.k(), k);
    EXPECT_LE(packed.bytes(), size_t((n + 31) / 32 * 32) * size_t(k + 1));  // still one byte per element
    for (const auto& path : isas()) {
      dispatch::ScopedPath guard(path);
      SCOPED_TRACE(dispatch::name(path) + " m=" + std::to_string(m));
      std::vector<float> d(static_cast<size_t>(m * ldd), -7.0f);
      gemm::fp8_gemm_nt(MatrixView<const fp8_e4m3>{as.data(), m, k, lda}, op.a.scale_view(), op.b.view(),
                        op.b.scale_view(), MatrixView<float>{d.data(), m, n, ldd},
                        MatrixView<const float>{c.data(), m, n, ldd});
      std::vector<bf16> db(static_cast<size_t>(m * ldd), bf16{0x7F80});
      gemm::fp8_gemm_nt(MatrixView<const fp8_e4m3>{as.data(), m, k, lda}, op.a.scale_view(), op.b.view(),
                        op.b.scale_view(), MatrixView<bf16>{db.data(), m, n, ldd},
                        MatrixView<const float>{c.data(), m, n, ldd});
      std::vector<float> dp(static_cast<size_t>(m * n));
      gemm::fp8_gemm_nt(op.a.view(), op.a.scale_view(), packed, MatrixView<float>{dp.data(), m, n, n});
      // In-place accumulate: C aliases D, with packed and with raw B.
      std::vector<float> acc(c), acc_raw(c);
      gemm::fp8_gemm_nt(op.a.view(), op.a.scale_view(), packed, MatrixView<float>{acc.data(), m, n, ldd},
                        MatrixView<const float>{acc.data(), m, n, ldd});
      gemm::fp8_gemm_nt(op.a.view(), op.a.scale_view(), op.b.view(), op.b.scale_view(),
                        MatrixView<float>{acc_raw.data(), m, n, ldd},
                        MatrixView<const float>{acc_raw.data(), m, n, ldd});
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          const float r = ref[i * n + j];
          const double tol = 1e-5 * (std::fabs(r) + 1.0);
          const double want = double(r) + c[i * ldd + j];
          ASSERT_NEAR(d[i * ldd + j], want, tol);
          ASSERT_NEAR(ridge::to_float(db[i * ldd + j]), want, std::fabs(want) * std::ldexp(1.0, -8) + tol)
              << "bf16 out";
          ASSERT_NEAR(dp[i * n + j], r, tol) << "packed";
          ASSERT_NEAR(acc[i * ldd + j], want, tol) << "in place, packed";
          ASSERT_NEAR(acc_raw[i * ldd + j], want, tol) << "in place";
        }
        for (int64_t j = n; j < ldd; ++j) {
          ASSERT_EQ(d[i * ldd + j], -7.0f) << "wrote past n";
          ASSERT_EQ(db[i * ldd + j].bits, 0x7F80) << "wrote past n (bf16)";
        }
      }
    }
  }
}

TEST(Fp8Grouped, ContiguousLayoutGroupByGroup) {
  const int64_t G = 3, n = 130, k = 260, align = gemm::m_alignment_for_contiguous_layout();
  const std::vector<int64_t> rows = {align + 5, 0, 2 * align - 3};  // group 1 empty
  std::vector<int32_t> idx;
  for (int64_t g = 0; g < G; ++g) {
    const int64_t padded = (rows[g] + align - 1) / align * align;
    for (int64_t r = 0; r < padded; ++r) idx.push_back(r < rows[g] ? int32_t(g) : -1);
  }
  idx.insert(idx.end(), align, -1);  // a block of pure padding
  const int64_t m_sum = static_cast<int64_t>(idx.size());
  Operands a(m_sum, 1, k, 21);
  std::vector<Operands> bs;
  for (int64_t g = 0; g < G; ++g) bs.emplace_back(1, n, k, 30 + g);
  const int64_t nb = gemm::fp8_scale_blocks(n), kb = gemm::fp8_scale_blocks(k);
  std::vector<fp8_e4m3> b(static_cast<size_t>(G * n * k));
  std::vector<float> sb(static_cast<size_t>(G * nb * kb));
  for (int64_t g = 0; g < G; ++g) {
    std::memcpy(&b[g * n * k], bs[g].b.values.data(), n * k);
    std::memcpy(&sb[g * nb * kb], bs[g].b.scales.data(), sizeof(float) * nb * kb);
  }
  auto bt = TensorView<const fp8_e4m3>::contiguous(b.data(), {G, n, k});
  auto sbt = TensorView<const float>::contiguous(sb.data(), {G, nb, kb});
  // Every row of A against every group's B, once; each row is then checked against its own group.
  std::vector<std::vector<float>> refs(G, std::vector<float>(static_cast<size_t>(m_sum * n)));
  for (int64_t g = 0; g < G; ++g)
    gemm::fp8_gemm_nt_reference(a.a.view(), a.a.scale_view(), bs[g].b.view(), bs[g].b.scale_view(),
                                MatrixView<float>{refs[g].data(), m_sum, n, n});
  const bf16 sentinel = ridge::to_bf16(12345.0f);
  for (const auto& path : isas()) {
    dispatch::ScopedPath guard(path);
    std::vector<bf16> d(static_cast<size_t>(m_sum * n), sentinel);
    gemm::m_grouped_fp8_gemm_nt_contiguous(a.a.view(), a.a.scale_view(), bt, sbt,
                                           MatrixView<bf16>{d.data(), m_sum, n, n}, idx);
    for (int64_t r = 0; r < m_sum; ++r) {
      const int32_t g = idx[r];
      if (g < 0) {
        for (int64_t j = 0; j < n; ++j) ASSERT_EQ(d[r * n + j].bits, sentinel.bits) << "padding row " << r;
        continue;
      }
      const float* ref = &refs[g][r * n];
      for (int64_t j = 0; j < n; ++j)
        ASSERT_NEAR(ridge::to_float(d[r * n + j]), ref[j], std::fabs(ref[j]) * 0.0079 + 1e-4)
            << dispatch::name(path) << " row " << r << " group " << g;
    }
  }
}

TEST(Fp8Grouped, MaskedLayoutLeavesRowsPastTheMaskUntouched) {
  const int64_t G = 3, m_max = small() ? 9 : 20, n = 70, k = 200;
  const std::vector<int32_t> masked = {0, 7, static_cast<int32_t>(m_max)};
  const int64_t kb = gemm::fp8_scale_blocks(k), nb = gemm::fp8_scale_blocks(n);
  Operands a(G * m_max, 1, k, 41);
  std::vector<Operands> bs;
  for (int64_t g = 0; g < G; ++g) bs.emplace_back(1, n, k, 50 + g);
  std::vector<fp8_e4m3> b(static_cast<size_t>(G * n * k));
  std::vector<float> sb(static_cast<size_t>(G * nb * kb));
  for (int64_t g = 0; g < G; ++g) {
    std::memcpy(&b[g * n * k], bs[g].b.values.data(), n * k);
    std::memcpy(&sb[g * nb * kb], bs[g].b.scales.data(), sizeof(float) * nb * kb);
  }
  std::vector<std::vector<float>> refs(G, std::vector<float>(static_cast<size_t>(G * m_max * n)));
  for (int64_t g = 0; g < G; ++g)
    gemm::fp8_gemm_nt_reference(a.a.view(), a.a.scale_view(), bs[g].b.view(), bs[g].b.scale_view(),
                                MatrixView<float>{refs[g].data(), G * m_max, n, n});
  const bf16 sentinel = ridge::to_bf16(-999.0f);
  for (const auto& path : isas()) {
    dispatch::ScopedPath guard(path);
    std::vector<bf16> d(static_cast<size_t>(G * m_max * n), sentinel);
    gemm::m_grouped_fp8_gemm_nt_masked(
        TensorView<const fp8_e4m3>::contiguous(a.a.values.data(), {G, m_max, k}),
        TensorView<const float>::contiguous(a.a.scales.data(), {G, m_max, kb}),
        TensorView<const fp8_e4m3>::contiguous(b.data(), {G, n, k}),
        TensorView<const float>::contiguous(sb.data(), {G, nb, kb}),
        TensorView<bf16>::contiguous(d.data(), {G, m_max, n}), masked, 8);
    for (int64_t g = 0; g < G; ++g)
      for (int64_t r = 0; r < m_max; ++r) {
        const int64_t row = g * m_max + r;
        if (r >= masked[g]) {
          for (int64_t j = 0; j < n; ++j) ASSERT_EQ(d[row * n + j].bits, sentinel.bits) << "masked row";
          continue;
        }
        const float* ref = &refs[g][row * n];
        for (int64_t j = 0; j < n; ++j)
          ASSERT_NEAR(ridge::to_float(d[row * n + j]), ref[j], std::fabs(ref[j]) * 0.0079 + 1e-4)
              << dispatch::name(path) << " group " << g << " row " << r;
      }
  }
}

// The one driver's FP8 cases: a bf16 D accumulated across several K blocks (k = 1300: at least three
// K blocks on any L1 up to 64 KiB, the fp32 scratch carrying the partial sums) with an fp32 C added at
// the first block; n = 300 crosses two 128-column scale blocks; m reaches every path (streaming 1, 4;
// rows in lanes 7, 16; narrow 17, 32; one row block 45; several row blocks 600), raw and packed B,
// on 1 and 3 threads (the small-m split must keep 16-column blocks inside a scale block).
TEST(Fp8Gemm, Bf16OutputAcrossKBlocksWithCEveryPath) {
  const int64_t n = 300, k = 1300;
  const std::vector<int64_t> ms =
      small() ? std::vector<int64_t>{1, 7, 17, 45} : std::vector<int64_t>{1, 4, 7, 16, 17, 32, 45, 600};
  const int saved = gemm::get_num_threads();
  for (const int64_t m : ms) {
    Operands op(m, n, k, static_cast<uint32_t>(300 + m));
    const auto c = randn(static_cast<size_t>(m * n), 17);
    std::vector<float> ref(static_cast<size_t>(m * n));
    gemm::fp8_gemm_nt_reference(op.a.view(), op.a.scale_view(), op.b.view(), op.b.scale_view(),
                                MatrixView<float>{ref.data(), m, n, n});
    const auto packed = gemm::PackedFp8B::pack(op.b.view(), op.b.scale_view());
    const MatrixView<const float> cv{c.data(), m, n, n};
    for (const int threads : {1, 3}) {
      gemm::set_num_threads(threads);
      for (const auto& path : isas()) {
        dispatch::ScopedPath guard(path);
        SCOPED_TRACE(dispatch::name(path) + " m=" + std::to_string(m) +
                     " threads=" + std::to_string(threads));
        std::vector<bf16> db(static_cast<size_t>(m * n)), dp(static_cast<size_t>(m * n));
        std::vector<float> df(static_cast<size_t>(m * n));
        gemm::fp8_gemm_nt(op.a.view(), op.a.scale_view(), op.b.view(), op.b.scale_view(),
                          MatrixView<bf16>{db.data(), m, n, n}, cv);
        gemm::fp8_gemm_nt(op.a.view(), op.a.scale_view(), packed, MatrixView<bf16>{dp.data(), m, n, n}, cv);
        gemm::fp8_gemm_nt(op.a.view(), op.a.scale_view(), op.b.view(), op.b.scale_view(),
                          MatrixView<float>{df.data(), m, n, n}, cv);
        for (int64_t i = 0; i < m * n; ++i) {
          const double want = double(ref[i]) + c[i];
          const double tol = 1e-5 * (std::fabs(ref[i]) + std::fabs(c[i]) + 1.0);
          ASSERT_NEAR(df[i], want, tol) << "fp32 out at " << i;
          ASSERT_NEAR(ridge::to_float(db[i]), want, std::fabs(want) * std::ldexp(1.0, -8) + tol)
              << "bf16 out at " << i;
          // The bf16 result is the fp32 one rounded once (partial sums stay fp32 across K blocks).
          ASSERT_EQ(db[i].bits, ridge::to_bf16(df[i]).bits)
              << "bf16 out is not the fp32 out rounded, at " << i;
          ASSERT_EQ(dp[i].bits, db[i].bits) << "packed B differs from raw B at " << i;
        }
      }
    }
  }
  gemm::set_num_threads(saved);
}

// The vector FP8 packers (AVX2: raw rows through an 8 x 8 transpose, PackedFp8B panels through a byte
// shuffle) against the table that RIDGE_GEMM_SCALAR_PACK=1 selects: the same panels, so the same bits,
// for raw and packed B, with rows, K and columns that end mid-group.
TEST(Fp8Gemm, VectorPackersMatchTheTable) {
  for (const auto& sh : std::vector<Shape>{{20, 37, 300}, {45, 100, 257}, {17, 16, 129}}) {
    Operands op(sh.m, sh.n, sh.k, 91);
    const auto packed = gemm::PackedFp8B::pack(op.b.view(), op.b.scale_view());
    for (const auto& path : isas()) {
      dispatch::ScopedPath guard(path);
      SCOPED_TRACE(dispatch::name(path) + " m=" + std::to_string(sh.m) + " n=" + std::to_string(sh.n));
      std::vector<float> raw[2], pk[2];
      for (int scalar = 0; scalar < 2; ++scalar) {
        if (scalar) setenv("RIDGE_GEMM_SCALAR_PACK", "1", 1);
        raw[scalar].assign(static_cast<size_t>(sh.m * sh.n), NAN);
        pk[scalar].assign(static_cast<size_t>(sh.m * sh.n), NAN);
        gemm::fp8_gemm_nt(op.a.view(), op.a.scale_view(), op.b.view(), op.b.scale_view(),
                          MatrixView<float>{raw[scalar].data(), sh.m, sh.n, sh.n});
        gemm::fp8_gemm_nt(op.a.view(), op.a.scale_view(), packed,
                          MatrixView<float>{pk[scalar].data(), sh.m, sh.n, sh.n});
        unsetenv("RIDGE_GEMM_SCALAR_PACK");
      }
      for (size_t i = 0; i < raw[0].size(); ++i) {
        ASSERT_EQ(raw[0][i], raw[1][i]) << "raw B at " << i;
        ASSERT_EQ(pk[0][i], pk[1][i]) << "packed B at " << i;
      }
    }
  }
}

// The FP8 blocking does not depend on the thread count, so neither do the bits: every thread takes
// the same K blocks whichever path (narrow, one row block, several) its rectangle falls to.
TEST(Fp8Gemm, ThreadCountDoesNotChangeBits) {
  const int saved = gemm::get_num_threads();
  for (const auto& sh : std::vector<Shape>{{40, 333, 900}, {200, 130, 513}, {9, 1000, 260}}) {
    Operands op(sh.m, sh.n, sh.k, 77);
    std::vector<float> d1(static_cast<size_t>(sh.m * sh.n)), d3(d1.size());
    gemm::set_num_threads(1);
    gemm::fp8_gemm_nt(op.a.view(), op.a.scale_view(), op.b.view(), op.b.scale_view(),
                      MatrixView<float>{d1.data(), sh.m, sh.n, sh.n});
    gemm::set_num_threads(3);
    gemm::fp8_gemm_nt(op.a.view(), op.a.scale_view(), op.b.view(), op.b.scale_view(),
                      MatrixView<float>{d3.data(), sh.m, sh.n, sh.n});
    for (size_t i = 0; i < d1.size(); ++i) ASSERT_EQ(d1[i], d3[i]) << "m=" << sh.m << " at " << i;
  }
  gemm::set_num_threads(saved);
}

// FP8 blocking comes from the same driver rule as dense, with the kernel's K granule: every K block
// starts on a 128 boundary (scale blocks never straddle one).
TEST(Fp8Gemm, BlockingHasKBlocksOfWholeScaleBlocks) {
  for (cpu::Isa isa : cpu::supported_isas())
    for (const int64_t k : {1, 100, 129, 1300, 7168}) {
      const gemm::Blocking b = gemm::blocking(ridge::DType::fp8_e4m3, isa, k);
      EXPECT_EQ(b.kc % 128, 0) << b.kernel << " k=" << k;
      EXPECT_GE(b.kc, 128);
      EXPECT_EQ(b.mc % b.mr, 0);
      EXPECT_EQ(b.nc % b.nr, 0);
      EXPECT_EQ(128 % b.nr, 0) << b.kernel << ": a micro-tile must not straddle a 128-column scale block";
      EXPECT_EQ(std::string(b.kernel).rfind("fp8_", 0), 0u) << b.kernel;
    }
}

// Groups of one n and k for the packed grouped GEMMs: per group a B quantized from its own values, kept
// both as the raw stack [G, n, k] with scales [G, ceil(n/128), ceil(k/128)] and as one PackedFp8B each.
struct Fp8Groups {
  int64_t G, n, k, nb, kb;
  std::vector<fp8_e4m3> b;
  std::vector<float> sb;
  std::vector<gemm::PackedFp8B> packed;
  std::vector<Operands> ops;  // group g's B in ops[g].b
  Fp8Groups(int64_t groups, int64_t n_, int64_t k_, uint32_t seed)
      : G(groups), n(n_), k(k_), nb(gemm::fp8_scale_blocks(n_)), kb(gemm::fp8_scale_blocks(k_)) {
    b.resize(static_cast<size_t>(G * n * k));
    sb.resize(static_cast<size_t>(G * nb * kb));
    for (int64_t g = 0; g < G; ++g) {
      ops.emplace_back(1, n, k, seed + static_cast<uint32_t>(g));
      std::memcpy(&b[g * n * k], ops[g].b.values.data(), n * k);
      std::memcpy(&sb[g * nb * kb], ops[g].b.scales.data(), sizeof(float) * nb * kb);
      packed.push_back(gemm::PackedFp8B::pack(ops[g].b.view(), ops[g].b.scale_view()));
    }
  }
  TensorView<const fp8_e4m3> bt() const {
    return TensorView<const fp8_e4m3>::contiguous(b.data(), {G, n, k});
  }
  TensorView<const float> sbt() const { return TensorView<const float>::contiguous(sb.data(), {G, nb, kb}); }
};

// Runs fn at 1, 2 and 3 threads: the same bits at each (returned: the 1-thread result).
template <typename V, typename F>
V same_at_every_thread_count(const F& fn, const std::string& what) {
  const int saved = gemm::get_num_threads();
  gemm::set_num_threads(1);
  const V one = fn();
  for (const int t : {2, 3}) {
    gemm::set_num_threads(t);
    const V other = fn();
    EXPECT_EQ(std::memcmp(other.data(), one.data(), one.size() * sizeof(one[0])), 0)
        << what << ": " << t << " threads against 1";
  }
  gemm::set_num_threads(saved);
  return one;
}

// The grouped GEMMs on one PackedFp8B per group, contiguous (prefill) and masked (decode), on every path:
// the same bits at 1, 2 and 3 threads and as a loop of the packed dense fp8_gemm_nt (one call per group),
// padding rows and rows past the mask untouched, and the computed rows held to the scalar reference by
// calc_diff, as are the raw-B grouped GEMM's (not bit for bit: at 1..4 rows the raw and the packed small-m
// kernels sum in other orders, and an fp32 D shows it in its last bits). The groups reach each kernel on
// panels: 1..4 rows (the packed small-m kernels), 7 and 16 (the blocked path), 40 and past an aligned
// block; empty groups; a full masked slab. n = 150: two 128-column scale blocks, a ragged last panel;
// k = 321: three K blocks, a half pair. Against the reference the difference is the fp32 sums' order (and
// a bf16 D's one rounding, ~2^-9 relative: calc_diff ~ 2^-18), so the bound is 1e-5, far inside
// DeepGEMM's 1e-3 (which is against the unquantized product).
template <typename TD>
void packed_grouped(const Fp8Groups& w, const std::vector<int64_t>& counts,
                    const std::vector<int32_t>& masked, int64_t m_max, uint32_t seed) {
  const int64_t G = w.G, n = w.n, k = w.k, kb = w.kb;
  const std::string out = std::is_same_v<TD, bf16> ? "bf16 d" : "f32 d";
  TD sentinel;
  if constexpr (std::is_same_v<TD, bf16>)
    sentinel = ridge::to_bf16(-777.0f);
  else
    sentinel = -777.0f;
  auto value = [](TD v) -> double {
    if constexpr (std::is_same_v<TD, bf16>)
      return ridge::to_float(v);
    else
      return v;
  };
  // Rows where computed(row) is false still hold the sentinel; the others, packed and raw, against ref.
  auto check_rows = [&](const std::vector<TD>& got, const std::vector<TD>& raw,
                        const std::vector<double>& ref, const auto& computed, const std::string& layout) {
    std::vector<double> x, xr, y;
    for (size_t i = 0; i < got.size(); ++i) {
      const auto row = static_cast<int64_t>(i) / n;
      if (!computed(row)) {
        ASSERT_EQ(std::memcmp(&got[i], &sentinel, sizeof(TD)), 0) << layout << ": row " << row << " written";
        continue;
      }
      x.push_back(value(got[i]));
      xr.push_back(value(raw[i]));
      y.push_back(ref[i]);
    }
    EXPECT_LT(calc_diff(x, y), 1e-5) << layout << " against the reference";
    EXPECT_LT(calc_diff(xr, y), 1e-5) << layout << ", raw B, against the reference";
  };
  // Contiguous: each group's rows padded with -1 to the alignment.
  const int64_t align = gemm::m_alignment_for_contiguous_layout();
  std::vector<int32_t> idx;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t r = 0; r < (counts[g] + align - 1) / align * align; ++r)
      idx.push_back(r < counts[g] ? static_cast<int32_t>(g) : -1);
  const int64_t m_sum = static_cast<int64_t>(idx.size());
  const Operands a(m_sum, 1, k, seed);
  const MatrixView<const fp8_e4m3> av = a.a.view();
  const MatrixView<const float> sav = a.a.scale_view();
  // The reference: every row against its own group's B.
  std::vector<double> ref_c(static_cast<size_t>(m_sum * n), 0.0);
  for (int64_t r = 0; r < m_sum;) {
    int64_t e = r + 1;
    while (e < m_sum && idx[e] == idx[r]) ++e;
    if (idx[r] >= 0) {
      std::vector<float> part(static_cast<size_t>((e - r) * n));
      gemm::fp8_gemm_nt_reference(MatrixView<const fp8_e4m3>{av.data + r * k, e - r, k, k},
                                  MatrixView<const float>{sav.data + r * kb, e - r, kb, kb},
                                  w.ops[idx[r]].b.view(), w.ops[idx[r]].b.scale_view(),
                                  MatrixView<float>{part.data(), e - r, n, n});
      for (size_t i = 0; i < part.size(); ++i) ref_c[static_cast<size_t>(r * n) + i] = part[i];
    }
    r = e;
  }
  // Masked: slabs [G, m_max, k] of A's first G * m_max rows.
  ASSERT_LE(G * m_max, m_sum);
  const auto am = TensorView<const fp8_e4m3>::contiguous(av.data, {G, m_max, k});
  const auto sam = TensorView<const float>::contiguous(sav.data, {G, m_max, kb});
  std::vector<double> ref_m(static_cast<size_t>(G * m_max * n), 0.0);
  for (int64_t g = 0; g < G; ++g) {
    std::vector<float> part(static_cast<size_t>(m_max * n));
    gemm::fp8_gemm_nt_reference(MatrixView<const fp8_e4m3>{av.data + g * m_max * k, m_max, k, k},
                                MatrixView<const float>{sav.data + g * m_max * kb, m_max, kb, kb},
                                w.ops[g].b.view(), w.ops[g].b.scale_view(),
                                MatrixView<float>{part.data(), m_max, n, n});
    for (size_t i = 0; i < part.size(); ++i) ref_m[static_cast<size_t>(g * m_max * n) + i] = part[i];
  }
  for (const auto& path : isas()) {
    dispatch::ScopedPath guard(path);
    const std::string where = dispatch::name(path) + " " + out;
    SCOPED_TRACE(where);
    // ---- contiguous ----
    auto fresh_c = [&] { return std::vector<TD>(static_cast<size_t>(m_sum * n), sentinel); };
    const std::vector<TD> got = same_at_every_thread_count<std::vector<TD>>(
        [&] {
          auto d = fresh_c();
          gemm::m_grouped_fp8_gemm_nt_contiguous(av, sav, std::span<const gemm::PackedFp8B>(w.packed),
                                                 MatrixView<TD>{d.data(), m_sum, n, n}, idx);
          return d;
        },
        "contiguous " + where);
    auto raw = fresh_c(), loop = fresh_c();
    gemm::m_grouped_fp8_gemm_nt_contiguous(av, sav, w.bt(), w.sbt(), MatrixView<TD>{raw.data(), m_sum, n, n},
                                           idx);
    for (int64_t r = 0; r < m_sum;) {
      int64_t e = r + 1;
      while (e < m_sum && idx[e] == idx[r]) ++e;
      if (idx[r] >= 0)
        gemm::fp8_gemm_nt(MatrixView<const fp8_e4m3>{av.data + r * k, e - r, k, k},
                          MatrixView<const float>{sav.data + r * kb, e - r, kb, kb}, w.packed[idx[r]],
                          MatrixView<TD>{loop.data() + r * n, e - r, n, n});
      r = e;
    }
    EXPECT_EQ(std::memcmp(got.data(), loop.data(), got.size() * sizeof(TD)), 0)
        << "contiguous: against a loop of the packed fp8_gemm_nt";
    check_rows(
        got, raw, ref_c, [&](int64_t r) { return idx[r] >= 0; }, "contiguous");
    // ---- masked ----
    auto fresh_m = [&] { return std::vector<TD>(static_cast<size_t>(G * m_max * n), sentinel); };
    const std::vector<TD> gotm = same_at_every_thread_count<std::vector<TD>>(
        [&] {
          auto d = fresh_m();
          gemm::m_grouped_fp8_gemm_nt_masked(am, sam, std::span<const gemm::PackedFp8B>(w.packed),
                                             TensorView<TD>::contiguous(d.data(), {G, m_max, n}), masked, 8);
          return d;
        },
        "masked " + where);
    auto rawm = fresh_m(), loopm = fresh_m();
    gemm::m_grouped_fp8_gemm_nt_masked(am, sam, w.bt(), w.sbt(),
                                       TensorView<TD>::contiguous(rawm.data(), {G, m_max, n}), masked, 8);
    for (int64_t g = 0; g < G; ++g)
      if (masked[g] > 0)
        gemm::fp8_gemm_nt(MatrixView<const fp8_e4m3>{av.data + g * m_max * k, masked[g], k, k},
                          MatrixView<const float>{sav.data + g * m_max * kb, masked[g], kb, kb}, w.packed[g],
                          MatrixView<TD>{loopm.data() + g * m_max * n, masked[g], n, n});
    EXPECT_EQ(std::memcmp(gotm.data(), loopm.data(), gotm.size() * sizeof(TD)), 0)
        << "masked: against a loop of the packed fp8_gemm_nt";
    check_rows(
        gotm, rawm, ref_m, [&](int64_t r) { return r % m_max < masked[r / m_max]; }, "masked");
  }
}

TEST(Fp8Grouped, PackedWeightsEqualRawAndADenseLoopOnEveryPath) {
  const Fp8Groups w(8, 150, 321, 600);
  const std::vector<int64_t> counts = small() ? std::vector<int64_t>{3, 0, 1, 16, 0, 7, 2, 4}
                                              : std::vector<int64_t>{70, 0, 3, 129, 16, 1, 2, 7};
  const int64_t m_max = small() ? 16 : 64;
  const std::vector<int32_t> masked = small() ? std::vector<int32_t>{1, 0, 3, 16, 4, 7, 2, 0}
                                              : std::vector<int32_t>{40, 0, 3, 64, 16, 1, 2, 7};
  packed_grouped<bf16>(w, counts, masked, m_max, 700);
  packed_grouped<float>(w, counts, masked, m_max, 701);
}

// Grouped layouts with nothing to do: every group masked to 0 rows, every row padding. D is untouched.
TEST(Fp8Grouped, AllGroupsEmptyLeaveDUntouched) {
  const int64_t G = 2, m_max = 5, n = 40, k = 130, kb = 2, nb = 1,
                align = gemm::m_alignment_for_contiguous_layout();
  std::vector<fp8_e4m3> a(static_cast<size_t>(G * m_max * k), fp8_e4m3{0x38}),
      b(static_cast<size_t>(G * n * k), fp8_e4m3{0x38});
  std::vector<float> sa(static_cast<size_t>(G * m_max * kb), 1.0f),
      sb(static_cast<size_t>(G * nb * kb), 1.0f);
  const bf16 sentinel = ridge::to_bf16(3.5f);
  std::vector<bf16> d(static_cast<size_t>(G * m_max * n), sentinel);
  const std::vector<int32_t> masked = {0, 0};
  gemm::m_grouped_fp8_gemm_nt_masked(TensorView<const fp8_e4m3>::contiguous(a.data(), {G, m_max, k}),
                                     TensorView<const float>::contiguous(sa.data(), {G, m_max, kb}),
                                     TensorView<const fp8_e4m3>::contiguous(b.data(), {G, n, k}),
                                     TensorView<const float>::contiguous(sb.data(), {G, nb, kb}),
                                     TensorView<bf16>::contiguous(d.data(), {G, m_max, n}), masked, 0);
  for (const auto& v : d) ASSERT_EQ(v.bits, sentinel.bits);
  std::vector<fp8_e4m3> ac(static_cast<size_t>(align * k), fp8_e4m3{0x38});
  std::vector<float> sac(static_cast<size_t>(align * kb), 1.0f);
  std::vector<bf16> dc(static_cast<size_t>(align * n), sentinel);
  const std::vector<int32_t> idx(static_cast<size_t>(align), -1);
  gemm::m_grouped_fp8_gemm_nt_contiguous(MatrixView<const fp8_e4m3>{ac.data(), align, k, k},
                                         MatrixView<const float>{sac.data(), align, kb, kb},
                                         TensorView<const fp8_e4m3>::contiguous(b.data(), {G, n, k}),
                                         TensorView<const float>::contiguous(sb.data(), {G, nb, kb}),
                                         MatrixView<bf16>{dc.data(), align, n, n}, idx);
  for (const auto& v : dc) ASSERT_EQ(v.bits, sentinel.bits);
}

TEST(Fp8Quant, PerTokenScalesRoundingAndTails) {
  const int64_t m = 5, k = 300;  // last block 44 wide
  auto x = randn(static_cast<size_t>(m * k), 3, 2.0f);
  for (int64_t kk = 128; kk < 256; ++kk) x[2 * k + kk] = 0.0f;  // an all-zero block: floored amax
  x[1 * k + 7] = 1000.0f;                                       // an outlier only its own block sees
  auto q = gemm::per_token_cast_to_fp8(MatrixView<const float>{x.data(), m, k, k});
  ASSERT_EQ(q.scale_cols, 3);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t b = 0; b < 3; ++b) {
      float amax = 0;
      for (int64_t kk = b * 128; kk < std::min<int64_t>(k, b * 128 + 128); ++kk)
        amax = std::max(amax, std::fabs(x[i * k + kk]));
      amax = std::max(amax, gemm::kFp8AmaxFloor);
      ASSERT_FLOAT_EQ(q.scales[i * 3 + b], amax / 448.0f);
      for (int64_t kk = b * 128; kk < std::min<int64_t>(k, b * 128 + 128); ++kk) {
        const auto want = ridge::to_fp8_e4m3(x[i * k + kk] * (448.0f / amax), ridge::Saturation::finite);
        ASSERT_EQ(q.values[i * k + kk].bits, want.bits) << i << "," << kk;
      }
    }
  // The block maximum maps to +-448 exactly.
  EXPECT_EQ(ridge::to_float(q.values[1 * k + 7]), 448.0f);
  EXPECT_FLOAT_EQ(q.scales[2 * 3 + 1], gemm::kFp8AmaxFloor / 448.0f);
  EXPECT_EQ(ridge::to_float(q.values[2 * k + 200]), 0.0f);
}

TEST(Fp8Quant, PerBlockScalesAndTails) {
  const int64_t n = 130, k = 200;
  auto x = randn(static_cast<size_t>(n * k), 4);
  auto q = gemm::per_block_cast_to_fp8(MatrixView<const float>{x.data(), n, k, k});
  ASSERT_EQ(q.scale_rows, 2);
  ASSERT_EQ(q.scale_cols, 2);
  for (int64_t br = 0; br < 2; ++br)
    for (int64_t bc = 0; bc < 2; ++bc) {
      float amax = 0;
      for (int64_t r = br * 128; r < std::min<int64_t>(n, br * 128 + 128); ++r)
        for (int64_t c = bc * 128; c < std::min<int64_t>(k, bc * 128 + 128); ++c)
          amax = std::max(amax, std::fabs(x[r * k + c]));
      ASSERT_FLOAT_EQ(q.scales[br * 2 + bc], amax / 448.0f);
      for (int64_t r = br * 128; r < std::min<int64_t>(n, br * 128 + 128); ++r)
        for (int64_t c = bc * 128; c < std::min<int64_t>(k, bc * 128 + 128); ++c)
          ASSERT_EQ(q.values[r * k + c].bits,
                    ridge::to_fp8_e4m3(x[r * k + c] * (448.0f / amax), ridge::Saturation::finite).bits);
    }
  // Dequantized values are within half an e4m3 ulp (2^-4 relative) of the originals.
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const double v = ridge::to_float(q.values[r * k + c]) * double(q.scales[(r / 128) * 2 + c / 128]);
      ASSERT_NEAR(v, x[r * k + c],
                  std::fabs(x[r * k + c]) * 0.0625 + q.scales[(r / 128) * 2 + c / 128] * 0.002);
    }
}

// DeepGEMM's UE8M0 recipe: every scale is exactly a power of two, the least one >= amax / 448 (here computed
// through log2 in double, independently of the library's frexp), and the values are x / scale rounded to
// nearest even, so the block maximum lands in (224, 448].
TEST(Fp8Quant, Ue8m0ScalesArePowersOfTwoAtLeastAmaxOver448) {
  const int64_t n = 130, k = 300;
  auto x = randn(static_cast<size_t>(n * k), 9, 3.0f);
  x[5 * k + 3] = 448.0f * 0.25f;  // amax / 448 exactly a power of two in its block: kept, not doubled
  for (auto kind : {0, 1}) {      // per block, per token
    const auto q =
        kind == 0
            ? gemm::per_block_cast_to_fp8(MatrixView<const float>{x.data(), n, k, k}, gemm::Fp8Scales::ue8m0)
            : gemm::per_token_cast_to_fp8(MatrixView<const float>{x.data(), n, k, k}, gemm::Fp8Scales::ue8m0);
    const int64_t rows_per = kind == 0 ? 128 : 1;
    for (int64_t br = 0; br < q.scale_rows; ++br)
      for (int64_t bc = 0; bc < q.scale_cols; ++bc) {
        double amax = 0;
        for (int64_t r = br * rows_per; r < std::min<int64_t>(n, (br + 1) * rows_per); ++r)
          for (int64_t c = bc * 128; c < std::min<int64_t>(k, bc * 128 + 128); ++c)
            amax = std::max(amax, std::fabs(double(x[r * k + c])));
        amax = std::max(amax, double(gemm::kFp8AmaxFloor));
        const double want = std::exp2(std::ceil(std::log2(amax / 448.0)));
        const float s = q.scales[br * q.scale_cols + bc];
        ASSERT_EQ(double(s), want) << kind << " block " << br << "," << bc;
        int e = 0;
        ASSERT_EQ(std::frexp(s, &e), 0.5f);  // a power of two
        for (int64_t r = br * rows_per; r < std::min<int64_t>(n, (br + 1) * rows_per); ++r)
          for (int64_t c = bc * 128; c < std::min<int64_t>(k, bc * 128 + 128); ++c)
            ASSERT_EQ(q.values[r * k + c].bits,
                      ridge::to_fp8_e4m3(x[r * k + c] / s, ridge::Saturation::finite).bits);
      }
  }
  const auto t =
      gemm::per_token_cast_to_fp8(MatrixView<const float>{x.data(), n, k, k}, gemm::Fp8Scales::ue8m0);
  EXPECT_EQ(t.scales[5 * t.scale_cols + 0], 0.25f);
  EXPECT_EQ(ridge::to_float(t.values[5 * k + 3]), 448.0f);
}

TEST(Fp8Errors, BadShapesStridesScalesAndGroups) {
  const int64_t m = 4, n = 8, k = 130;
  std::vector<fp8_e4m3> a(m * k), b(n * k);
  std::vector<float> sa(m * 2, 1.f), sb(1 * 2, 1.f), df(m * n);
  std::vector<bf16> d(m * n);
  MatrixView<const fp8_e4m3> av{a.data(), m, k, k}, bv{b.data(), n, k, k};
  MatrixView<const float> sav{sa.data(), m, 2, 2}, sbv{sb.data(), 1, 2, 2};
  MatrixView<bf16> dv{d.data(), m, n, n};
  EXPECT_NO_THROW(gemm::fp8_gemm_nt(av, sav, bv, sbv, dv));
  EXPECT_THROW(gemm::fp8_gemm_nt(av, MatrixView<const float>{sa.data(), m, 1, 1}, bv, sbv, dv), ridge::Error);
  EXPECT_THROW(gemm::fp8_gemm_nt(av, sav, bv, MatrixView<const float>{sb.data(), 1, 1, 1}, dv), ridge::Error);
  EXPECT_THROW(gemm::fp8_gemm_nt(av, sav, MatrixView<const fp8_e4m3>{b.data(), n, k - 1, k}, sbv, dv),
               ridge::Error);
  EXPECT_THROW(gemm::fp8_gemm_nt(MatrixView<const fp8_e4m3>{a.data(), m, k, k - 1}, sav, bv, sbv, dv),
               ridge::Error);
  EXPECT_THROW(gemm::fp8_gemm_nt(av, sav, bv, sbv, MatrixView<bf16>{d.data(), m, n - 1, n}), ridge::Error);
  EXPECT_THROW(gemm::fp8_gemm_nt(av, sav, bv, sbv, MatrixView<bf16>{nullptr, m, n, n}), ridge::Error);
  EXPECT_THROW(gemm::fp8_gemm_nt(MatrixView<const fp8_e4m3>{a.data(), m, 0, 1},
                                 MatrixView<const float>{sa.data(), m, 0, 1},
                                 MatrixView<const fp8_e4m3>{b.data(), n, 0, 1},
                                 MatrixView<const float>{sb.data(), 1, 0, 1}, dv),
               ridge::Error);
  // d overlapping an input
  std::vector<float> big(m * k);
  EXPECT_THROW(gemm::fp8_gemm_nt(av, MatrixView<const float>{big.data(), m, 2, 2}, bv, sbv,
                                 MatrixView<float>{big.data(), m, n, n}),
               ridge::Error);
  // contiguous: bad group index, misaligned m_sum, mixed groups in one aligned block
  const int64_t align = gemm::m_alignment_for_contiguous_layout();
  std::vector<fp8_e4m3> ag(align * k);
  std::vector<float> sag(align * 2, 1.f), sbg(2 * 1 * 2, 1.f);
  std::vector<fp8_e4m3> bg(2 * n * k);
  std::vector<bf16> dg(align * n);
  auto bt = TensorView<const fp8_e4m3>::contiguous(bg.data(), {2, n, k});
  auto sbt = TensorView<const float>::contiguous(sbg.data(), {2, 1, 2});
  MatrixView<const fp8_e4m3> agv{ag.data(), align, k, k};
  MatrixView<const float> sagv{sag.data(), align, 2, 2};
  MatrixView<bf16> dgv{dg.data(), align, n, n};
  std::vector<int32_t> idx(align, 0);
  EXPECT_NO_THROW(gemm::m_grouped_fp8_gemm_nt_contiguous(agv, sagv, bt, sbt, dgv, idx));
  idx[3] = 2;
  EXPECT_THROW(gemm::m_grouped_fp8_gemm_nt_contiguous(agv, sagv, bt, sbt, dgv, idx), ridge::Error);
  idx[3] = -2;
  EXPECT_THROW(gemm::m_grouped_fp8_gemm_nt_contiguous(agv, sagv, bt, sbt, dgv, idx), ridge::Error);
  idx[3] = 1;
  EXPECT_THROW(gemm::m_grouped_fp8_gemm_nt_contiguous(agv, sagv, bt, sbt, dgv, idx), ridge::Error);
  idx[3] = 0;
  EXPECT_THROW(
      gemm::m_grouped_fp8_gemm_nt_contiguous(agv, sagv, bt, sbt, dgv, std::span<const int32_t>(idx).first(5)),
      ridge::Error);
  EXPECT_THROW(gemm::m_grouped_fp8_gemm_nt_contiguous(MatrixView<const fp8_e4m3>{ag.data(), 5, k, k},
                                                      MatrixView<const float>{sag.data(), 5, 2, 2}, bt, sbt,
                                                      MatrixView<bf16>{dg.data(), 5, n, n},
                                                      std::span<const int32_t>(idx).first(5)),
               ridge::Error);
  // masked: masked_m out of range, wrong count
  auto at = TensorView<const fp8_e4m3>::contiguous(ag.data(), {2, 4, k});
  auto sat = TensorView<const float>::contiguous(sag.data(), {2, 4, 2});
  auto dt = TensorView<bf16>::contiguous(dg.data(), {2, 4, n});
  std::vector<int32_t> mm = {4, 0};
  EXPECT_NO_THROW(gemm::m_grouped_fp8_gemm_nt_masked(at, sat, bt, sbt, dt, mm, 4));
  mm = {5, 0};
  EXPECT_THROW(gemm::m_grouped_fp8_gemm_nt_masked(at, sat, bt, sbt, dt, mm, 4), ridge::Error);
  mm = {-1, 0};
  EXPECT_THROW(gemm::m_grouped_fp8_gemm_nt_masked(at, sat, bt, sbt, dt, mm, 4), ridge::Error);
  mm = {1};
  EXPECT_THROW(gemm::m_grouped_fp8_gemm_nt_masked(at, sat, bt, sbt, dt, mm, 4), ridge::Error);
  mm = {1, 1};
  EXPECT_THROW(gemm::m_grouped_fp8_gemm_nt_masked(at, sat, bt, sbt, dt, mm, -1), ridge::Error);
  // quantization: scale shape mismatch
  std::vector<float> x(m * k);
  std::vector<fp8_e4m3> q(m * k);
  EXPECT_THROW(gemm::per_token_cast_to_fp8(MatrixView<const float>{x.data(), m, k, k},
                                           MatrixView<fp8_e4m3>{q.data(), m, k, k},
                                           MatrixView<float>{sa.data(), m, 1, 1}),
               ridge::Error);
  EXPECT_THROW(gemm::PackedFp8B().impl(), ridge::Error);
}

// The packed grouped GEMMs' own arguments: b's count against the groups, each b[g] packed, of a's k and
// b[0]'s n; the layouts' and the outputs' checks as for raw B. One line each, naming the argument.
TEST(Fp8Errors, PackedGroupedArgumentsAreErrorsNamingThem) {
  using ridge::test::expect_error;
  using Span = std::span<const gemm::PackedFp8B>;
  const int64_t n = 8, k = 130, kb = 2, align = gemm::m_alignment_for_contiguous_layout();
  auto pack = [](int64_t rows, int64_t cols) {
    const auto x = randn(static_cast<size_t>(rows * cols), 5);
    const auto q = gemm::per_block_cast_to_fp8(MatrixView<const float>{x.data(), rows, cols, cols});
    return gemm::PackedFp8B::pack(q.view(), q.scale_view());
  };
  std::vector<gemm::PackedFp8B> two;
  two.push_back(pack(n, k));
  two.push_back(pack(n, k));
  std::vector<gemm::PackedFp8B> other_k, other_n, with_empty;
  other_k.push_back(pack(n, k));
  other_k.push_back(pack(n, k - 1));
  other_n.push_back(pack(n, k));
  other_n.push_back(pack(n + 1, k));
  with_empty.push_back(pack(n, k));
  with_empty.emplace_back();
  std::vector<fp8_e4m3> a(static_cast<size_t>(align * k));
  std::vector<float> sa(static_cast<size_t>(align * kb), 1.f);
  std::vector<bf16> d(static_cast<size_t>(align * n));
  const MatrixView<const fp8_e4m3> av{a.data(), align, k, k};
  const MatrixView<const float> sav{sa.data(), align, kb, kb};
  const MatrixView<bf16> dv{d.data(), align, n, n};
  std::vector<int32_t> idx(static_cast<size_t>(align), 1);
  EXPECT_NO_THROW(gemm::m_grouped_fp8_gemm_nt_contiguous(av, sav, Span(two), dv, idx));
  expect_error([&] { gemm::m_grouped_fp8_gemm_nt_contiguous(av, sav, Span(), dv, idx); },
               "b: expected at least one packed weight (one per group), got 0");
  expect_error([&] { gemm::m_grouped_fp8_gemm_nt_contiguous(av, sav, Span(two).first(1), dv, idx); },
               "m_indices[0] = 1: expected a group in [0, 1) or -1 for padding");
  expect_error([&] { gemm::m_grouped_fp8_gemm_nt_contiguous(av, sav, Span(other_k), dv, idx); },
               "b[1]: packed with k=129 but a has 130 columns");
  expect_error([&] { gemm::m_grouped_fp8_gemm_nt_contiguous(av, sav, Span(other_n), dv, idx); },
               "b[1]: packed with n=9 but b[0] has n=8 (every group shares n)");
  expect_error([&] { gemm::m_grouped_fp8_gemm_nt_contiguous(av, sav, Span(with_empty), dv, idx); },
               "b[1]: the PackedFp8B is empty (use PackedFp8B::pack)");
  expect_error(
      [&] {
        gemm::m_grouped_fp8_gemm_nt_contiguous(av, sav, Span(two),
                                               MatrixView<bf16>{d.data(), align, n - 1, n}, idx);
      },
      "d is [64, 7], expected [64, 8]");
  expect_error(
      [&] {
        gemm::m_grouped_fp8_gemm_nt_contiguous(
            av, sav, Span(two), MatrixView<float>{const_cast<float*>(sa.data()), align, n, n}, idx);
      },
      "d: overlaps an input (a_scales)");
  // masked: a [2, 4, k], d [2, 4, n]
  const auto at = TensorView<const fp8_e4m3>::contiguous(a.data(), {2, 4, k});
  const auto sat = TensorView<const float>::contiguous(sa.data(), {2, 4, kb});
  const auto dt = TensorView<bf16>::contiguous(d.data(), {2, 4, n});
  const std::vector<int32_t> mm = {4, 0};
  EXPECT_NO_THROW(gemm::m_grouped_fp8_gemm_nt_masked(at, sat, Span(two), dt, mm, 4));
  expect_error([&] { gemm::m_grouped_fp8_gemm_nt_masked(at, sat, Span(two).first(1), dt, mm, 4); },
               "b: expected 2 packed weights (one per group), got 1");
  expect_error([&] { gemm::m_grouped_fp8_gemm_nt_masked(at, sat, Span(other_k), dt, mm, 4); },
               "b[1]: packed with k=129 but a has 130 columns");
  expect_error([&] { gemm::m_grouped_fp8_gemm_nt_masked(at, sat, Span(other_n), dt, mm, 4); },
               "b[1]: packed with n=9 but b[0] has n=8 (every group shares n)");
  expect_error(
      [&] {
        gemm::m_grouped_fp8_gemm_nt_masked(TensorView<const fp8_e4m3>::contiguous(a.data(), {8, k}), sat,
                                           Span(two), dt, mm, 4);
      },
      "a: expected a rank-3 tensor [groups, m_max, k], got rank 2");
  expect_error(
      [&] {
        gemm::m_grouped_fp8_gemm_nt_masked(at, sat, Span(two), dt, std::vector<int32_t>{5, 0}, 4);
      },
      "masked_m[0] = 5: expected 0 <= masked_m <= m_max = 4");
  expect_error(
      [&] {
        gemm::m_grouped_fp8_gemm_nt_masked(at, sat, Span(two),
                                           TensorView<bf16>::contiguous(d.data(), {2, 4, n + 1}), mm, 4);
      },
      "d is [2, 4, 9], expected [2, 4, 8]");
  expect_error(
      [&] {
        gemm::m_grouped_fp8_gemm_nt_masked(
            at, sat, Span(two), TensorView<bf16>::contiguous(reinterpret_cast<bf16*>(a.data()), {2, 4, n}),
            mm, 4);
      },
      "d: overlaps an input (a)");
}

// Outputs written while inputs are still read: the grouped GEMMs' d and the quantizers' q and scales
// may not share memory with an input (ridge::Error naming the output and the input), as the dense
// fp8_gemm_nt's d may not.
TEST(Fp8Errors, OutputAliasingAnInputIsAnError) {
  auto expect_error = [](auto&& fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no error for " << needle;
    } catch (const ridge::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const int64_t n = 8, k = 130, align = gemm::m_alignment_for_contiguous_layout();
  // One byte arena holding every operand, so an output can be placed over any input.
  std::vector<unsigned char> arena(1 << 20);
  auto at = [&](size_t off) { return arena.data() + off; };
  const size_t a_off = 0, sa_off = 65536, b_off = 131072, sb_off = 262144, d_off = 327680;
  MatrixView<const fp8_e4m3> agv{reinterpret_cast<const fp8_e4m3*>(at(a_off)), align, k, k};
  MatrixView<const float> sagv{reinterpret_cast<const float*>(at(sa_off)), align, 2, 2};
  auto bt = TensorView<const fp8_e4m3>::contiguous(reinterpret_cast<const fp8_e4m3*>(at(b_off)), {2, n, k});
  auto sbt = TensorView<const float>::contiguous(reinterpret_cast<const float*>(at(sb_off)), {2, 1, 2});
  std::vector<int32_t> idx(align, 0);
  for (size_t i = sa_off; i < sa_off + align * 2 * 4; i += 4) *reinterpret_cast<float*>(at(i)) = 1.f;
  for (size_t i = sb_off; i < sb_off + 4 * 4; i += 4) *reinterpret_cast<float*>(at(i)) = 1.f;
  auto dg = [&](size_t off) { return MatrixView<bf16>{reinterpret_cast<bf16*>(at(off)), align, n, n}; };
  EXPECT_NO_THROW(gemm::m_grouped_fp8_gemm_nt_contiguous(agv, sagv, bt, sbt, dg(d_off), idx));
  expect_error([&] { gemm::m_grouped_fp8_gemm_nt_contiguous(agv, sagv, bt, sbt, dg(a_off + 100), idx); },
               "d: overlaps an input (a)");
  expect_error([&] { gemm::m_grouped_fp8_gemm_nt_contiguous(agv, sagv, bt, sbt, dg(sa_off), idx); },
               "d: overlaps an input (a_scales)");
  expect_error([&] { gemm::m_grouped_fp8_gemm_nt_contiguous(agv, sagv, bt, sbt, dg(b_off + 2), idx); },
               "d: overlaps an input (b)");
  expect_error([&] { gemm::m_grouped_fp8_gemm_nt_contiguous(agv, sagv, bt, sbt, dg(sb_off - 8), idx); },
               "d: overlaps an input (b_scales)");
  auto a3 = TensorView<const fp8_e4m3>::contiguous(agv.data, {2, 4, k});
  auto sa3 = TensorView<const float>::contiguous(sagv.data, {2, 4, 2});
  auto d3 = [&](size_t off) {
    return TensorView<bf16>::contiguous(reinterpret_cast<bf16*>(at(off)), {2, 4, n});
  };
  std::vector<int32_t> mm = {4, 2};
  EXPECT_NO_THROW(gemm::m_grouped_fp8_gemm_nt_masked(a3, sa3, bt, sbt, d3(d_off), mm, 4));
  expect_error([&] { gemm::m_grouped_fp8_gemm_nt_masked(a3, sa3, bt, sbt, d3(a_off), mm, 4); },
               "d: overlaps an input (a)");
  expect_error([&] { gemm::m_grouped_fp8_gemm_nt_masked(a3, sa3, bt, sbt, d3(sb_off), mm, 4); },
               "d: overlaps an input (b_scales)");
  // Quantizers: q or scales over x, and scales over q.
  const int64_t m = 4;
  std::vector<float> x(m * k, 0.5f), xs(m * k);
  std::vector<fp8_e4m3> q(m * k);
  std::vector<float> sc(m * 2);
  MatrixView<const float> xv{x.data(), m, k, k};
  EXPECT_NO_THROW(gemm::per_token_cast_to_fp8(xv, MatrixView<fp8_e4m3>{q.data(), m, k, k},
                                              MatrixView<float>{sc.data(), m, 2, 2}));
  expect_error(
      [&] {
        gemm::per_token_cast_to_fp8(xv, MatrixView<fp8_e4m3>{reinterpret_cast<fp8_e4m3*>(x.data()), m, k, k},
                                    MatrixView<float>{sc.data(), m, 2, 2});
      },
      "q: overlaps an input (x)");
  expect_error(
      [&] {
        gemm::per_token_cast_to_fp8(xv, MatrixView<fp8_e4m3>{q.data(), m, k, k},
                                    MatrixView<float>{x.data() + 5, m, 2, 2});
      },
      "scales: overlaps an input (x)");
  expect_error(
      [&] {
        gemm::per_block_cast_to_fp8(xv, MatrixView<fp8_e4m3>{q.data(), m, k, k},
                                    MatrixView<float>{reinterpret_cast<float*>(q.data()), 1, 2, 2});
      },
      "scales: overlaps the other output (q)");
}

}  // namespace
