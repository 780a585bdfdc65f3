// FlashAttention-2 forward and backward against the fp64 math path, every ISA path against the
// scalar one, a finite-difference check of the reference's gradients, masking edge cases and
// argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "ridge/attention.hpp"
#include "ridge/core.hpp"
#include "core/amx.hpp"
#include "core/check.hpp"
#include "core/dispatch.hpp"
#include "attention/need_amx.hpp"

namespace ridge::attention {
namespace {

bool small_tests() {
  const char* s = std::getenv("RIDGE_TEST_SMALL");
  return s && std::string(s) == "1";
}

struct Shape {
  int64_t batch, heads, kv_heads, n_q, n_k, d;
  bool causal;
};

std::string describe(const Shape& s) {
  return fmt::format("b{} h{} kvh{} nq{} nk{} d{} {}", s.batch, s.heads, s.kv_heads, s.n_q, s.n_k, s.d,
                     s.causal ? "causal" : "full");
}

// A tensor [b, h, n, d] stored as [b, n, h, d] (the layout a fused QKV projection produces), so
// every test runs on non-contiguous views.
template <typename T>
struct Tensor {
  std::vector<T> data;
  TensorView<T> view;
  Tensor(int64_t b, int64_t h, int64_t n, int64_t d) : data(static_cast<size_t>(b * h * n * d)) {
    view.data = data.data();
    view.rank = 4;
    view.shape = {b, h, n, d};
    view.stride = {n * h * d, d, h * d, 1};
  }
  T& at(int64_t b, int64_t h, int64_t i, int64_t c) {
    return view.data[b * view.stride[0] + h * view.stride[1] + i * view.stride[2] + c * view.stride[3]];
  }
  double get(int64_t b, int64_t h, int64_t i, int64_t c) {
    if constexpr (std::is_same_v<T, bf16>)
      return to_float(at(b, h, i, c));
    else
      return static_cast<double>(at(b, h, i, c));
  }
};

template <typename T>
float as_float(T x) {
  if constexpr (std::is_same_v<T, bf16>)
    return to_float(x);
  else
    return static_cast<float>(x);
}

template <typename T>
void fill_random(Tensor<T>& t, std::mt19937& rng, double sigma) {
  std::normal_distribution<float> dist(0.0f, static_cast<float>(sigma));
  for (auto& x : t.data) {
    if constexpr (std::is_same_v<T, bf16>)
      x = to_bf16(dist(rng));
    else
      x = static_cast<T>(dist(rng));
  }
}

// max |a - b| / max |b| over a [b, h, n, d] pair.
template <typename A, typename B>
double rel_error(Tensor<A>& a, Tensor<B>& b) {
  double num = 0, den = 0;
  const auto& s = b.view.shape;
  for (int64_t i0 = 0; i0 < s[0]; ++i0)
    for (int64_t i1 = 0; i1 < s[1]; ++i1)
      for (int64_t i2 = 0; i2 < s[2]; ++i2)
        for (int64_t i3 = 0; i3 < s[3]; ++i3) {
          const double x = a.get(i0, i1, i2, i3), y = b.get(i0, i1, i2, i3);
          EXPECT_FALSE(std::isnan(x));
          num = std::max(num, std::abs(x - y));
          den = std::max(den, std::abs(y));
        }
  return den > 0 ? num / den : num;
}

// Count of elements outside |a - b| <= atol + rtol |b|.
template <typename A, typename B>
int64_t count_outside(Tensor<A>& a, Tensor<B>& b, double rtol, double atol) {
  int64_t bad = 0;
  const auto& s = b.view.shape;
  for (int64_t i0 = 0; i0 < s[0]; ++i0)
    for (int64_t i1 = 0; i1 < s[1]; ++i1)
      for (int64_t i2 = 0; i2 < s[2]; ++i2)
        for (int64_t i3 = 0; i3 < s[3]; ++i3) {
          const double x = a.get(i0, i1, i2, i3), y = b.get(i0, i1, i2, i3);
          if (!(std::abs(x - y) <= atol + rtol * std::abs(y))) ++bad;
        }
  return bad;
}

template <typename T>
struct Case {
  Shape s;
  Tensor<T> q, k, v, d_o, o, dq, dk, dv;
  std::vector<float> lse;
  TensorView<float> lse_view;
  explicit Case(const Shape& shape, uint32_t seed = 1)
      : s(shape),
        q(s.batch, s.heads, s.n_q, s.d),
        k(s.batch, s.kv_heads, s.n_k, s.d),
        v(s.batch, s.kv_heads, s.n_k, s.d),
        d_o(s.batch, s.heads, s.n_q, s.d),
        o(s.batch, s.heads, s.n_q, s.d),
        dq(s.batch, s.heads, s.n_q, s.d),
        dk(s.batch, s.kv_heads, s.n_k, s.d),
        dv(s.batch, s.kv_heads, s.n_k, s.d),
        lse(static_cast<size_t>(s.batch * s.heads * s.n_q)) {
    std::mt19937 rng(seed);
    fill_random(q, rng, 1.0);
    fill_random(k, rng, 1.0);
    fill_random(v, rng, 1.0);
    fill_random(d_o, rng, 1.0);
    lse_view = TensorView<float>::contiguous(lse.data(), {s.batch, s.heads, s.n_q});
  }
  Options options() const { return Options{s.causal, 0.0f}; }
  void forward() { flash_attention_forward(q.view, k.view, v.view, o.view, lse_view, options()); }
  void backward() {
    flash_attention_backward(q.view, k.view, v.view, o.view, d_o.view, lse_view, dq.view, dk.view, dv.view,
                             options());
  }
};

template <typename T>
struct Reference {
  Tensor<double> o, dq, dk, dv;
  std::vector<double> lse;
  explicit Reference(Case<T>& r, bool with_backward = true)
      : o(r.s.batch, r.s.heads, r.s.n_q, r.s.d),
        dq(r.s.batch, r.s.heads, r.s.n_q, r.s.d),
        dk(r.s.batch, r.s.kv_heads, r.s.n_k, r.s.d),
        dv(r.s.batch, r.s.kv_heads, r.s.n_k, r.s.d),
        lse(static_cast<size_t>(r.s.batch * r.s.heads * r.s.n_q)) {
    auto lv = TensorView<double>::contiguous(lse.data(), {r.s.batch, r.s.heads, r.s.n_q});
    attention_reference_forward(r.q.view, r.k.view, r.v.view, o.view, lv, r.options());
    if (with_backward)
      attention_reference_backward(r.q.view, r.k.view, r.v.view, r.d_o.view, dq.view, dk.view, dv.view,
                                   r.options());
  }
};

void expect_lse_close(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_TRUE(std::isinf(got[i]) && got[i] < 0) << "row " << i << " got " << got[i];
    } else {
      EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "row " << i;
    }
  }
}

void check_fp32(const Shape& s, bool with_backward = true) {
  SCOPED_TRACE(describe(s));
  Case<float> r(s);
  r.forward();
  Reference<float> ref(r, with_backward);
  EXPECT_LE(rel_error(r.o, ref.o), 1e-5);
  expect_lse_close(r.lse, ref.lse, 1e-5);
  if (!with_backward) return;
  r.backward();
  EXPECT_LE(rel_error(r.dq, ref.dq), 1e-5);
  EXPECT_LE(rel_error(r.dk, ref.dk), 1e-5);
  EXPECT_LE(rel_error(r.dv, ref.dv), 1e-5);
}

TEST(FlashAttention, Fp32MatchesFp64Reference) {
  const std::vector<Shape> shapes = {
      {1, 2, 2, 17, 17, 64, false},    {1, 2, 2, 17, 17, 64, true},    {2, 4, 2, 127, 127, 32, true},
      {1, 2, 1, 1, 1000, 80, true},    {1, 1, 1, 1000, 17, 16, false}, {1, 1, 1, 300, 127, 128, true},
      {1, 2, 2, 129, 300, 256, false}, {1, 1, 1, 64, 64, 256, true},   {1, 3, 1, 70, 33, 48, true},
      {1, 1, 1, 1, 1, 16, false},      {1, 1, 1, 1, 1, 16, true},
  };
  for (const auto& s : shapes) check_fp32(s);
}

TEST(FlashAttention, Fp32MatchesFp64ReferenceOddLengthsAllHeadDims) {
  for (int64_t d : {16, 32, 64, 80, 128, 256})
    for (int64_t n : {1, 17, 127}) check_fp32({1, 2, 1, n, n, d, (n + d) % 2 == 0});
}

TEST(FlashAttention, Fp32LongSequence) {
  const int64_t n = small_tests() ? 512 : 4096;
  check_fp32({1, 1, 1, n, n, 64, true});
  check_fp32({1, 1, 1, small_tests() ? 300 : 1000, small_tests() ? 300 : 1000, 64, false});
}

TEST(FlashAttention, Fp32LongSequenceNonCausalForward) {
  const int64_t n = small_tests() ? 512 : 4096;
  check_fp32({1, 1, 1, n, n, 64, false}, false);
}

TEST(FlashAttention, CustomScale) {
  Shape s{1, 2, 2, 40, 50, 32, true};
  Case<float> r(s);
  const Options opt{true, 0.37f};
  flash_attention_forward(r.q.view, r.k.view, r.v.view, r.o.view, r.lse_view, opt);
  flash_attention_backward(r.q.view, r.k.view, r.v.view, r.o.view, r.d_o.view, r.lse_view, r.dq.view,
                           r.dk.view, r.dv.view, opt);
  Tensor<double> o(1, 2, 40, 32), dq(1, 2, 40, 32), dk(1, 2, 50, 32), dv(1, 2, 50, 32);
  std::vector<double> lse(80);
  attention_reference_forward(r.q.view, r.k.view, r.v.view, o.view,
                              TensorView<double>::contiguous(lse.data(), {1, 2, 40}), opt);
  attention_reference_backward(r.q.view, r.k.view, r.v.view, r.d_o.view, dq.view, dk.view, dv.view, opt);
  EXPECT_LE(rel_error(r.o, o), 1e-5);
  EXPECT_LE(rel_error(r.dq, dq), 1e-5);
  EXPECT_LE(rel_error(r.dk, dk), 1e-5);
  EXPECT_LE(rel_error(r.dv, dv), 1e-5);
}

void check_bf16(const Shape& s) {
  SCOPED_TRACE(describe(s));
  Case<bf16> r(s);
  r.forward();
  r.backward();
  Reference<bf16> ref(r);
  EXPECT_EQ(count_outside(r.o, ref.o, 1e-2, 1e-2), 0);
  expect_lse_close(r.lse, ref.lse, 1e-2);
  EXPECT_EQ(count_outside(r.dq, ref.dq, 1e-2, 1e-2), 0);
  EXPECT_EQ(count_outside(r.dk, ref.dk, 1e-2, 1e-2), 0);
  EXPECT_EQ(count_outside(r.dv, ref.dv, 1e-2, 1e-2), 0);
}

// On the path in force; `long_n`: the length of the last, long causal shape.
void bf16_matches_fp64(int64_t long_n) {
  const std::vector<Shape> shapes = {
      {1, 2, 2, 17, 17, 64, true}, {2, 4, 1, 127, 127, 128, false}, {1, 2, 2, 100, 257, 80, true},
      {1, 1, 1, 1, 300, 16, true}, {1, 2, 2, 64, 64, 256, true},    {1, 2, 1, 33, 1, 32, false},
  };
  for (const auto& s : shapes) check_bf16(s);
  check_bf16({1, 2, 1, long_n, long_n, 64, true});
}

TEST(FlashAttention, Bf16MatchesFp64Reference) {
  bf16_matches_fp64(small_tests() ? 256 : 1000);
}

// Every path the machine has gives what the scalar path gives. `paths`: the paths to compare; none:
// every path of the one list (core/dispatch.hpp) but the scalar one and the emulated tiles (which
// have tests of their own, on shorter shapes).
template <typename T>
void check_isas(const Shape& s, double tol, std::vector<dispatch::Path> paths = {}) {
  SCOPED_TRACE(describe(s));
  Case<T> base(s, 7);
  {
    dispatch::ScopedPath scalar({.isa = cpu::Isa::scalar, .amx_emulated = false});
    base.forward();
    base.backward();
  }
  if (paths.empty())
    for (const dispatch::Path& p : dispatch::paths({dispatch::Dtype::f32, dispatch::Dtype::bf16}))
      if (*p.isa != cpu::Isa::scalar && !*p.amx_emulated) paths.push_back(p);
  for (const dispatch::Path& path : paths) {
    SCOPED_TRACE(dispatch::name(path));
    dispatch::ScopedPath scoped(path);
    Case<T> r(s, 7);
    r.forward();
    r.backward();
    if constexpr (std::is_same_v<T, float>) {
      EXPECT_LE(rel_error(r.o, base.o), tol);
      EXPECT_LE(rel_error(r.dq, base.dq), tol);
      EXPECT_LE(rel_error(r.dk, base.dk), tol);
      EXPECT_LE(rel_error(r.dv, base.dv), tol);
    } else {
      EXPECT_EQ(count_outside(r.o, base.o, tol, tol), 0);
      EXPECT_EQ(count_outside(r.dq, base.dq, tol, tol), 0);
      EXPECT_EQ(count_outside(r.dk, base.dk, tol, tol), 0);
      EXPECT_EQ(count_outside(r.dv, base.dv, tol, tol), 0);
    }
    for (size_t i = 0; i < r.lse.size(); ++i) {
      if (std::isinf(base.lse[i]))
        EXPECT_EQ(r.lse[i], base.lse[i]);
      else
        EXPECT_NEAR(r.lse[i], base.lse[i], 1e-4 * std::max(1.0f, std::abs(base.lse[i])));
    }
  }
}

const std::vector<Shape>& isa_shapes() {
  static const std::vector<Shape> shapes = {
      {1, 2, 1, 17, 17, 64, true},  {2, 2, 2, 129, 77, 80, false}, {1, 4, 2, 200, 200, 16, true},
      {1, 1, 1, 40, 90, 256, true}, {1, 1, 1, 1, 7, 32, false},
  };
  return shapes;
}

TEST(FlashAttention, EveryIsaMatchesScalar) {
  for (const auto& s : isa_shapes()) {
    check_isas<float>(s, 1e-5);
    check_isas<bf16>(s, 1e-2);
  }
}

// The reference's analytic gradients against central differences of its forward pass (fp64),
// and the flash gradients against both: loss = sum(o * do).
TEST(FlashAttention, NumericalGradientTinyCase) {
  // Hundreds of tiny forward passes: one thread avoids waking a team for each.
  const int threads = get_num_threads();
  set_num_threads(1);
  Shape s{1, 2, 1, 5, 7, 16, true};
  Case<float> r(s, 3);
  Reference<float> ref(r);
  r.forward();
  r.backward();
  auto loss = [&](Case<float>& run) {
    Tensor<double> o(1, 2, 5, 16);
    std::vector<double> lse(10);
    attention_reference_forward(run.q.view, run.k.view, run.v.view, o.view,
                                TensorView<double>::contiguous(lse.data(), {1, 2, 5}), run.options());
    double l = 0;
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 5; ++i)
        for (int64_t c = 0; c < 16; ++c) l += o.get(0, h, i, c) * run.d_o.get(0, h, i, c);
    return l;
  };
  // fp32 inputs limit the step: 1e-2 keeps the truncation error ~1e-5 and the rounding ~1e-5.
  const float eps = 1e-2f;
  auto check_grad = [&](Tensor<float>& x, Tensor<double>& analytic, Tensor<float>& flash, const char* name) {
    SCOPED_TRACE(name);
    const auto& sh = x.view.shape;
    for (int64_t h = 0; h < sh[1]; ++h)
      for (int64_t i = 0; i < sh[2]; ++i)
        for (int64_t c = 0; c < sh[3]; c += 5) {
          const float keep = x.at(0, h, i, c);
          const float hi = keep + eps, lo = keep - eps;
          x.at(0, h, i, c) = hi;
          const double up = loss(r);
          x.at(0, h, i, c) = lo;
          const double down = loss(r);
          x.at(0, h, i, c) = keep;
          const double numeric = (up - down) / (static_cast<double>(hi) - static_cast<double>(lo));
          EXPECT_NEAR(analytic.get(0, h, i, c), numeric, 2e-3 * std::max(1.0, std::abs(numeric)));
          EXPECT_NEAR(flash.get(0, h, i, c), numeric, 2e-3 * std::max(1.0, std::abs(numeric)));
        }
  };
  check_grad(r.q, ref.dq, r.dq, "dq");
  check_grad(r.k, ref.dk, r.dk, "dk");
  check_grad(r.v, ref.dv, r.dv, "dv");
  set_num_threads(threads);
}

// Causal with n_q > n_k: the first n_q - n_k queries see no key (on the path in force).
template <typename T>
void fully_masked_rows() {
  Shape s{1, 2, 1, 70, 3, 32, true};
  Case<T> r(s);
  r.forward();
  r.backward();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 70; ++i) {
      const bool masked = i < 67;
      EXPECT_EQ(std::isinf(r.lse[h * 70 + i]) && r.lse[h * 70 + i] < 0, masked) << i;
      for (int64_t c = 0; c < 32; ++c) {
        if (masked) {
          EXPECT_EQ(r.o.get(0, h, i, c), 0.0);
          EXPECT_EQ(r.dq.get(0, h, i, c), 0.0);
        }
        EXPECT_FALSE(std::isnan(r.o.get(0, h, i, c)));
        EXPECT_FALSE(std::isnan(r.dq.get(0, h, i, c)));
      }
    }
  Reference<T> ref(r);
  if constexpr (std::is_same_v<T, bf16>) {
    EXPECT_EQ(count_outside(r.o, ref.o, 1e-2, 1e-2), 0);
    EXPECT_EQ(count_outside(r.dk, ref.dk, 1e-2, 1e-2), 0);
    EXPECT_EQ(count_outside(r.dv, ref.dv, 1e-2, 1e-2), 0);
  } else {
    EXPECT_LE(rel_error(r.o, ref.o), 1e-5);
    EXPECT_LE(rel_error(r.dk, ref.dk), 1e-5);
    EXPECT_LE(rel_error(r.dv, ref.dv), 1e-5);
  }
}

TEST(FlashAttention, FullyMaskedRowsGiveZerosNotNaN) {
  for (cpu::Isa isa : cpu::supported_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    dispatch::ScopedPath scoped({.isa = isa});
    fully_masked_rows<float>();
  }
}

// Issue 20, case 7: softmax_scale = 1e9 gave inf/nan on the AVX-512 paths (the fused s c - m rounds
// once, up to half an ulp of m above 0: 2^512 at that scale), and 3e38 overflows scale * log2(e)
// on every path. Every path the machine runs, forward and backward, against the fp64 reference.
// Huge scales make the softmax a hard max, so O, lse and dV are exact up to rounding; dQ and dK are
// scale x (dP - D) at the maximum, a difference that is 0 in exact arithmetic, so they are held to
// scale x a rounding bound. Tiny scales make it uniform, and everything is held to 1e-5.
template <typename T>
void check_scale(float scale, const Shape& s, double input_scale) {
  SCOPED_TRACE(fmt::format("scale {} {}", scale, describe(s)));
  const bool is_bf16 = std::is_same_v<T, bf16>;
  const Options opt{s.causal, scale};
  Case<T> r(s, 11);
  if (input_scale != 1.0)
    for (auto* t : {&r.q, &r.k})
      for (auto& x : t->data) {
        if constexpr (std::is_same_v<T, bf16>)
          x = to_bf16(static_cast<float>(to_float(x) * input_scale));
        else
          x = static_cast<T>(x * input_scale);
      }
  flash_attention_forward(r.q.view, r.k.view, r.v.view, r.o.view, r.lse_view, opt);
  flash_attention_backward(r.q.view, r.k.view, r.v.view, r.o.view, r.d_o.view, r.lse_view, r.dq.view,
                           r.dk.view, r.dv.view, opt);
  Tensor<double> o(s.batch, s.heads, s.n_q, s.d), dq(s.batch, s.heads, s.n_q, s.d),
      dk(s.batch, s.kv_heads, s.n_k, s.d), dv(s.batch, s.kv_heads, s.n_k, s.d);
  std::vector<double> lse(static_cast<size_t>(s.batch * s.heads * s.n_q));
  attention_reference_forward(r.q.view, r.k.view, r.v.view, o.view,
                              TensorView<double>::contiguous(lse.data(), {s.batch, s.heads, s.n_q}), opt);
  attention_reference_backward(r.q.view, r.k.view, r.v.view, r.d_o.view, dq.view, dk.view, dv.view, opt);

  auto all_finite = [](auto& t) {
    for (const auto& x : t.data) {
      double v;
      if constexpr (std::is_same_v<std::decay_t<decltype(x)>, bf16>)
        v = to_float(x);
      else
        v = static_cast<double>(x);
      if (!std::isfinite(v)) return false;
    }
    return true;
  };
  EXPECT_TRUE(all_finite(r.o));
  EXPECT_TRUE(all_finite(r.dq));
  EXPECT_TRUE(all_finite(r.dk));
  EXPECT_TRUE(all_finite(r.dv));
  for (float x : r.lse) EXPECT_TRUE(std::isfinite(x) || (x < 0 && std::isinf(x)));
  const double tol = is_bf16 ? 1e-2 : 1e-5;
  if (is_bf16) {
    EXPECT_EQ(count_outside(r.o, o, tol, tol), 0);
    EXPECT_EQ(count_outside(r.dv, dv, tol, tol), 0);
  } else {
    EXPECT_LE(rel_error(r.o, o), tol);
    EXPECT_LE(rel_error(r.dv, dv), tol);
  }
  expect_lse_close(r.lse, lse, tol);
  if (scale < 1.0f) {
    EXPECT_LE(rel_error(r.dq, dq), is_bf16 ? 2e-2 : tol);
    EXPECT_LE(rel_error(r.dk, dk), is_bf16 ? 2e-2 : tol);
    return;
  }
  // |dP - D| at the maximum: both are dO . v (one in fp32 blocks, one from the stored O), each
  // off by at most ~d^2 2^-24 max|dO| max|v| (1e-6 is 8x that); dK sums up to n such rows.
  double max_do = 0, max_v = 0, max_qk = 0;
  for (const auto& x : r.d_o.data) max_do = std::max(max_do, std::abs(static_cast<double>(as_float(x))));
  for (const auto& x : r.v.data) max_v = std::max(max_v, std::abs(static_cast<double>(as_float(x))));
  for (auto* t : {&r.q, &r.k})
    for (const auto& x : t->data) max_qk = std::max(max_qk, std::abs(static_cast<double>(as_float(x))));
  const double bound = 1e-6 * static_cast<double>(scale) * static_cast<double>(s.d) *
                       static_cast<double>(s.d) * max_do * max_v * max_qk *
                       static_cast<double>(std::max(s.n_q, s.n_k));
  EXPECT_EQ(count_outside(r.dq, dq, 0.0, bound), 0) << "bound " << bound;
  EXPECT_EQ(count_outside(r.dk, dk, 0.0, bound), 0) << "bound " << bound;
}

// On the path in force; fp32 as well unless `bf16_only`.
void huge_and_tiny_scales(bool bf16_only) {
  const std::vector<Shape> shapes = {{1, 2, 1, 37, 45, 32, false}, {1, 2, 2, 40, 300, 64, true}};
  // 3e38 and FLT_MAX: q and k shrunk so that lse = scale * max score stays below FLT_MAX.
  const std::vector<std::pair<float, double>> scales = {
      {1e9f, 1.0},   {1e30f, 1.0}, {3e38f, 1.0 / 64}, {std::numeric_limits<float>::max(), 1.0 / 64},
      {1e-30f, 1.0}, {1e-8f, 1.0}};
  for (const auto& s : shapes)
    for (const auto& [scale, input_scale] : scales) {
      if (!bf16_only) check_scale<float>(scale, s, input_scale);
      check_scale<bf16>(scale, s, input_scale);
    }
}

TEST(FlashAttention, HugeAndTinyScalesAgreeOnEveryPath) {
  for (cpu::Isa isa : cpu::supported_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    dispatch::ScopedPath scoped({.isa = isa});
    huge_and_tiny_scales(false);
  }
}

// A negative scale (-1e9) is refused on every path, forward and backward, naming the argument.
TEST(FlashAttention, NegativeHugeScaleIsRefusedOnEveryPath) {
  for (cpu::Isa isa : cpu::supported_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    dispatch::ScopedPath scoped({.isa = isa});
    Case<float> r({1, 1, 1, 8, 8, 16, false});
    for (float scale : {-1e9f, -std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity()}) {
      const Options opt{false, scale};
      try {
        flash_attention_forward(r.q.view, r.k.view, r.v.view, r.o.view, r.lse_view, opt);
        ADD_FAILURE() << "forward accepted scale " << scale;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("scale"), std::string::npos) << e.what();
      }
      try {
        flash_attention_backward(r.q.view, r.k.view, r.v.view, r.o.view, r.d_o.view, r.lse_view, r.dq.view,
                                 r.dk.view, r.dv.view, opt);
        ADD_FAILURE() << "backward accepted scale " << scale;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("scale"), std::string::npos) << e.what();
      }
    }
  }
}

TEST(FlashAttention, ConvenienceOverloadsAllocate) {
  Shape s{2, 2, 2, 33, 33, 32, true};
  Case<float> r(s);
  auto f = flash_attention_forward(r.q.view, r.k.view, r.v.view, r.options());
  auto g = flash_attention_backward(r.q.view, r.k.view, r.v.view, f.o, r.d_o.view, f.lse, r.options());
  r.forward();
  r.backward();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 33; ++i)
        for (int64_t c = 0; c < 32; ++c) {
          const int64_t x = ((b * 2 + h) * 33 + i) * 32 + c;
          EXPECT_EQ(f.o.data[x], r.o.at(b, h, i, c));
          EXPECT_EQ(g.dq.data[x], r.dq.at(b, h, i, c));
          EXPECT_EQ(g.dk.data[x], r.dk.at(b, h, i, c));
        }
}

TEST(FlashAttention, BadInputIsAnError) {
  Shape s{1, 4, 2, 8, 8, 32, false};
  Case<float> r(s);
  auto expect_error = [&](auto&& fn, const char* needle) {
    try {
      fn();
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(
      [&] {
        flash_attention_forward(r.q.view, r.k.view, r.v.view, r.o.view, r.lse_view, {false, -1.0f});
      },
      "scale");
  expect_error(
      [&] {
        flash_attention_forward(r.q.view, r.k.view, r.v.view, r.o.view, r.lse_view,
                                {false, std::numeric_limits<float>::quiet_NaN()});
      },
      "scale");
  auto bad_d = r.q.view;
  bad_d.shape[3] = 8;
  auto bad_kd = r.k.view;
  bad_kd.shape[3] = 8;
  auto bad_vd = r.v.view;
  bad_vd.shape[3] = 8;
  auto bad_od = r.o.view;
  bad_od.shape[3] = 8;
  expect_error([&] { flash_attention_forward(bad_d, bad_kd, bad_vd, bad_od, r.lse_view); }, "head dimension");
  auto bad_heads = r.k.view;
  bad_heads.shape[1] = 3;
  expect_error([&] { flash_attention_forward(r.q.view, bad_heads, r.v.view, r.o.view, r.lse_view); },
               "kv_heads");
  auto bad_v = r.v.view;
  bad_v.shape[2] = 7;
  expect_error([&] { flash_attention_forward(r.q.view, r.k.view, bad_v, r.o.view, r.lse_view); },
               "v is [1, 2, 7, 32], expected [1, 2, 8, 32]");
  auto bad_lse = r.lse_view;
  bad_lse.shape[2] = 9;
  expect_error([&] { flash_attention_forward(r.q.view, r.k.view, r.v.view, r.o.view, bad_lse); }, "lse");
  auto rank3 = r.q.view;
  rank3.rank = 3;
  expect_error([&] { flash_attention_forward(rank3, r.k.view, r.v.view, r.o.view, r.lse_view); }, "rank 4");
  auto empty = r.k.view;
  empty.shape[2] = 0;
  expect_error([&] { flash_attention_forward(r.q.view, empty, r.v.view, r.o.view, r.lse_view); }, "n_k");
  auto null_o = r.o.view;
  null_o.data = nullptr;
  expect_error([&] { flash_attention_forward(r.q.view, r.k.view, r.v.view, null_o, r.lse_view); },
               "o is null");
  auto bad_dk = r.dk.view;
  bad_dk.shape[1] = 4;
  expect_error(
      [&] {
        flash_attention_backward(r.q.view, r.k.view, r.v.view, r.o.view, r.d_o.view, r.lse_view, r.dq.view,
                                 bad_dk, r.dv.view);
      },
      "dk is [1, 4, 8, 32], expected [1, 2, 8, 32]");
}

}  // namespace
}  // namespace ridge::attention

namespace ridge::attention {
namespace {

// Extra memory is O(threads x block) in forward and O(n) in backward, never O(n_q * n_k): the
// allocator's high-water mark above what was live before the call, at two lengths 8x apart.
TEST(FlashAttention, ExtraMemoryDoesNotGrowWithTheScoreMatrix) {
  auto extra = [](int64_t n, bool backward) {
    Case<float> r({1, 1, 1, n, n, 64, true});
    r.forward();
    memory::reset_peak();
    const int64_t base = memory::current_bytes();
    if (backward)
      r.backward();
    else
      r.forward();
    return memory::peak_bytes() - base;
  };
  const int64_t f_small = extra(256, false), f_large = extra(2048, false);
  EXPECT_GT(f_small, 0);
  EXPECT_EQ(f_large, f_small);  // the same per-thread workspace whatever the length
  const int64_t b_small = extra(256, true), b_large = extra(2048, true);
  // Linear in n (row statistics, the dq accumulator): at most 8x (+ the fixed workspace), far
  // below the 64x a materialised n x n matrix would need.
  EXPECT_LE(b_large, 8 * b_small + 1024 * 1024);
  EXPECT_LT(b_large, 2048 * 2048 * 4);
}

}  // namespace
}  // namespace ridge::attention

namespace ridge::attention {
namespace {

// An output that shares memory with an input (or with another output) would be read after it has
// been written: ridge::Error naming both arguments, whatever the overlap (the same view, a shifted
// one, an lse inside q).
TEST(FlashAttention, OutputAliasingAnInputIsAnError) {
  Case<float> r({1, 2, 2, 8, 8, 32, false});
  auto expect_error = [&](auto&& fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error([&] { flash_attention_forward(r.q.view, r.k.view, r.v.view, r.q.view, r.lse_view); },
               "attention: output o overlaps input q in memory");
  auto shifted = r.v.view;  // one element into v: a partial overlap
  shifted.data += 1;
  expect_error([&] { flash_attention_forward(r.q.view, r.k.view, r.v.view, shifted, r.lse_view); },
               "output o overlaps input v");
  auto lse_in_k = TensorView<float>::contiguous(r.k.data.data() + 3, {1, 2, 8});
  expect_error([&] { flash_attention_forward(r.q.view, r.k.view, r.v.view, r.o.view, lse_in_k); },
               "output lse overlaps input k");
  auto lse_in_o = TensorView<float>::contiguous(r.o.data.data(), {1, 2, 8});
  expect_error([&] { flash_attention_forward(r.q.view, r.k.view, r.v.view, r.o.view, lse_in_o); },
               "attention: outputs o and lse overlap in memory");
  r.forward();
  auto bwd = [&](const TensorView<float>& dq, const TensorView<float>& dk, const TensorView<float>& dv) {
    flash_attention_backward(r.q.view, r.k.view, r.v.view, r.o.view, r.d_o.view, r.lse_view, dq, dk, dv);
  };
  expect_error([&] { bwd(r.q.view, r.dk.view, r.dv.view); }, "output dq overlaps input q");
  expect_error([&] { bwd(r.dq.view, r.v.view, r.dv.view); }, "output dk overlaps input v");
  expect_error([&] { bwd(r.dq.view, r.dk.view, r.d_o.view); }, "output dv overlaps input do");
  expect_error([&] { bwd(r.o.view, r.dk.view, r.dv.view); }, "output dq overlaps input o");
  auto lse_in_dq = TensorView<float>::contiguous(r.dq.data.data() + 4, {1, 2, 8});
  expect_error(
      [&] {
        flash_attention_backward(r.q.view, r.k.view, r.v.view, r.o.view, r.d_o.view, lse_in_dq, r.dq.view,
                                 r.dk.view, r.dv.view);
      },
      "output dq overlaps input lse");
  expect_error([&] { bwd(r.dq.view, r.dk.view, r.dk.view); },
               "attention: outputs dk and dv overlap in memory");
}

// Interleaved views that never touch are not aliases: q, k, v as slices of one packed
// [batch, seq, 3, heads, d] buffer and dq, dk, dv written into another (what a fused QKV projection
// and its backward use) run, and give exactly the bits of separate buffers.
TEST(FlashAttention, PackedInterleavedViewsAreNotAliases) {
  const Shape s{2, 3, 3, 9, 9, 32, true};
  Case<float> r(s);
  r.forward();
  r.backward();
  const int64_t B = s.batch, H = s.heads, N = s.n_q, D = s.d;
  std::vector<float> qkv(static_cast<size_t>(B * N * 3 * H * D)), dqkv(qkv.size()), o(qkv.size() / 3);
  auto packed = [&](float* base, int which) {
    TensorView<float> t;
    t.data = base + which * H * D;
    t.rank = 4;
    t.shape = {B, H, N, D};
    t.stride = {N * 3 * H * D, D, 3 * H * D, 1};
    return t;
  };
  const Tensor<float>* src[3] = {&r.q, &r.k, &r.v};
  for (int w = 0; w < 3; ++w) {
    auto t = packed(qkv.data(), w);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < N; ++i)
          for (int64_t c = 0; c < D; ++c)
            t.data[b * t.stride[0] + h * t.stride[1] + i * t.stride[2] + c] =
                const_cast<Tensor<float>*>(src[w])->at(b, h, i, c);
  }
  auto ov = TensorView<float>::contiguous(o.data(), {B, H, N, D});
  std::vector<float> lse(r.lse.size());
  auto lv = TensorView<float>::contiguous(lse.data(), {B, H, N});
  flash_attention_forward(packed(qkv.data(), 0), packed(qkv.data(), 1), packed(qkv.data(), 2), ov, lv,
                          r.options());
  flash_attention_backward(packed(qkv.data(), 0), packed(qkv.data(), 1), packed(qkv.data(), 2), ov,
                           r.d_o.view, lv, packed(dqkv.data(), 0), packed(dqkv.data(), 1),
                           packed(dqkv.data(), 2), r.options());
  EXPECT_EQ(lse, r.lse);
  Tensor<float>* want[4] = {&r.o, &r.dq, &r.dk, &r.dv};
  TensorView<float> got[4] = {ov, packed(dqkv.data(), 0), packed(dqkv.data(), 1), packed(dqkv.data(), 2)};
  for (int w = 0; w < 4; ++w)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < N; ++i)
          for (int64_t c = 0; c < D; ++c) {
            const auto& g = got[w];
            ASSERT_EQ(g.data[b * g.stride[0] + h * g.stride[1] + i * g.stride[2] + c * g.stride[3]],
                      want[w]->at(b, h, i, c))
                << "output " << w << " at " << b << "," << h << "," << i << "," << c;
          }
}

// ---- The AMX path (issue #27): bf16 products on tiles, the softmax in fp32. "Emulated": the tile
// kernels on the tile emulator (dispatch::ScopedPath with amx_emulated; any machine, the scalar softmax);
// "OnAmx": the instructions, where this CPU has them. The emulator runs about 100x slower than the scalar
// path, so the emulated sweeps keep their long shapes short.

TEST(FlashAttentionAmx, Bf16MatchesFp64ReferenceEmulated) {
  dispatch::ScopedPath emulation({.amx_emulated = true});
  bf16_matches_fp64(small_tests() ? 130 : 256);
}
TEST(FlashAttentionAmx, Bf16MatchesFp64ReferenceOnAmx) {
  RIDGE_NEED_AMX();
  dispatch::ScopedPath amx({.isa = cpu::Isa::amx});
  bf16_matches_fp64(small_tests() ? 256 : 1000);
}

TEST(FlashAttentionAmx, Bf16MatchesScalarEmulated) {
  for (const auto& s : isa_shapes())
    check_isas<bf16>(s, 1e-2, {{.isa = cpu::best_isa(), .amx_emulated = true}});
}
TEST(FlashAttentionAmx, Bf16MatchesScalarOnAmx) {
  RIDGE_NEED_AMX();
  for (const auto& s : isa_shapes())
    check_isas<bf16>(s, 1e-2, {{.isa = cpu::Isa::amx, .amx_emulated = false}});
}

TEST(FlashAttentionAmx, FullyMaskedRowsGiveZerosNotNaNEmulated) {
  dispatch::ScopedPath emulation({.amx_emulated = true});
  fully_masked_rows<bf16>();
}
TEST(FlashAttentionAmx, FullyMaskedRowsGiveZerosNotNaNOnAmx) {
  RIDGE_NEED_AMX();
  dispatch::ScopedPath amx({.isa = cpu::Isa::amx});
  fully_masked_rows<bf16>();
}

TEST(FlashAttentionAmx, HugeAndTinyScalesAgreeEmulated) {
  dispatch::ScopedPath emulation({.amx_emulated = true});
  huge_and_tiny_scales(true);
}
TEST(FlashAttentionAmx, HugeAndTinyScalesAgreeOnAmx) {
  RIDGE_NEED_AMX();
  dispatch::ScopedPath amx({.isa = cpu::Isa::amx});
  huge_and_tiny_scales(false);  // fp32 on the amx path is the avx512bf16 kernels: checked too
}

// The emulated kernels are what runs (the bits differ from the scalar path's, whose products are fp32
// with P unrounded), fp32 keeps its path (the same bits as without the emulation), and each thread
// releases its tiles when its work is done (the calling thread is one of them).
TEST(FlashAttentionAmx, EmulationTakesBf16OnlyAndReleasesTheTiles) {
  const Shape s{1, 2, 1, 64, 80, 64, true};
  Case<bf16> scalar(s, 3), emu(s, 3);
  {
    dispatch::ScopedPath isa({.isa = cpu::Isa::scalar});
    scalar.forward();
    scalar.backward();
  }
  {
    dispatch::ScopedPath isa({.isa = cpu::Isa::scalar});
    dispatch::ScopedPath emulation({.amx_emulated = true});
    emu.forward();
    EXPECT_FALSE(amx::emu::configured());
    EXPECT_EQ(amx::loaded_config(false), nullptr);
    emu.backward();
    EXPECT_FALSE(amx::emu::configured());
    EXPECT_EQ(amx::loaded_config(false), nullptr);
  }
  EXPECT_GT(count_outside(emu.o, scalar.o, 0.0, 0.0) + count_outside(emu.dq, scalar.dq, 0.0, 0.0), 0);
  Case<float> plain(s, 3), emulated(s, 3);
  plain.forward();
  plain.backward();
  {
    dispatch::ScopedPath emulation({.amx_emulated = true});
    emulated.forward();
    emulated.backward();
  }
  EXPECT_EQ(plain.o.data, emulated.o.data);
  EXPECT_EQ(plain.dq.data, emulated.dq.data);
  EXPECT_EQ(plain.dk.data, emulated.dk.data);
  EXPECT_EQ(plain.dv.data, emulated.dv.data);
}

}  // namespace
}  // namespace ridge::attention
