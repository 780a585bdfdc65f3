// The vector paths of the model's elementwise layers (model/fused.hpp) against their scalar twins in
// layers.hpp, run under ScopedIsa(scalar): SwiGLU forward (with and without the saved copy) and backward
// and the cross-entropy rows, in fp32 and with bf16 operands, at widths with a masked tail and with
// inputs that saturate the sigmoid and the exponent range.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "model/layers.hpp"
#include "ridge/core/cpu.hpp"

namespace ridge::model {
namespace {

using layers::Round;

std::vector<float> sample(size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  // A few values far out: sigmoid saturates to 0 and 1, exp underflows.
  if (n > 8) v[1] = 90.0f, v[3] = -90.0f, v[5] = 0.0f, v[7] = -30.0f;
  // fp16 subnormals (below 6.1e-5) and a value that rounds to fp16's smallest step.
  if (n > 12) v[9] = 3e-6f, v[11] = -5e-7f, v[12] = 4e-8f;
  return v;
}

double val(float x) {
  return x;
}
double val(bf16 x) {
  return to_float(x);
}

// Largest |a - b| / (|b| + floor) over the arrays.
template <typename T>
double max_rel(const std::vector<T>& a, const std::vector<T>& b, double floor) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::abs(val(a[i]) - val(b[i])) / (std::abs(val(b[i])) + floor));
  return m;
}

bool has_vector_path() {
  return cpu::supported(cpu::Isa::avx512);
}

template <typename O>
void check_swiglu(int64_t n, int64_t f, double tol, Round r = Round::none) {
  SCOPED_TRACE(testing::Message() << "n=" << n << " f=" << f);
  const auto ab = sample(static_cast<size_t>(n * 2 * f), 2.0f, 3);
  const auto dg = sample(static_cast<size_t>(n * f), 1.0f, 4);
  const size_t nab = ab.size(), ng = dg.size();
  std::vector<O> sa0(nab), g0(ng), dab0(nab), sa1(nab), g1(ng), dab1(nab);
  {
    cpu::ScopedIsa scalar(cpu::Isa::scalar);
    layers::swiglu_forward(ab.data(), n, f, sa0.data(), g0.data(), r);
    layers::swiglu_backward(dg.data(), sa0.data(), n, f, dab0.data(), r);
  }
  layers::swiglu_forward(ab.data(), n, f, sa1.data(), g1.data(), r);
  layers::swiglu_backward(dg.data(), sa0.data(), n, f, dab1.data(), r);
  EXPECT_EQ(max_rel(sa1, sa0, 0.0), 0.0);  // the saved copy is a plain rounding: bit for bit
  // Without the saved copy (generation), each path forms the same g from the same rounded a and b.
  for (bool scalar : {true, false}) {
    cpu::ScopedIsa isa(scalar ? cpu::Isa::scalar : cpu::active_isa());
    std::vector<O> g2(ng);
    layers::swiglu_forward(ab.data(), n, f, static_cast<O*>(nullptr), g2.data(), r);
    EXPECT_EQ(max_rel(g2, scalar ? g0 : g1, 0.0), 0.0) << (scalar ? "scalar" : "vector");
  }
  // Relative to the values' scale (~1) near zero: d a = g b s (1 + a (1 - s)) cancels near a = -1.28,
  // where a few ulps of s are a large part of a tiny result.
  EXPECT_LE(max_rel(g1, g0, 1e-2), tol);
  EXPECT_LE(max_rel(dab1, dab0, 1e-2), tol);
}

TEST(LayersVector, SwigluMatchesTheScalarTwin) {
  if (!has_vector_path()) GTEST_SKIP() << "no AVX-512 on this machine: the scalar twin is the only path";
  check_swiglu<float>(9, 37, 1e-5);
  check_swiglu<float>(64, 640, 1e-5);
  // bf16 outputs: a few float ulps apart before rounding can land one bf16 step apart.
  check_swiglu<bf16>(9, 37, 1.0 / 128);
  check_swiglu<bf16>(64, 640, 1.0 / 128);
  // fp16 emulation: one fp16 step (2^-10 relative) at most.
  check_swiglu<float>(9, 37, 1.0 / 1024, Round::fp16);
  check_swiglu<float>(64, 640, 1.0 / 1024, Round::fp16);
}

TEST(LayersVector, CrossEntropyMatchesTheScalarTwin) {
  if (!has_vector_path()) GTEST_SKIP() << "no AVX-512 on this machine: the scalar twin is the only path";
  for (const int64_t vocab : {int64_t{5}, int64_t{1003}}) {
    SCOPED_TRACE(testing::Message() << "vocab=" << vocab);
    const int64_t n = 17;
    const auto logits = sample(static_cast<size_t>(n * vocab), 3.0f, 9);
    std::vector<int32_t> targets(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 131) % vocab);
    std::vector<float> lse0(static_cast<size_t>(n)), lse1(lse0.size());
    std::vector<float> d0 = logits, d1 = logits;
    std::vector<bf16> b0(logits.size()), b1(logits.size());
    double loss0 = 0, loss1 = 0;
    {
      cpu::ScopedIsa scalar(cpu::Isa::scalar);
      loss0 = layers::cross_entropy_forward(logits.data(), targets.data(), n, vocab, lse0.data());
      layers::cross_entropy_backward(d0.data(), targets.data(), lse0.data(), n, vocab, 2.0f);
      layers::cross_entropy_backward(logits.data(), targets.data(), lse0.data(), n, vocab, 2.0f, b0.data(),
                                     Round::none);
    }
    loss1 = layers::cross_entropy_forward(logits.data(), targets.data(), n, vocab, lse1.data());
    layers::cross_entropy_backward(d1.data(), targets.data(), lse0.data(), n, vocab, 2.0f);
    layers::cross_entropy_backward(logits.data(), targets.data(), lse0.data(), n, vocab, 2.0f, b1.data(),
                                   Round::none);
    EXPECT_NEAR(loss1, loss0, 1e-5 * std::abs(loss0));
    EXPECT_LE(max_rel(lse1, lse0, 1e-3), 1e-6);
    EXPECT_LE(max_rel(d1, d0, 1e-9), 2e-6);
    EXPECT_LE(max_rel(b1, b0, 1e-9), 1.0 / 128);
    // The bf16 form is the rounding of the fp32 form.
    for (size_t i = 0; i < d0.size(); ++i) ASSERT_EQ(b0[i].bits, to_bf16(d0[i]).bits) << i;
  }
}

}  // namespace
}  // namespace ridge::model

namespace ridge::model {
namespace {

// The rows rounded in bulk (bf16, and fp32 rounded through fp16) hold exactly what a per-element
// to_op of the same float expression gives: RMSNorm's output, RoPE forward and backward, the cast.
// RoPE's rows are q|k|v with k and v `dkv` wide: d (multi-head) or fewer (grouped-query attention).
template <typename O>
void check_rounded_rows(Round r, int64_t dkv) {
  const int64_t n = 6, positions = 5, dh = 8, d = 16, rot = d + dkv, row = d + 2 * dkv;
  const auto x = sample(static_cast<size_t>(n * row), 3.0f, 11);
  const auto w = sample(static_cast<size_t>(d), 1.0f, 12);
  std::vector<float> cos_t, sin_t;
  layers::rope_tables<float>(positions, dh, 10000.0, cos_t, sin_t);
  auto op = [&](float v) { return layers::to_op<O>(v, r); };
  auto same = [](O a, O b) {
    if constexpr (std::is_same_v<O, bf16>)
      return a.bits == b.bits;
    else
      return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
  };

  // RMSNorm over the first d columns of each row.
  std::vector<float> xn(static_cast<size_t>(n * d)), rstd(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) std::copy_n(x.data() + i * row, d, xn.data() + i * d);
  std::vector<O> y(static_cast<size_t>(n * d));
  layers::rmsnorm_forward(xn.data(), w.data(), n, d, 1e-5f, rstd.data(), y.data(), r);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j)
      ASSERT_TRUE(same(
          y[static_cast<size_t>(i * d + j)],
          op(xn[static_cast<size_t>(i * d + j)] * rstd[static_cast<size_t>(i)] * w[static_cast<size_t>(j)])))
          << "rmsnorm " << i << "," << j;

  // RoPE forward from the fp32 q|k|v rows, and backward from fp32 gradients.
  std::vector<O> q(x.size()), g(x.size());
  // Each row at a position of its own, out of order (as generation's rows of several sequences).
  const std::vector<int64_t> pos = {1, 4, 2, 0, 3, 1};
  layers::rope_forward(x.data(), q.data(), n, pos.data(), rot, row, dh, cos_t.data(), sin_t.data(), r);
  layers::rope_backward<float>(x.data(), g.data(), n, pos.data(), rot, row, dh, cos_t.data(), sin_t.data(),
                               r);
  for (int64_t i = 0; i < n; ++i) {
    const float* c = cos_t.data() + pos[static_cast<size_t>(i)] * dh / 2;
    const float* s = sin_t.data() + pos[static_cast<size_t>(i)] * dh / 2;
    const float* in = x.data() + i * row;
    for (int64_t j = 0; j < row; ++j) {
      const size_t at = static_cast<size_t>(i * row + j);
      O fq, fg;
      if (j < rot) {
        const int64_t p = (j % dh) / 2, j0 = j - j % 2;
        fq = j % 2 == 0 ? op(in[j0] * c[p] - in[j0 + 1] * s[p]) : op(in[j0] * s[p] + in[j0 + 1] * c[p]);
        fg = j % 2 == 0 ? op(in[j0] * c[p] + in[j0 + 1] * s[p]) : op(-in[j0] * s[p] + in[j0 + 1] * c[p]);
      } else {
        fq = fg = op(in[j]);
      }
      ASSERT_TRUE(same(q[at], fq)) << "rope forward " << i << "," << j;
      ASSERT_TRUE(same(g[at], fg)) << "rope backward " << i << "," << j;
    }
  }

  // The cast, over more than one chunk of the parallel split.
  const auto big = sample(size_t{70000}, 1e3f, 13);
  std::vector<O> cb(big.size());
  layers::cast<O>(big.data(), cb.data(), static_cast<int64_t>(big.size()), r);
  for (size_t i = 0; i < big.size(); ++i) ASSERT_TRUE(same(cb[i], op(big[i]))) << "cast " << i;
}

TEST(LayersVector, RoundedRowsEqualPerElementRounding) {
  for (cpu::Isa isa : cpu::supported_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    cpu::ScopedIsa scoped(isa);
    for (const int64_t dkv : {16, 8}) {  // two kv heads of 8 (as many as q's), or one
      SCOPED_TRACE(dkv);
      check_rounded_rows<bf16>(Round::none, dkv);
      check_rounded_rows<float>(Round::fp16, dkv);
      check_rounded_rows<float>(Round::none, dkv);
    }
  }
}

}  // namespace
}  // namespace ridge::model
