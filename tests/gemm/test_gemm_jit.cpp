// The GEMM JIT in use (src/gemm/jit_decode.cpp): a decode kernel compiled at run time with m and k as
// constants gives the bits of the ahead-of-time kernel it replaces, on every ISA path the machine runs
// that has a JIT template, over awkward shapes, strides and epilogues; and both agree with an fp64
// reference within the fp32 dot-product bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "common/tmpdir.hpp"
#include "ridge/core.hpp"
#include "ridge/jit.hpp"
#include "ridge/gemm.hpp"
#include "core/dispatch.hpp"
#include "gemm/driver.hpp"
#include "gemm/jit_decode.hpp"

namespace {

using namespace ridge;
namespace gd = ridge::gemm::detail;

// Every test here builds into its own empty cache, never the user's.
class GemmJit : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("RIDGE_JIT_CACHE_DIR", dir_.path().c_str(), 1);
    gd::jit_small_m_forget();
    if (jit::compiler_signature(jit::settings()).empty())
      GTEST_SKIP() << "no C++ compiler on PATH: the JIT cannot run here";
  }
  void TearDown() override {
    gd::jit_small_m_forget();
    ::unsetenv("RIDGE_JIT_CACHE_DIR");
  }
  test::TempDir dir_;
};

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// D = A B^T (m x n, depth k, fp32) through the public API, with the JIT switch at `mode`.
std::vector<float> gemm_with_jit(dispatch::Jit mode, const std::vector<float>& a, const std::vector<float>& b,
                                 int64_t m, int64_t n, int64_t k) {
  const dispatch::ScopedPath jit({.jit = mode});
  std::vector<float> d(static_cast<size_t>(m * n));
  gemm::f32_gemm_nt(MatrixView<const float>{a.data(), m, k, k}, MatrixView<const float>{b.data(), n, k, k},
                    MatrixView<float>{d.data(), m, n, n});
  return d;
}

TEST_F(GemmJit, DecodeKernelIsTheAotKernelBitForBitOnEveryPath) {
  struct MK {
    int64_t m, k;
  };
  // Awkward k (1, primes, one past a vector step, not a multiple of the step) and the model's.
  const MK shapes[] = {{5, 1}, {7, 17}, {8, 768}, {12, 129}, {13, 1000}, {16, 127}, {16, 3072}};
  const int64_t ns[] = {1, 3, 37, 130};
  int paths = 0;
  for (cpu::Isa isa : cpu::supported_isas())
    for (gd::Elem elem : {gd::Elem::f32, gd::Elem::bf16}) {
      const gd::KernelInfo ki = gd::select_kernel(elem, dispatch::Work::small_m, isa);
      if (!ki.small_m_jit || ki.small_m_elem != elem) continue;
      ++paths;
      const bool bf = elem == gd::Elem::bf16;
      dispatch::ScopedPath scope({.isa = isa});
      for (const auto& s : shapes) {
        const gd::SmallMKernel fn = gd::jit_small_m_build(ki, s.m, s.k);
        ASSERT_NE(fn, nullptr) << "the JIT could not build m=" << s.m << " k=" << s.k;
        for (int64_t n : ns) {
          const int64_t lda = s.k + 3, ldb = s.k + 5, ldd = n + 2;
          auto a = random_floats(static_cast<size_t>(s.m * lda), 1);
          auto b = random_floats(static_cast<size_t>(n * ldb), 2);
          // bf16 operands: the same values rounded (a and b then hold exactly what the kernel reads).
          std::vector<bf16> a16(a.size()), b16(b.size());
          for (size_t i = 0; i < a.size(); ++i) a[i] = to_float(a16[i] = to_bf16(a[i]));
          for (size_t i = 0; i < b.size(); ++i) b[i] = to_float(b16[i] = to_bf16(b[i]));
          if (!bf) {
            a = random_floats(a.size(), 1);
            b = random_floats(b.size(), 2);
          }
          const auto c = random_floats(static_cast<size_t>(s.m * ldd), 3);
          gd::SmallM sm;
          sm.m = s.m;
          sm.k = s.k;
          sm.a = bf ? static_cast<const void*>(a16.data()) : a.data();
          sm.lda = lda;
          sm.b = bf ? static_cast<const void*>(b16.data()) : b.data();
          sm.ldb = ldb;
          for (int variant = 0; variant < 3; ++variant) {
            // 0: fp32 out; 1: fp32 out += C; 2: bf16 out = C (fp32) + acc, rounded once.
            std::vector<float> d_aot(static_cast<size_t>(s.m * ldd), -7.f), d_jit = d_aot;
            std::vector<bf16> h_aot(static_cast<size_t>(s.m * ldd), to_bf16(-7.f)), h_jit = h_aot;
            auto tile = [&](std::vector<float>& d, std::vector<bf16>& h) {
              gd::Tile t;
              t.ldd = ldd;
              if (variant == 2) {
                t.dst = h.data();
                t.dst_bf16 = true;
              } else {
                t.dst = d.data();
              }
              if (variant >= 1) {
                t.src = c.data();
                t.lds = ldd;
              }
              return t;
            };
            // Two column ranges, as two threads split them (n0 on the kernel's column granule).
            const int64_t cut = std::min<int64_t>(n, ki.small_m_cols);
            for (auto [n0, n1] : {std::pair<int64_t, int64_t>{0, cut}, {cut, n}}) {
              if (n0 >= n1) continue;
              ki.small_m(sm, n0, n1, tile(d_aot, h_aot));
              fn(sm, n0, n1, tile(d_jit, h_jit));
            }
            const std::string where = std::string(ki.name) + " on " + cpu::isa_name(isa) +
                                      " m=" + std::to_string(s.m) + " k=" + std::to_string(s.k) +
                                      " n=" + std::to_string(n) + " variant=" + std::to_string(variant);
            ASSERT_EQ(std::memcmp(d_aot.data(), d_jit.data(), d_aot.size() * sizeof(float)), 0) << where;
            ASSERT_EQ(std::memcmp(h_aot.data(), h_jit.data(), h_aot.size() * sizeof(bf16)), 0) << where;
            if (variant != 0) continue;
            // Against fp64: |error| <= k * 2^-23 * sum |a||b| (fp32 accumulation in any order).
            for (int64_t i = 0; i < s.m; ++i)
              for (int64_t j = 0; j < n; ++j) {
                double ref = 0, mag = 0;
                for (int64_t p = 0; p < s.k; ++p) {
                  ref += static_cast<double>(a[i * lda + p]) * b[j * ldb + p];
                  mag += std::abs(static_cast<double>(a[i * lda + p]) * b[j * ldb + p]);
                }
                ASSERT_LE(std::abs(d_jit[i * ldd + j] - ref), s.k * 0x1p-23 * mag + 1e-30) << where;
              }
          }
        }
      }
    }
  if (paths == 0)
    GTEST_SKIP() << "no ISA path of this machine has a JIT template (f32_avx512, f32_avx2, bf16_avx2)";
}

TEST_F(GemmJit, ServesOnlyTheDecodeRowsOfItsTable) {
  for (cpu::Isa isa : cpu::supported_isas()) {
    const gd::KernelInfo f32 = gd::select_kernel(gd::Elem::f32, dispatch::Work::small_m, isa);
    const gd::KernelInfo bf16k = gd::select_kernel(gd::Elem::bf16, dispatch::Work::small_m, isa);
    const gd::KernelInfo fp8 = gd::select_kernel(gd::Elem::fp8, dispatch::Work::small_m, isa);
    // The decision table (docs/jit.md): the AVX2 decode kernels at 5..16 rows; AVX-512's is built on
    // request only.
    const bool avx2 = isa == cpu::Isa::avx2;
    for (int64_t m : {1, 4, 5, 16, 17, 64}) {
      const bool rows = m >= 5 && m <= 16;
      EXPECT_EQ(gd::jit_serves(f32, m), avx2 && rows) << cpu::isa_name(isa) << " m=" << m;
      EXPECT_EQ(gd::jit_serves(bf16k, m), avx2 && rows) << cpu::isa_name(isa) << " m=" << m;
      EXPECT_FALSE(gd::jit_serves(fp8, m));
      EXPECT_EQ(gd::jit_small_m_build(f32, m, 64) != nullptr, f32.small_m_jit != nullptr && rows)
          << cpu::isa_name(isa) << " m=" << m;
    }
    EXPECT_EQ(gd::jit_small_m(f32, 8, 64, dispatch::Jit::on) != nullptr, avx2) << cpu::isa_name(isa);
    EXPECT_EQ(gd::jit_small_m(f32, 8, 64, dispatch::Jit::off),
              nullptr);  // off: never served, even when built
  }
}

TEST_F(GemmJit, ThePublicGemmWithTheJitOnIsTheSameGemmWithItOff) {
  // The whole call (threads splitting the columns, the driver's choice of path) with the JIT on and off.
  for (cpu::Isa isa : cpu::supported_isas()) {
    dispatch::ScopedPath scope({.isa = isa});
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{9, 301, 97}, {16, 1024, 768}}) {
      const auto a = random_floats(static_cast<size_t>(m * k), 4),
                 b = random_floats(static_cast<size_t>(n * k), 5);
      const auto d_on = gemm_with_jit(dispatch::Jit::every, a, b, m, n, k);
      const auto d_off = gemm_with_jit(dispatch::Jit::off, a, b, m, n, k);
      EXPECT_EQ(std::memcmp(d_on.data(), d_off.data(), d_on.size() * sizeof(float)), 0)
          << cpu::isa_name(isa) << " m=" << m << " n=" << n << " k=" << k;
    }
  }
}

TEST_F(GemmJit, WithoutACompilerTheAotKernelRuns) {
  ::setenv("RIDGE_JIT_CXX", "/nonexistent/ridge-test-cxx", 1);
  const gd::KernelInfo ki = gd::select_kernel(gd::Elem::f32, dispatch::Work::small_m, cpu::active_isa());
  EXPECT_EQ(gd::jit_small_m_build(ki, 8, 33), nullptr);
  const int64_t m = 8, n = 50, k = 33;
  const auto a = random_floats(static_cast<size_t>(m * k), 6),
             b = random_floats(static_cast<size_t>(n * k), 7);
  const auto d_on = gemm_with_jit(dispatch::Jit::every, a, b, m, n, k);
  const auto d_off = gemm_with_jit(dispatch::Jit::off, a, b, m, n, k);
  ::unsetenv("RIDGE_JIT_CXX");
  EXPECT_EQ(std::memcmp(d_on.data(), d_off.data(), d_on.size() * sizeof(float)), 0);
}

}  // namespace
