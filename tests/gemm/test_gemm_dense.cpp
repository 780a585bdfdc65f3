// Dense fp32 / bf16 GEMM: every ISA path the machine supports against an fp64 product and the
// scalar reference twin, on awkward shapes, with accumulate, strides, bf16 output and packed B.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ridge/core.hpp"
#include "ridge/gemm.hpp"
#include "core/dispatch.hpp"
#include "common/expect_error.hpp"
#include "gemm/driver.hpp"

namespace {

using ridge::bf16;
using ridge::MatrixView;
namespace cpu = ridge::cpu;
namespace gemm = ridge::gemm;
namespace dispatch = ridge::dispatch;
using dispatch::Path;
using dispatch::ScopedPath;

bool small() {
  const char* s = std::getenv("RIDGE_TEST_SMALL");
  return s && std::string(s) == "1";
}

struct Shape {
  int64_t m, n, k;
};

std::vector<Shape> shapes() {
  std::vector<Shape> s = {{1, 1, 1},
                          {1, 7, 17},
                          {7, 1, 3},
                          {7, 17, 5},
                          {17, 7, 129},
                          {14, 32, 64},
                          {15, 33, 65},
                          {127, 129, 33},
                          {29, 61, 576},
                          {3, 2112, 16},
                          {64, 64, 1},
                          {13, 37, 1001},
                          // decode steps (1..4 rows): whole k steps and a tail, 8-row groups of B and a
                          // ragged last one
                          {1, 37, 1001},
                          {1, 16, 128},
                          {2, 37, 1001},
                          {3, 9, 300},
                          {4, 17, 257},
                          {2, 9, 5000},    // A past half of L1: the 4 x 4 blocks
                          {1, 19, 2500}};  // rows of B past 4 KiB: 8 rows side by side
  // 17..64 rows (small_m_lanes.inc): row blocks of 16 and a last one of 1, 8 (a half register), 15 or 16
  // rows; several chunks of k with a ragged (bf16: odd) last one; ragged column blocks; n past 64 splits
  // the columns between threads. 65 rows: the blocked path again.
  for (const Shape& x : {Shape{17, 37, 301}, Shape{24, 23, 129}, Shape{31, 19, 517}, Shape{32, 45, 300},
                         Shape{33, 70, 129}, Shape{48, 21, 1001}, Shape{64, 53, 263}, Shape{65, 29, 301}})
    s.push_back(x);
  if (!small()) {
    s.push_back({129, 127, 576});
    s.push_back({131, 257, 300});
    s.push_back({64, 2112, 96});
    s.push_back({100, 96, 2049});
  }
  return s;
}

// A matrix with ld >= cols; the padding holds a sentinel that must survive.
template <typename T>
struct Mat {
  int64_t rows, cols, ld;
  std::vector<T> v;
  Mat(int64_t r, int64_t c, int64_t pad = 0)
      : rows(r), cols(c), ld(c + pad), v(std::max<int64_t>(1, r * (c + pad))) {}
  MatrixView<T> view() { return {v.data(), rows, cols, ld}; }
  MatrixView<const T> cview() const { return {v.data(), rows, cols, ld}; }
  T& at(int64_t i, int64_t j) { return v[i * ld + j]; }
  const T& at(int64_t i, int64_t j) const { return v[i * ld + j]; }
};

float as_float(float x) {
  return x;
}
float as_float(bf16 x) {
  return ridge::to_float(x);
}

template <typename T>
void fill(Mat<T>& m, std::mt19937& rng, float sentinel = 1e30f) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.ld; ++j) {
      const float x = j < m.cols ? u(rng) : sentinel;
      if constexpr (std::is_same_v<T, bf16>)
        m.at(i, j) = ridge::to_bf16(x);
      else
        m.at(i, j) = x;
    }
}

// fp64 product plus, per element, sum |a||b| (+ |c|): the scale the rounding error bound uses.
template <typename TA, typename TC>
void fp64_reference(const Mat<TA>& a, const Mat<TA>& b, const Mat<TC>* c, std::vector<double>& ref,
                    std::vector<double>& mag) {
  ref.assign(a.rows * b.rows, 0.0);
  mag.assign(a.rows * b.rows, 0.0);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < b.rows; ++j) {
      double s = 0, g = 0;
      for (int64_t p = 0; p < a.cols; ++p) {
        const double x = as_float(a.at(i, p)), y = as_float(b.at(j, p));
        s += x * y;
        g += std::fabs(x * y);
      }
      if (c) {
        s += as_float(c->at(i, j));
        g += std::fabs(as_float(c->at(i, j)));
      }
      ref[i * b.rows + j] = s;
      mag[i * b.rows + j] = g;
    }
}

// fp32 accumulation over k terms (+ C): |error| <= (k + 1) * 2^-24 * sum|a b| in the worst case;
// a bf16 output adds one rounding of the result (2^-8 relative).
double tolerance(int64_t k, double mag, double ref, bool bf16_out) {
  double t = (k + 2) * std::ldexp(1.0, -24) * mag + 1e-30;
  if (bf16_out) t += std::ldexp(1.0, -8) * std::fabs(ref) * 1.0001;
  return t;
}

template <typename TD>
void expect_close(const Mat<TD>& d, const std::vector<double>& ref, const std::vector<double>& mag, int64_t k,
                  const std::string& what) {
  int bad = 0;
  for (int64_t i = 0; i < d.rows; ++i)
    for (int64_t j = 0; j < d.cols; ++j) {
      const double r = ref[i * d.cols + j];
      const double got = as_float(d.at(i, j));
      const double tol = tolerance(k, mag[i * d.cols + j], r, std::is_same_v<TD, bf16>);
      if (!(std::fabs(got - r) <= tol) && bad++ < 5)
        ADD_FAILURE() << what << " d(" << i << "," << j << ") = " << got << ", fp64 " << r << ", tol " << tol;
    }
  EXPECT_EQ(bad, 0) << what;
}

template <typename T>
void expect_padding_intact(const Mat<T>& d, float sentinel, const std::string& what) {
  float expected = sentinel;
  if constexpr (std::is_same_v<T, bf16>) expected = ridge::to_float(ridge::to_bf16(sentinel));
  for (int64_t i = 0; i < d.rows; ++i)
    for (int64_t j = d.cols; j < d.ld; ++j)
      ASSERT_EQ(as_float(d.at(i, j)), expected) << what << " wrote padding at (" << i << "," << j << ")";
}

void gemm_call(const Mat<float>& a, const Mat<float>& b, Mat<float>& d, const Mat<float>* c) {
  gemm::f32_gemm_nt(a.cview(), b.cview(), d.view(), c ? c->cview() : MatrixView<const float>{});
}
void gemm_call(const Mat<float>& a, const Mat<float>& b, Mat<bf16>& d, const Mat<bf16>* c) {
  gemm::f32_gemm_nt(a.cview(), b.cview(), d.view(), c ? c->cview() : MatrixView<const bf16>{});
}
void gemm_call(const Mat<bf16>& a, const Mat<bf16>& b, Mat<float>& d, const Mat<float>* c) {
  gemm::bf16_gemm_nt(a.cview(), b.cview(), d.view(), c ? c->cview() : MatrixView<const float>{});
}
void gemm_call(const Mat<bf16>& a, const Mat<bf16>& b, Mat<bf16>& d, const Mat<bf16>* c) {
  gemm::bf16_gemm_nt(a.cview(), b.cview(), d.view(), c ? c->cview() : MatrixView<const bf16>{});
}

std::string label(const Path& isa, const Shape& s) {
  return dispatch::name(isa) + " m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
         " k=" + std::to_string(s.k);
}

// Every path, every shape: plain, with C, with padded strides.
template <typename TA, typename TD>
void sweep(uint32_t seed) {
  std::mt19937 rng(seed);
  for (const Path& isa : dispatch::paths({dispatch::Dtype::f32, dispatch::Dtype::bf16})) {
    ScopedPath scope(isa);
    for (const Shape& s : shapes()) {
      for (int variant = 0; variant < 3; ++variant) {
        const bool with_c = variant >= 1;
        const int64_t pad = variant == 2 ? 3 : 0;
        Mat<TA> a(s.m, s.k, pad), b(s.n, s.k, pad * 2);
        Mat<TD> d(s.m, s.n, pad), c(s.m, s.n, pad + 1);
        fill(a, rng);
        fill(b, rng);
        fill(c, rng);
        fill(d, rng, 7.0f);
        std::vector<double> ref, mag;
        fp64_reference(a, b, with_c ? &c : nullptr, ref, mag);
        gemm_call(a, b, d, with_c ? &c : nullptr);
        const std::string what = label(isa, s) + (with_c ? " +C" : "") + (pad ? " strided" : "");
        expect_close(d, ref, mag, s.k, what);
        expect_padding_intact(d, 7.0f, what);
      }
    }
  }
}

TEST(GemmDense, F32AllPathsMatchFp64) {
  sweep<float, float>(1);
}
TEST(GemmDense, F32Bf16OutAllPathsMatchFp64) {
  sweep<float, bf16>(2);
}
TEST(GemmDense, Bf16AllPathsMatchFp64) {
  sweep<bf16, float>(3);
}
TEST(GemmDense, Bf16Bf16OutAllPathsMatchFp64) {
  sweep<bf16, bf16>(4);
}

// The scalar reference twin itself agrees with fp64, and the fast paths agree with it.
TEST(GemmDense, ReferenceTwinsAgree) {
  std::mt19937 rng(5);
  for (const Shape& s : {Shape{17, 33, 129}, Shape{5, 3, 1000}, Shape{40, 70, 31}}) {
    Mat<float> a(s.m, s.k), b(s.n, s.k), c(s.m, s.n), d(s.m, s.n), r(s.m, s.n);
    fill(a, rng);
    fill(b, rng);
    fill(c, rng);
    std::vector<double> ref, mag;
    fp64_reference(a, b, &c, ref, mag);
    gemm::f32_gemm_nt_reference(a.cview(), b.cview(), r.view(), c.cview());
    expect_close(r, ref, mag, s.k, "f32 reference");
    Mat<bf16> ab(s.m, s.k), bb(s.n, s.k);
    fill(ab, rng);
    fill(bb, rng);
    fp64_reference(ab, bb, &c, ref, mag);
    gemm::bf16_gemm_nt_reference(ab.cview(), bb.cview(), r.view(), c.cview());
    expect_close(r, ref, mag, s.k, "bf16 reference");
    for (const Path& isa : dispatch::paths({dispatch::Dtype::f32, dispatch::Dtype::bf16})) {
      ScopedPath scope(isa);
      gemm::bf16_gemm_nt(ab.cview(), bb.cview(), d.view(), c.cview());
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < s.n; ++j)
          ASSERT_NEAR(d.at(i, j), r.at(i, j), 2 * tolerance(s.k, mag[i * s.n + j], 0, false))
              << dispatch::name(isa);
    }
  }
}

// C may be D itself: D += A * B^T in place, for both output dtypes.
TEST(GemmDense, InPlaceAccumulate) {
  std::mt19937 rng(6);
  for (const Path& isa : dispatch::paths({dispatch::Dtype::f32, dispatch::Dtype::bf16})) {
    ScopedPath scope(isa);
    const Shape s{37, 45, small() ? 300 : 700};
    Mat<bf16> a(s.m, s.k), b(s.n, s.k);
    fill(a, rng);
    fill(b, rng);
    Mat<float> d(s.m, s.n, 2);
    fill(d, rng);
    const Mat<float> c0 = d;
    std::vector<double> ref, mag;
    fp64_reference(a, b, &c0, ref, mag);
    gemm::bf16_gemm_nt(a.cview(), b.cview(), d.view(), d.cview());
    expect_close(d, ref, mag, s.k, "in-place f32 " + dispatch::name(isa));
    Mat<bf16> db(s.m, s.n, 1);
    fill(db, rng);
    const Mat<bf16> cb = db;
    fp64_reference(a, b, &cb, ref, mag);
    gemm::bf16_gemm_nt(a.cview(), b.cview(), db.view(), db.cview());
    expect_close(db, ref, mag, s.k, "in-place bf16 " + dispatch::name(isa));
  }
}

// Threads split D into disjoint rectangles computed the same way: bitwise equal results.
TEST(GemmDense, ThreadCountDoesNotChangeBits) {
  std::mt19937 rng(7);
  const int saved = gemm::get_num_threads();
  const Shape s{small() ? 70 : 150, 97, 300};
  Mat<float> a(s.m, s.k), b(s.n, s.k), d1(s.m, s.n), d3(s.m, s.n);
  fill(a, rng);
  fill(b, rng);
  gemm::set_num_threads(1);
  gemm::f32_gemm_nt(a.cview(), b.cview(), d1.view());
  gemm::set_num_threads(3);
  gemm::f32_gemm_nt(a.cview(), b.cview(), d3.view());
  gemm::set_num_threads(saved);
  EXPECT_EQ(d1.v, d3.v);
}

// A kernel with narrow_a_in_l2 (AVX2) takes the narrow path for a thread of several row blocks whose packed
// A fits in L2: the same K blocks, so the same bits as the general path (RIDGE_GEMM_NO_NARROW=1). The
// shape is made from this machine's L2: K = 1024 (one K block), so a row block (MC) is an eighth of L2 and
// A, just under L2, is about two of them (1 MiB L2: 252 rows, MC 126).
TEST(GemmDense, NarrowPathWithAInL2IsTheGeneralPathsBits) {
  std::mt19937 rng(8);
  const int saved = gemm::get_num_threads();
  const int64_t l2 = ridge::cpu::cache_sizes().l2;
  const Shape s{std::max<int64_t>(12, l2 / (4 * 1024) / 6 * 6), 40, 1024};
  Mat<float> a(s.m, s.k), b(s.n, s.k), d1(s.m, s.n), d2(s.m, s.n);
  fill(a, rng);
  fill(b, rng);
  gemm::set_num_threads(1);
  for (const Path& isa : dispatch::paths({dispatch::Dtype::f32, dispatch::Dtype::bf16})) {
    ScopedPath scope(isa);
    gemm::f32_gemm_nt(a.cview(), b.cview(), d1.view());
    setenv("RIDGE_GEMM_NO_NARROW", "1", 1);
    gemm::f32_gemm_nt(a.cview(), b.cview(), d2.view());
    unsetenv("RIDGE_GEMM_NO_NARROW");
    EXPECT_EQ(d1.v, d2.v) << dispatch::name(isa) << " m=" << s.m;
  }
  gemm::set_num_threads(saved);
}

// 17..64 rows (small_m_lanes.inc): the public GEMM runs the path's small-m kernel up to the rows it takes
// (the bits of that kernel called alone over every column), the blocked kernel past them (the bits of a
// PackedB); the thread count (each thread a range of columns) does not change the bits; and on
// AVX512_BF16 a row's bits are those of the 5..16-row kernel (one lane's chain over k either way).
template <typename T>
void small_m_rows_bits(const Path& isa, std::mt19937& rng) {
  namespace gd = ridge::gemm::detail;
  const gd::Elem elem = std::is_same_v<T, bf16> ? gd::Elem::bf16 : gd::Elem::f32;
  const gd::KernelInfo sm = gd::select_kernel(elem, dispatch::Work::small_m, cpu::active_isa());
  const gd::KernelInfo blocked = gd::select_kernel(elem, dispatch::Work::blocked, cpu::active_isa());
  // Where the blocked work runs on the tiles or (bf16) on the FMAs, the small-m kernel keeps 16 rows.
  const bool other = std::string(blocked.name).rfind("bf16_amx", 0) == 0 ||
                     std::string(blocked.name) == "f32_avx512_14x32_widened";
  const int64_t rows = !sm.small_m || sm.small_m_elem != elem ? 0 : other ? 16 : sm.small_m_rows;
  const int saved = gemm::get_num_threads();
  for (const Shape& s : {Shape{17, 131, 301}, Shape{33, 100, 129}, Shape{64, 97, 263}, Shape{65, 97, 263}}) {
    const std::string what = label(isa, s) + (std::is_same_v<T, bf16> ? " bf16" : " f32");
    Mat<T> a(s.m, s.k, 1), b(s.n, s.k, 2);
    Mat<float> c(s.m, s.n), d(s.m, s.n), e(s.m, s.n);
    fill(a, rng);
    fill(b, rng);
    fill(c, rng);
    const auto call = [&](int threads, Mat<float>& out) {
      gemm::set_num_threads(threads);
      gemm_call(a, b, out, &c);
    };
    call(1, d);
    for (int threads : {2, 3}) {
      call(threads, e);
      EXPECT_EQ(d.v, e.v) << what << ": " << threads << " threads against 1";
    }
    gemm::set_num_threads(saved);
    if (s.m <= rows) {
      gd::SmallM args{.m = s.m, .k = s.k, .a = a.v.data(), .lda = a.ld, .b = b.v.data(), .ldb = b.ld};
      const gd::Tile t{.src = c.v.data(), .lds = c.ld, .dst = e.v.data(), .ldd = e.ld};
      sm.small_m(args, 0, s.n, t);
      EXPECT_EQ(d.v, e.v) << what << ": not the small-m kernel's bits";
    } else {
      const gemm::PackedB pb = gemm::PackedB::pack(b.cview());
      if constexpr (std::is_same_v<T, bf16>)
        gemm::bf16_gemm_nt(a.cview(), pb, e.view(), c.cview());
      else
        gemm::f32_gemm_nt(a.cview(), pb, e.view(), c.cview());
      EXPECT_EQ(d.v, e.v) << what << ": not the blocked kernel's bits";
    }
    if constexpr (std::is_same_v<T, bf16>) {
      if (std::string(sm.name) == "bf16_avx512bf16_14x32" && s.m <= rows) {
        Mat<float> d16(16, s.n);
        gemm::bf16_gemm_nt(MatrixView<const bf16>{a.v.data(), 16, s.k, a.ld}, b.cview(), d16.view(),
                           MatrixView<const float>{c.v.data(), 16, s.n, c.ld});
        for (int64_t i = 0; i < 16; ++i)
          for (int64_t j = 0; j < s.n; ++j)
            ASSERT_EQ(d16.at(i, j), d.at(i, j)) << what << ": row " << i << " against the 16-row kernel";
      }
    }
  }
}

TEST(GemmDense, SmallMRowsTakeTheSmallMKernelAtAnyThreadCount) {
  std::mt19937 rng(12);
  for (const Path& isa : dispatch::paths({dispatch::Dtype::f32, dispatch::Dtype::bf16})) {
    ScopedPath scope(isa);
    small_m_rows_bits<float>(isa, rng);
    small_m_rows_bits<bf16>(isa, rng);
  }
}

// Called from inside another parallel region (nested teams get one thread), every rectangle of D
// must still be computed.
TEST(GemmDense, InsideParallelRegion) {
  std::mt19937 rng(10);
  const int saved = gemm::get_num_threads();
  gemm::set_num_threads(2);
  const Shape s{60, 90, 40};
  Mat<float> a(s.m, s.k), b(s.n, s.k), d0(s.m, s.n), d1(s.m, s.n), d2(s.m, s.n);
  fill(a, rng);
  fill(b, rng);
  gemm::f32_gemm_nt(a.cview(), b.cview(), d0.view());
#pragma omp parallel num_threads(2)
  {
    Mat<float>& d = omp_get_thread_num() == 0 ? d1 : d2;
    gemm::f32_gemm_nt(a.cview(), b.cview(), d.view());
  }
  gemm::set_num_threads(saved);
  EXPECT_EQ(d0.v, d1.v);
  EXPECT_EQ(d0.v, d2.v);
}

// A packed B gives the same bits as packing per call, for each path.
TEST(GemmDense, PackedBMatchesUnpacked) {
  std::mt19937 rng(8);
  for (const Path& isa : dispatch::paths({dispatch::Dtype::f32, dispatch::Dtype::bf16})) {
    ScopedPath scope(isa);
    for (const Shape& s : {Shape{1, 7, 33}, Shape{16, 100, 257}, Shape{17, 70, 300}, Shape{65, 2112, 40},
                           Shape{66, 70, 300}}) {
      Mat<bf16> a(s.m, s.k), b(s.n, s.k), d1(s.m, s.n), d2(s.m, s.n);
      fill(a, rng);
      fill(b, rng);
      gemm::bf16_gemm_nt(a.cview(), b.cview(), d1.view());
      const gemm::PackedB pb = gemm::PackedB::pack(b.cview());
      EXPECT_EQ(pb.n(), s.n);
      EXPECT_EQ(pb.k(), s.k);
      EXPECT_EQ(pb.isa(), isa.isa);
      gemm::bf16_gemm_nt(a.cview(), pb, d2.view());
      // m <= 64 without packing takes the small-m path (another summation order) where the path has one.
      const bool same_path = s.m > ridge::gemm::detail::kSmallMMaxRows;
      for (size_t i = 0; i < d1.v.size(); ++i) {
        if (same_path) {
          ASSERT_EQ(d1.v[i].bits, d2.v[i].bits) << label(isa, s);
        } else {
          const float x = ridge::to_float(d1.v[i]), y = ridge::to_float(d2.v[i]);
          ASSERT_NEAR(x, y, std::ldexp(std::fabs(x), -7) + s.k * 1e-6f) << label(isa, s);
        }
      }
      Mat<float> af(s.m, s.k), bf(s.n, s.k), e1(s.m, s.n), e2(s.m, s.n);
      fill(af, rng);
      fill(bf, rng);
      gemm::f32_gemm_nt(af.cview(), bf.cview(), e1.view());
      gemm::f32_gemm_nt(af.cview(), gemm::PackedB::pack(bf.cview()), e2.view());
      for (size_t i = 0; i < e1.v.size(); ++i) {
        if (same_path) {
          ASSERT_EQ(e1.v[i], e2.v[i]) << label(isa, s);
        } else {
          ASSERT_NEAR(e1.v[i], e2.v[i], s.k * 1e-6f) << label(isa, s);
        }
      }
    }
  }
}

TEST(GemmDense, DegenerateShapes) {
  std::mt19937 rng(9);
  Mat<float> a(5, 0), b(4, 0), c(5, 4), d(5, 4);
  fill(c, rng);
  gemm::f32_gemm_nt(a.cview(), b.cview(), d.view(), c.cview());
  EXPECT_EQ(d.v, c.v);  // k = 0: D = C
  gemm::f32_gemm_nt(a.cview(), b.cview(), d.view());
  for (float x : d.v) EXPECT_EQ(x, 0.0f);
  Mat<float> a0(0, 3), b0(4, 3), d0(0, 4);
  gemm::f32_gemm_nt(a0.cview(), b0.cview(), d0.view());  // m = 0: nothing to do, no error
  gemm::f32_gemm_nt(MatrixView<const float>{nullptr, 0, 3, 3}, b0.cview(),
                    MatrixView<float>{nullptr, 0, 4, 4});
}

using ridge::test::expect_error;

TEST(GemmDense, BadInputIsAnError) {
  std::vector<float> buf(1000, 1.0f), out(1000);
  const float* p = buf.data();
  float* q = out.data();
  using CV = MatrixView<const float>;
  using V = MatrixView<float>;
  expect_error([&] { gemm::f32_gemm_nt(CV{p, 4, 8, 7}, CV{p, 3, 8, 8}, V{q, 4, 3, 3}); }, "a.ld");
  expect_error([&] { gemm::f32_gemm_nt(CV{p, 4, 8, 8}, CV{p, 3, 8, 2}, V{q, 4, 3, 3}); }, "b.ld");
  expect_error([&] { gemm::f32_gemm_nt(CV{p, 4, 8, 8}, CV{p, 3, 8, 8}, V{q, 4, 3, 2}); }, "d.ld");
  expect_error([&] { gemm::f32_gemm_nt(CV{nullptr, 4, 8, 8}, CV{p, 3, 8, 8}, V{q, 4, 3, 3}); }, "a is null");
  expect_error([&] { gemm::f32_gemm_nt(CV{p, 4, 8, 8}, CV{nullptr, 3, 8, 8}, V{q, 4, 3, 3}); }, "b is null");
  expect_error([&] { gemm::f32_gemm_nt(CV{p, 4, 8, 8}, CV{p, 3, 8, 8}, V{nullptr, 4, 3, 3}); }, "d is null");
  expect_error([&] { gemm::f32_gemm_nt(CV{p, -1, 8, 8}, CV{p, 3, 8, 8}, V{q, -1, 3, 3}); }, "negative");
  expect_error([&] { gemm::f32_gemm_nt(CV{p, 4, 8, 8}, CV{p, 3, 7, 7}, V{q, 4, 3, 3}); }, "K");
  expect_error([&] { gemm::f32_gemm_nt(CV{p, 4, 8, 8}, CV{p, 3, 8, 8}, V{q, 4, 4, 4}); }, "expected [m, n]");
  expect_error(
      [&] {
        gemm::f32_gemm_nt(CV{p, 4, 8, 8}, CV{p, 3, 8, 8}, V{q, 4, 3, 3}, CV{p, 4, 4, 4});
      },
      "c is [4, 4]");
  expect_error(
      [&] {
        gemm::f32_gemm_nt(CV{p, 4, 8, 8}, CV{p, 3, 8, 8}, V{q, 4, 3, 3}, CV{nullptr, 4, 3, 3});
      },
      "c is null");
  expect_error(
      [&] {
        gemm::f32_gemm_nt(CV{p, 4, 8, 8}, CV{p, 3, 8, 8}, V{q, 4, 3, 3}, CV{q + 1, 4, 3, 3});
      },
      "overlaps");
  expect_error([&] { gemm::f32_gemm_nt(CV{q + 2, 4, 8, 8}, CV{p, 3, 8, 8}, V{q, 4, 3, 3}); }, "d overlaps a");
  expect_error([&] { gemm::f32_gemm_nt(CV{p, 4, 8, 8}, gemm::PackedB{}, V{q, 4, 3, 3}); }, "empty PackedB");
  const gemm::PackedB pb = gemm::PackedB::pack(CV{p, 3, 8, 8});
  std::vector<bf16> hb(100);
  expect_error(
      [&] {
        gemm::bf16_gemm_nt(MatrixView<const bf16>{hb.data(), 4, 8, 8}, pb, V{q, 4, 3, 3});
      },
      "packed from fp32");
  expect_error([&] { gemm::f32_gemm_nt(CV{p, 4, 5, 5}, pb, V{q, 4, 3, 3}); }, "K");
  // B packed on one path and used on another: pack under the best path and use it under the
  // lowest, both chosen here, so the test holds whatever RIDGE_ISA the suite runs under.
  const auto isas = cpu::supported_isas();
  if (isas.size() > 1) {
    const gemm::PackedB pb_best = [&] {
      dispatch::ScopedPath scope({.isa = isas.back()});
      return gemm::PackedB::pack(CV{p, 3, 8, 8});
    }();
    dispatch::ScopedPath scope({.isa = isas.front()});
    expect_error([&] { gemm::f32_gemm_nt(CV{p, 4, 8, 8}, pb_best, V{q, 4, 3, 3}); }, "pack again");
  }
  expect_error([] { gemm::set_num_threads(0); }, "threads");
}

TEST(GemmDense, BlockingComesFromCaches) {
  for (cpu::Isa isa : cpu::supported_isas()) {
    for (auto dt : {ridge::DType::f32, ridge::DType::bf16}) {
      const gemm::Blocking b = gemm::blocking(dt, isa, 7168);
      EXPECT_GT(b.mr, 0);
      EXPECT_GT(b.nr, 0);
      EXPECT_GE(b.kc, 8);
      EXPECT_EQ(b.mc % b.mr, 0);
      EXPECT_EQ(b.nc % b.nr, 0);
      const int64_t elt = std::string(b.kernel).rfind("bf16", 0) == 0 && isa == cpu::Isa::avx512bf16 ? 2 : 4;
      const auto& caches = cpu::info().caches;
      if (caches.l2 > 0) {
        EXPECT_LE(b.mc * b.kc * elt, caches.l2) << b.kernel;
      }
    }
  }
}

// The emulated path really runs the tile kernels (the sweeps above would pass on any kernel), and
// the tile kernel's own blocking keeps K blocks whole 32-deep chunks.
TEST(GemmAmx, EmulationSelectsTheTileKernels) {
  ScopedPath on({.amx_emulated = true});
  const gemm::Blocking b = gemm::blocking(ridge::DType::bf16, cpu::active_isa(), 1000);
  EXPECT_STREQ(b.kernel, "bf16_amx_32x32_emulated");
  EXPECT_EQ(b.mr, 32);
  EXPECT_EQ(b.nr, 32);
  EXPECT_EQ(b.kc % 32, 0);
  EXPECT_EQ(std::string(gemm::blocking(ridge::DType::f32, cpu::active_isa(), 1000).kernel).find("amx"),
            std::string::npos);  // fp32 keeps its path's kernel
  ScopedPath off({.amx_emulated = false});
  EXPECT_STRNE(gemm::blocking(ridge::DType::bf16, cpu::active_isa(), 1000).kernel, "bf16_amx_32x32_emulated");
}

// The blocked and the small-m kernels are the policy's two choices (core/dispatch.hpp), neither spliced
// into the other: with bf16 on the FMAs, blocked bf16 takes avx512's fp32 kernel on widened operands
// while decode rows keep the bf16 small-m kernel, so a decode GEMM gives the same bits either way and
// a blocked one other bits; on the amx path (where there is one) the tiles and avx512bf16's small-m kernel.
TEST(GemmDispatch, BlockedAndSmallMKernelsAreChosenApart) {
  namespace gd = ridge::gemm::detail;
  if (!cpu::supported(cpu::Isa::avx512bf16))
    GTEST_SKIP() << "no avx512bf16 path here: bf16 has one kernel family below it";
  const gd::KernelInfo dot = gd::kernel_bf16_avx512bf16();
  for (bool on_fma : {false, true}) {
    ScopedPath path({.isa = cpu::Isa::avx512bf16, .amx_emulated = false, .bf16_on_fma = on_fma});
    const gd::KernelInfo blocked =
        gd::select_kernel(gd::Elem::bf16, dispatch::Work::blocked, cpu::Isa::avx512bf16);
    const gd::KernelInfo small =
        gd::select_kernel(gd::Elem::bf16, dispatch::Work::small_m, cpu::Isa::avx512bf16);
    EXPECT_STREQ(blocked.name, on_fma ? "f32_avx512_14x32_widened" : dot.name);
    EXPECT_EQ(small.small_m, dot.small_m) << "on_fma " << on_fma;
    EXPECT_EQ(small.small_m_elem, gd::Elem::bf16);
  }
  std::mt19937 rng(5);
  for (const Shape& s : {Shape{4, 70, 300}, Shape{40, 70, 300}}) {
    Mat<bf16> a(s.m, s.k), b(s.n, s.k);
    Mat<float> dot_d(s.m, s.n), fma_d(s.m, s.n);
    fill(a, rng);
    fill(b, rng);
    {
      ScopedPath path({.isa = cpu::Isa::avx512bf16, .amx_emulated = false, .bf16_on_fma = false});
      gemm::bf16_gemm_nt(a.cview(), b.cview(), dot_d.view());
    }
    {
      ScopedPath path({.isa = cpu::Isa::avx512bf16, .amx_emulated = false, .bf16_on_fma = true});
      gemm::bf16_gemm_nt(a.cview(), b.cview(), fma_d.view());
    }
    if (s.m <= 16)  // past 16 rows the FMAs' blocked kernel (plan() in driver.cpp)
      EXPECT_EQ(dot_d.v, fma_d.v) << "decode rows: one small-m kernel whatever the blocked choice";
    else
      EXPECT_NE(dot_d.v, fma_d.v) << "blocked: vdpbf16ps and the FMAs round differently";
  }
  if (cpu::supported(cpu::Isa::amx)) {
    ScopedPath path({.isa = cpu::Isa::amx, .amx_emulated = false});
    EXPECT_STREQ(gd::select_kernel(gd::Elem::bf16, dispatch::Work::blocked, cpu::Isa::amx).name,
                 "bf16_amx_32x32");
    EXPECT_EQ(gd::select_kernel(gd::Elem::bf16, dispatch::Work::small_m, cpu::Isa::amx).small_m, dot.small_m);
  }
}

// On a machine with AMX: the kernels on the instructions and on the emulator give the same bits (same
// panels, same tile sequence, same fp32 epilogue), in every layout, with C, bf16 output, tails.
TEST(GemmAmx, TheInstructionsMatchTheEmulatorBitForBit) {
  if (!cpu::supported(cpu::Isa::amx))
    GTEST_SKIP() << "no AMX here: " << cpu::amx_off_reason()
                 << "; the emulated kernels are checked against fp64 above";
  std::mt19937 rng(31);
  for (const Shape& s : {Shape{17, 33, 31}, Shape{45, 70, 301}, Shape{130, 97, 64}, Shape{64, 256, 1000}}) {
    Mat<bf16> a(s.m, s.k), b(s.n, s.k);
    Mat<float> c(s.m, s.n), hw(s.m, s.n), emu(s.m, s.n);
    fill(a, rng);
    fill(b, rng);
    fill(c, rng);
    {
      dispatch::ScopedPath isa({.isa = cpu::Isa::amx});
      gemm::bf16_gemm_nt(a.cview(), b.cview(), hw.view(), c.cview());
    }
    {
      ScopedPath on({.amx_emulated = true});
      gemm::bf16_gemm_nt(a.cview(), b.cview(), emu.view(), c.cview());
    }
    ASSERT_EQ(hw.v, emu.v) << label(Path{cpu::Isa::amx}, s);
  }
}

}  // namespace
