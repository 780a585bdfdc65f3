// Dense GEMM layouts nn, tn, tt (and nt through the same entry points): every ISA path the machine
// supports against an fp64 product of the operands as stored, on awkward shapes, with C, in-place
// accumulate, strides, bf16 output, forced small blocks (several MC, NC and KC blocks), against the
// nt form on explicitly transposed copies (bitwise: the packers must build identical panels), and
// bad shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ridge/core.hpp"
#include "ridge/gemm.hpp"
#include "core/dispatch.hpp"
#include "common/expect_error.hpp"

namespace {

using ridge::bf16;
using ridge::MatrixView;
using gemm_layout = ridge::gemm::Layout;
namespace cpu = ridge::cpu;
namespace gemm = ridge::gemm;
namespace dispatch = ridge::dispatch;
using dispatch::Path;
using dispatch::ScopedPath;

constexpr gemm_layout kLayouts[] = {gemm_layout::nt, gemm_layout::nn, gemm_layout::tn, gemm_layout::tt};

bool small() {
  const char* s = std::getenv("RIDGE_TEST_SMALL");
  return s && std::string(s) == "1";
}

bool a_kmajor(gemm_layout l) {
  return l == gemm_layout::tn || l == gemm_layout::tt;
}
bool b_kmajor(gemm_layout l) {
  return l == gemm_layout::nn || l == gemm_layout::tn;
}

struct Shape {
  int64_t m, n, k;
};

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

// The operands as the layout stores them: A [m,k] or [k,m], B [n,k] or [k,n].
template <typename TA>
struct Operands {
  gemm_layout layout;
  Mat<TA> a, b;
  Operands(gemm_layout l, const Shape& s, int64_t pad)
      : layout(l),
        a(a_kmajor(l) ? s.k : s.m, a_kmajor(l) ? s.m : s.k, pad),
        b(b_kmajor(l) ? s.k : s.n, b_kmajor(l) ? s.n : s.k, 2 * pad) {}
  double av(int64_t i, int64_t p) const { return as_float(a_kmajor(layout) ? a.at(p, i) : a.at(i, p)); }
  double bv(int64_t p, int64_t j) const { return as_float(b_kmajor(layout) ? b.at(p, j) : b.at(j, p)); }
};

// fp64 product plus, per element, sum |a||b| (+ |c|): the scale the rounding error bound uses.
template <typename TA, typename TC>
void fp64_reference(const Operands<TA>& o, const Shape& s, const Mat<TC>* c, std::vector<double>& ref,
                    std::vector<double>& mag) {
  ref.assign(s.m * s.n, 0.0);
  mag.assign(s.m * s.n, 0.0);
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      double acc = 0, g = 0;
      for (int64_t p = 0; p < s.k; ++p) {
        const double x = o.av(i, p) * o.bv(p, j);
        acc += x;
        g += std::fabs(x);
      }
      if (c) {
        acc += as_float(c->at(i, j));
        g += std::fabs(as_float(c->at(i, j)));
      }
      ref[i * s.n + j] = acc;
      mag[i * s.n + j] = g;
    }
}

// The bound of test_gemm_dense.cpp: fp32 accumulation over k terms (+ C) is within
// (k + 2) * 2^-24 * sum|a b|; a bf16 output adds one rounding of the result (2^-8 relative).
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

// Calls the named entry point of the layout (f32_gemm_nn, bf16_gemm_tt, ...).
template <typename TA, typename TD>
void call_named(gemm_layout l, MatrixView<const TA> a, MatrixView<const TA> b, MatrixView<TD> d,
                MatrixView<const TD> c) {
  if constexpr (std::is_same_v<TA, float>) {
    switch (l) {
      case gemm_layout::nt:
        return gemm::f32_gemm_nt(a, b, d, c);
      case gemm_layout::nn:
        return gemm::f32_gemm_nn(a, b, d, c);
      case gemm_layout::tn:
        return gemm::f32_gemm_tn(a, b, d, c);
      case gemm_layout::tt:
        return gemm::f32_gemm_tt(a, b, d, c);
    }
  } else {
    switch (l) {
      case gemm_layout::nt:
        return gemm::bf16_gemm_nt(a, b, d, c);
      case gemm_layout::nn:
        return gemm::bf16_gemm_nn(a, b, d, c);
      case gemm_layout::tn:
        return gemm::bf16_gemm_tn(a, b, d, c);
      case gemm_layout::tt:
        return gemm::bf16_gemm_tt(a, b, d, c);
    }
  }
}

std::string label(gemm_layout l, const Path& isa, const Shape& s) {
  return std::string(gemm::layout_name(l)) + " " + dispatch::name(isa) + " m=" + std::to_string(s.m) +
         " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k);
}

std::vector<Shape> shapes() {
  std::vector<Shape> s = {{1, 1, 1},      {1, 7, 17},    {7, 1, 3},     {7, 17, 5},
                          {17, 7, 129},   {14, 32, 64},  {15, 33, 65},  {16, 31, 63},
                          {127, 129, 33}, {29, 61, 577}, {3, 2112, 16}, {13, 37, 1001}};
  if (!small()) {
    s.push_back({129, 127, 576});
    s.push_back({131, 257, 301});
    s.push_back({100, 96, 2049});
  }
  return s;
}

// One layout, one shape, one variant (plain, +C, strided +C) on the active path.
template <typename TA, typename TD>
void check_one(gemm_layout l, const Shape& s, int variant, std::mt19937& rng, const std::string& what0) {
  const bool with_c = variant >= 1;
  const int64_t pad = variant == 2 ? 3 : 0;
  Operands<TA> o(l, s, pad);
  Mat<TD> d(s.m, s.n, pad), c(s.m, s.n, pad + 1);
  fill(o.a, rng);
  fill(o.b, rng);
  fill(c, rng);
  fill(d, rng, 7.0f);
  std::vector<double> ref, mag;
  fp64_reference(o, s, with_c ? &c : nullptr, ref, mag);
  call_named<TA, TD>(l, o.a.cview(), o.b.cview(), d.view(), with_c ? c.cview() : MatrixView<const TD>{});
  const std::string what = what0 + (with_c ? " +C" : "") + (pad ? " strided" : "");
  expect_close(d, ref, mag, s.k, what);
  expect_padding_intact(d, 7.0f, what);
}

template <typename TA, typename TD>
void sweep(uint32_t seed) {
  std::mt19937 rng(seed);
  for (const Path& isa : dispatch::paths({dispatch::Dtype::f32, dispatch::Dtype::bf16})) {
    ScopedPath scope(isa);
    for (gemm_layout l : {gemm_layout::nn, gemm_layout::tn, gemm_layout::tt})  // nt: test_gemm_dense.cpp
      for (const Shape& s : shapes())
        for (int variant = 0; variant < 3; ++variant) check_one<TA, TD>(l, s, variant, rng, label(l, isa, s));
  }
}

TEST(GemmLayouts, F32AllPathsMatchFp64) {
  sweep<float, float>(11);
}
TEST(GemmLayouts, Bf16AllPathsMatchFp64) {
  sweep<bf16, float>(12);
}
TEST(GemmLayouts, F32Bf16OutAllPathsMatchFp64) {
  sweep<float, bf16>(13);
}
TEST(GemmLayouts, Bf16Bf16OutAllPathsMatchFp64) {
  sweep<bf16, bf16>(14);
}

// Sets the driver's blocking knobs for one scope, so modest shapes cross several MC, NC and KC
// blocks (and their ragged last blocks) on every path.
struct ScopedBlocking {
  ScopedBlocking(const char* kc, const char* mc, const char* nc) {
    setenv("RIDGE_GEMM_KC", kc, 1);
    setenv("RIDGE_GEMM_MC", mc, 1);
    setenv("RIDGE_GEMM_NC", nc, 1);
  }
  ~ScopedBlocking() {
    unsetenv("RIDGE_GEMM_KC");
    unsetenv("RIDGE_GEMM_MC");
    unsetenv("RIDGE_GEMM_NC");
  }
};

TEST(GemmLayouts, SmallBlocksAllPaths) {
  std::mt19937 rng(15);
  const ScopedBlocking blocks("40", "30", "70");
  const Shape s{small() ? 67 : 211, 151, 133};
  for (const Path& isa : dispatch::paths({dispatch::Dtype::f32, dispatch::Dtype::bf16})) {
    ScopedPath scope(isa);
    for (gemm_layout l : kLayouts) {
      check_one<float, float>(l, s, 2, rng, "blocks f32 " + label(l, isa, s));
      check_one<bf16, float>(l, s, 1, rng, "blocks bf16 " + label(l, isa, s));
      check_one<bf16, bf16>(l, s, 2, rng, "blocks bf16->bf16 " + label(l, isa, s));
    }
  }
}

// The machine's own blocking: one shape past MC, NC and KC on the best path.
TEST(GemmLayouts, NaturalBlocksBestPath) {
  if (small()) GTEST_SKIP() << "RIDGE_TEST_SMALL=1";
  std::mt19937 rng(16);
  const gemm::Blocking bk = gemm::blocking(ridge::DType::bf16, cpu::active_isa(), 4096);
  const int saved = gemm::get_num_threads();
  gemm::set_num_threads(1);  // one thread owns all of M and N, so both are split into blocks
  const Shape s{std::min<int64_t>(2 * bk.mc + 5, 400), std::min<int64_t>(bk.nc + 9, 1300), bk.kc + 17};
  for (gemm_layout l : {gemm_layout::nn, gemm_layout::tn}) {
    check_one<bf16, float>(l, s, 1, rng, "natural blocks " + label(l, Path{cpu::active_isa()}, s));
  }
  gemm::set_num_threads(saved);
}

// The packers give the same panels whatever the stored orientation, so every layout computes the
// same bits as nt on transposed copies (m > 64: nt's small-m path may sum in another order).
template <typename TA>
void layouts_match_nt_bits(uint32_t seed) {
  std::mt19937 rng(seed);
  for (const Path& isa : dispatch::paths({dispatch::Dtype::f32, dispatch::Dtype::bf16})) {
    ScopedPath scope(isa);
    for (const Shape& s : {Shape{66, 33, 31}, Shape{79, 70, 301}, Shape{130, 97, 64}}) {
      Mat<TA> a(s.m, s.k), b(s.n, s.k), at(s.k, s.m), bt(s.k, s.n);
      fill(a, rng);
      fill(b, rng);
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t p = 0; p < s.k; ++p) at.at(p, i) = a.at(i, p);
      for (int64_t j = 0; j < s.n; ++j)
        for (int64_t p = 0; p < s.k; ++p) bt.at(p, j) = b.at(j, p);
      Mat<float> want(s.m, s.n);
      call_named<TA, float>(gemm_layout::nt, a.cview(), b.cview(), want.view(), {});
      for (gemm_layout l : {gemm_layout::nn, gemm_layout::tn, gemm_layout::tt}) {
        Mat<float> got(s.m, s.n);
        call_named<TA, float>(l, a_kmajor(l) ? at.cview() : a.cview(), b_kmajor(l) ? bt.cview() : b.cview(),
                              got.view(), {});
        ASSERT_EQ(got.v, want.v) << label(l, isa, s);
      }
    }
  }
}

TEST(GemmLayouts, F32LayoutsMatchNtBits) {
  layouts_match_nt_bits<float>(17);
}
TEST(GemmLayouts, Bf16LayoutsMatchNtBits) {
  layouts_match_nt_bits<bf16>(18);
}

// The vector packers (the nt transposes of AVX2 and AVX-512, fp32 and bf16 widened, and avx512bf16's
// K-major pair interleave) against the plain loops that RIDGE_GEMM_SCALAR_PACK=1 selects: same panels,
// so the same bits, in every layout. The shapes have row counts and K that end mid-group (8 and 16
// rows, 8 and 16 words) and AVX2's A panels of 6 rows, whose last word is stored masked.
template <typename T>
void vector_packers_match_scalar_packing(uint32_t seed) {
  std::mt19937 rng(seed);
  const ScopedBlocking blocks("40", "30", "70");  // ragged K blocks: odd kc pairs in the middle of K
  for (const Path& isa : dispatch::paths({dispatch::Dtype::f32, dispatch::Dtype::bf16})) {
    ScopedPath scope(isa);
    for (gemm_layout l : kLayouts) {
      for (const Shape& s : {Shape{17, 45, 33}, Shape{75, 100, 101}, Shape{20, 9, 7}}) {
        Operands<T> o(l, s, 1);
        fill(o.a, rng);
        fill(o.b, rng);
        Mat<float> d1(s.m, s.n), d2(s.m, s.n);
        call_named<T, float>(l, o.a.cview(), o.b.cview(), d1.view(), {});
        setenv("RIDGE_GEMM_SCALAR_PACK", "1", 1);
        call_named<T, float>(l, o.a.cview(), o.b.cview(), d2.view(), {});
        unsetenv("RIDGE_GEMM_SCALAR_PACK");
        ASSERT_EQ(d1.v, d2.v) << label(l, isa, s);
      }
    }
  }
}

TEST(GemmLayouts, VectorPackersMatchScalarPacking) {
  vector_packers_match_scalar_packing<bf16>(23);
  vector_packers_match_scalar_packing<float>(24);
}

// C may be D itself: D += op(A) op(B) in place, both output dtypes, every layout.
TEST(GemmLayouts, InPlaceAccumulate) {
  std::mt19937 rng(19);
  const Shape s{37, 45, small() ? 300 : 700};
  for (const Path& isa : dispatch::paths({dispatch::Dtype::f32, dispatch::Dtype::bf16})) {
    ScopedPath scope(isa);
    for (gemm_layout l : kLayouts) {
      Operands<bf16> o(l, s, 0);
      fill(o.a, rng);
      fill(o.b, rng);
      Mat<float> d(s.m, s.n, 2);
      fill(d, rng);
      const Mat<float> c0 = d;
      std::vector<double> ref, mag;
      fp64_reference(o, s, &c0, ref, mag);
      gemm::bf16_gemm(l, o.a.cview(), o.b.cview(), d.view(), d.cview());
      expect_close(d, ref, mag, s.k, "in-place f32 " + label(l, isa, s));
      Mat<bf16> db(s.m, s.n, 1);
      fill(db, rng);
      const Mat<bf16> cb = db;
      fp64_reference(o, s, &cb, ref, mag);
      gemm::bf16_gemm(l, o.a.cview(), o.b.cview(), db.view(), db.cview());
      expect_close(db, ref, mag, s.k, "in-place bf16 " + label(l, isa, s));
    }
  }
}

// Threads split D into disjoint rectangles computed the same way: bitwise equal results.
TEST(GemmLayouts, ThreadCountDoesNotChangeBits) {
  std::mt19937 rng(20);
  const int saved = gemm::get_num_threads();
  const Shape s{small() ? 70 : 150, 97, 300};
  for (gemm_layout l : kLayouts) {
    Operands<float> o(l, s, 0);
    fill(o.a, rng);
    fill(o.b, rng);
    Mat<float> d1(s.m, s.n), d3(s.m, s.n);
    gemm::set_num_threads(1);
    gemm::f32_gemm(l, o.a.cview(), o.b.cview(), d1.view());
    gemm::set_num_threads(3);
    gemm::f32_gemm(l, o.a.cview(), o.b.cview(), d3.view());
    EXPECT_EQ(d1.v, d3.v) << gemm::layout_name(l);
  }
  gemm::set_num_threads(saved);
}

// The scalar reference twins agree with fp64 for every layout.
TEST(GemmLayouts, ReferenceTwinsAgree) {
  std::mt19937 rng(21);
  const Shape s{17, 33, 129};
  for (gemm_layout l : kLayouts) {
    Operands<float> of(l, s, 1);
    Operands<bf16> ob(l, s, 2);
    fill(of.a, rng);
    fill(of.b, rng);
    fill(ob.a, rng);
    fill(ob.b, rng);
    Mat<float> c(s.m, s.n), r(s.m, s.n);
    fill(c, rng);
    std::vector<double> ref, mag;
    fp64_reference(of, s, &c, ref, mag);
    gemm::f32_gemm_reference(l, of.a.cview(), of.b.cview(), r.view(), c.cview());
    expect_close(r, ref, mag, s.k, std::string("f32 reference ") + gemm::layout_name(l));
    fp64_reference(ob, s, &c, ref, mag);
    gemm::bf16_gemm_reference(l, ob.a.cview(), ob.b.cview(), r.view(), c.cview());
    expect_close(r, ref, mag, s.k, std::string("bf16 reference ") + gemm::layout_name(l));
  }
  // The named twins are the same function.
  Operands<float> o(gemm_layout::tn, s, 0);
  fill(o.a, rng);
  fill(o.b, rng);
  Mat<float> r1(s.m, s.n), r2(s.m, s.n);
  gemm::f32_gemm_tn_reference(o.a.cview(), o.b.cview(), r1.view());
  gemm::f32_gemm_reference(gemm_layout::tn, o.a.cview(), o.b.cview(), r2.view());
  EXPECT_EQ(r1.v, r2.v);
}

TEST(GemmLayouts, DegenerateShapes) {
  std::mt19937 rng(22);
  Mat<float> c(5, 4), d(5, 4);
  fill(c, rng);
  // k = 0: D = C. tn: A is [0, 5], B is [0, 4].
  Mat<float> a(0, 5), b(0, 4);
  gemm::f32_gemm_tn(a.cview(), b.cview(), d.view(), c.cview());
  EXPECT_EQ(d.v, c.v);
  Mat<float> a0(3, 0), b0(3, 4), d0(0, 4);
  gemm::f32_gemm_tn(a0.cview(), b0.cview(), d0.view());  // m = 0: nothing to do, no error
}

using ridge::test::expect_error;

TEST(GemmLayouts, BadShapesAreErrors) {
  std::vector<float> buf(1000, 1.0f), out(1000);
  const float* p = buf.data();
  float* q = out.data();
  using CV = MatrixView<const float>;
  using V = MatrixView<float>;
  // nn: a [4, 8], b [8, 3] -> d [4, 3]
  gemm::f32_gemm_nn(CV{p, 4, 8, 8}, CV{p, 8, 3, 3}, V{q, 4, 3, 3});
  expect_error(
      [&] {
        gemm::f32_gemm_nn(CV{p, 4, 8, 8}, CV{p, 7, 3, 3}, V{q, 4, 3, 3});
      },
      "f32_gemm_nn: a has 8 columns but b has 7 rows (both are K)");
  expect_error([&] { gemm::f32_gemm_nn(CV{p, 4, 8, 8}, CV{p, 8, 3, 3}, V{q, 3, 4, 4}); }, "d is [3, 4]");
  expect_error([&] { gemm::f32_gemm_nn(CV{p, 4, 8, 8}, CV{p, 8, 3, 2}, V{q, 4, 3, 3}); }, "b.ld");
  // tn: a [8, 4], b [8, 3] -> d [4, 3]
  gemm::f32_gemm_tn(CV{p, 8, 4, 4}, CV{p, 8, 3, 3}, V{q, 4, 3, 3});
  expect_error(
      [&] {
        gemm::f32_gemm_tn(CV{p, 9, 4, 4}, CV{p, 8, 3, 3}, V{q, 4, 3, 3});
      },
      "f32_gemm_tn: a has 9 rows but b has 8 rows");
  expect_error(
      [&] {
        gemm::f32_gemm_tn(CV{p, 8, 4, 4}, CV{p, 8, 3, 3}, V{q, 8, 3, 3});
      },
      "expected [m, n] = [4, 3]");
  expect_error(
      [&] {
        gemm::f32_gemm_tn(CV{p, 8, 4, 4}, CV{p, 8, 3, 3}, V{q, 4, 3, 3}, CV{p, 4, 4, 4});
      },
      "c is [4, 4]");
  expect_error([&] { gemm::f32_gemm_tn(CV{nullptr, 8, 4, 4}, CV{p, 8, 3, 3}, V{q, 4, 3, 3}); }, "a is null");
  // tt: a [8, 4], b [3, 8] -> d [4, 3]
  gemm::f32_gemm_tt(CV{p, 8, 4, 4}, CV{p, 3, 8, 8}, V{q, 4, 3, 3});
  expect_error(
      [&] {
        gemm::f32_gemm_tt(CV{p, 8, 4, 4}, CV{p, 3, 9, 9}, V{q, 4, 3, 3});
      },
      "f32_gemm_tt: a has 8 rows but b has 9 columns");
  expect_error([&] { gemm::f32_gemm_tt(CV{q + 2, 8, 4, 4}, CV{p, 3, 8, 8}, V{q, 4, 3, 3}); }, "d overlaps a");
  expect_error([&] { gemm::f32_gemm_tt(CV{p, 8, 4, 4}, CV{q, 3, 8, 8}, V{q + 1, 4, 3, 3}); }, "d overlaps b");
  std::vector<bf16> hb(100);
  using BV = MatrixView<const bf16>;
  expect_error(
      [&] {
        gemm::bf16_gemm_tn(BV{hb.data(), 8, 4, 4}, BV{hb.data(), 5, 3, 3}, V{q, 4, 3, 3});
      },
      "bf16_gemm_tn: a has 8 rows but b has 5 rows");
  expect_error(
      [&] {
        gemm::f32_gemm_reference(gemm_layout::nn, CV{p, 4, 8, 8}, CV{p, 7, 3, 3}, V{q, 4, 3, 3});
      },
      "f32_gemm_nn_reference: a has 8 columns");
  expect_error(
      [&] {
        gemm::f32_gemm(static_cast<gemm_layout>(9), CV{p, 4, 8, 8}, CV{p, 8, 3, 3}, V{q, 4, 3, 3});
      },
      "layout 9");
  EXPECT_EQ(gemm::parse_layout("tn"), gemm_layout::tn);
  expect_error([] { gemm::parse_layout("nx", "layout"); }, "layout: 'nx' is not a GEMM layout");
}

}  // namespace
