// Sliding windows, softcap and variable-length batches (flash-attn's window_size, softcap and
// flash_attn_varlen_func) on every ISA path: fp32 against the fp64 math path within 1e-5, bf16 by
// flash-attn's own rule (against a plain bf16 implementation written here), varlen against each
// sequence alone bit for bit at several thread counts, and the argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "ridge/attention.hpp"
#include "ridge/core.hpp"
#include "attention/internal.hpp"
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

// The backward's slice size lowered for a scope: short sequences then go through many slices and the
// in-order dQ accumulation (at the default, a sequence needs thousands of tokens for two).
struct ScopedSliceScores {
  double saved;
  explicit ScopedSliceScores(double s) : saved(detail::backward_slice_scores()) {
    detail::backward_slice_scores() = s;
  }
  ~ScopedSliceScores() { detail::backward_slice_scores() = saved; }
  ScopedSliceScores(const ScopedSliceScores&) = delete;
  ScopedSliceScores& operator=(const ScopedSliceScores&) = delete;
};

double val(float x) {
  return x;
}
double val(bf16 x) {
  return to_float(x);
}
float round_bf16(double x) {
  return to_float(to_bf16(static_cast<float>(x)));
}

template <typename T>
T make(float x) {
  if constexpr (std::is_same_v<T, bf16>)
    return to_bf16(x);
  else
    return static_cast<T>(x);
}

// A packed [total, heads, d] problem (the varlen layout); a dense [1, heads, n, d] case is one
// sequence of it seen through 4-d views.
template <typename T>
struct Packed {
  int64_t heads, kv_heads, d;
  std::vector<int32_t> cu_q, cu_k;
  int64_t tq, tk;
  std::vector<T> q, k, v, d_o, o, dq, dk, dv;
  std::vector<float> lse;  // [heads, tq]
  Packed(int64_t h, int64_t kvh, int64_t d_, const std::vector<int64_t>& lq, const std::vector<int64_t>& lk,
         uint32_t seed)
      : heads(h), kv_heads(kvh), d(d_) {
    cu_q = {0};
    cu_k = {0};
    for (size_t b = 0; b < lq.size(); ++b) {
      cu_q.push_back(static_cast<int32_t>(cu_q.back() + lq[b]));
      cu_k.push_back(static_cast<int32_t>(cu_k.back() + lk[b]));
    }
    tq = cu_q.back();
    tk = cu_k.back();
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    auto fill = [&](std::vector<T>& x, int64_t n) {
      x.resize(static_cast<size_t>(n));
      for (auto& e : x) e = make<T>(dist(rng));
    };
    fill(q, tq * h * d);
    fill(k, tk * kvh * d);
    fill(v, tk * kvh * d);
    fill(d_o, tq * h * d);
    o.assign(q.size(), make<T>(0.0f));
    dq.assign(q.size(), make<T>(0.0f));
    dk.assign(k.size(), make<T>(0.0f));
    dv.assign(v.size(), make<T>(0.0f));
    lse.assign(static_cast<size_t>(h * tq), 0.0f);
  }
  int64_t batch() const { return static_cast<int64_t>(cu_q.size()) - 1; }
  static TensorView<T> view3(std::vector<T>& x, int64_t rows, int64_t hh, int64_t dd) {
    return TensorView<T>::contiguous(x.data(), {rows, hh, dd});
  }
  void forward(const Options& opt) {
    flash_attention_varlen_forward<T>(view3(q, tq, heads, d), view3(k, tk, kv_heads, d),
                                      view3(v, tk, kv_heads, d), cu_q, cu_k, max_len(cu_q), max_len(cu_k),
                                      view3(o, tq, heads, d),
                                      TensorView<float>::contiguous(lse.data(), {heads, tq}), opt);
  }
  void backward(const Options& opt) {
    flash_attention_varlen_backward<T>(
        view3(q, tq, heads, d), view3(k, tk, kv_heads, d), view3(v, tk, kv_heads, d), view3(o, tq, heads, d),
        view3(d_o, tq, heads, d), TensorView<float>::contiguous(lse.data(), {heads, tq}), cu_q, cu_k,
        max_len(cu_q), max_len(cu_k), view3(dq, tq, heads, d), view3(dk, tk, kv_heads, d),
        view3(dv, tk, kv_heads, d), opt);
  }
  static int64_t max_len(const std::vector<int32_t>& cu) {
    int64_t m = 0;
    for (size_t b = 0; b + 1 < cu.size(); ++b) m = std::max<int64_t>(m, cu[b + 1] - cu[b]);
    return m;
  }
  // Sequence b of a packed buffer as a [1, hh, n, d] view.
  static TensorView<T> seq4(std::vector<T>& x, int64_t start, int64_t n, int64_t hh, int64_t dd) {
    TensorView<T> t;
    t.data = x.data() + start * hh * dd;
    t.rank = 4;
    t.shape = {1, hh, n, dd};
    t.stride = {n * hh * dd, dd, hh * dd, 1};
    return t;
  }
};

// ---- A plain bf16 implementation: what a naive PyTorch bf16 attention computes, for flash-attn's
// rule. Every matmul accumulates in fp32 and rounds its output to bf16; the scaling, the softcap's
// steps, the softmax (computed in fp32 inside, output rounded) and its backward round at each step.
struct Grads {
  std::vector<double> o, dq, dk, dv;  // [n, d] for one head (dk, dv: this head's share)
};

Grads bf16_attention_head(const std::vector<float>& q, const std::vector<float>& k,
                          const std::vector<float>& v, const std::vector<float>& d_o, int64_t n_q,
                          int64_t n_k, int64_t d, double scale, const Options& opt) {
  const int64_t off = n_k - n_q;
  const int64_t left = opt.window_left, right = opt.causal ? 0 : opt.window_right;
  const double cap = opt.softcap;
  std::vector<float> S(n_q * n_k), P(n_q * n_k, 0.0f), G(n_q * n_k, 0.0f);
  std::vector<char> vis(n_q * n_k, 0);
  for (int64_t i = 0; i < n_q; ++i)
    for (int64_t j = 0; j < n_k; ++j) {
      const bool ok = (left < 0 || j >= i + off - left) && (right < 0 || j <= i + off + right);
      vis[i * n_k + j] = ok;
      float acc = 0.0f;
      for (int64_t c = 0; c < d; ++c) acc += q[i * d + c] * k[j * d + c];
      float s = round_bf16(round_bf16(acc) * scale);
      if (cap > 0) {
        const float t = round_bf16(std::tanh(round_bf16(s / cap)));
        G[i * n_k + j] = round_bf16(1.0 - static_cast<double>(t) * t);
        s = round_bf16(t * cap);
      }
      S[i * n_k + j] = s;
    }
  for (int64_t i = 0; i < n_q; ++i) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n_k; ++j)
      if (vis[i * n_k + j]) mx = std::max(mx, S[i * n_k + j]);
    if (mx == -std::numeric_limits<float>::infinity()) continue;
    float sum = 0.0f;
    for (int64_t j = 0; j < n_k; ++j)
      if (vis[i * n_k + j]) sum += std::exp(S[i * n_k + j] - mx);
    for (int64_t j = 0; j < n_k; ++j)
      if (vis[i * n_k + j]) P[i * n_k + j] = round_bf16(std::exp(S[i * n_k + j] - mx) / sum);
  }
  Grads g;
  g.o.assign(n_q * d, 0.0);
  g.dq.assign(n_q * d, 0.0);
  g.dk.assign(n_k * d, 0.0);
  g.dv.assign(n_k * d, 0.0);
  for (int64_t i = 0; i < n_q; ++i)
    for (int64_t c = 0; c < d; ++c) {
      float acc = 0.0f;
      for (int64_t j = 0; j < n_k; ++j) acc += P[i * n_k + j] * v[j * d + c];
      g.o[i * d + c] = round_bf16(acc);
    }
  // Backward: dP = dO V^T, dV = P^T dO, dS = P (dP - rowsum(P dP)), softcap, scale, dQ = dS K, dK = dS^T Q.
  std::vector<float> dS(n_q * n_k, 0.0f);
  for (int64_t i = 0; i < n_q; ++i) {
    std::vector<float> dP(n_k);
    float D = 0.0f;
    for (int64_t j = 0; j < n_k; ++j) {
      float acc = 0.0f;
      for (int64_t c = 0; c < d; ++c) acc += d_o[i * d + c] * v[j * d + c];
      dP[j] = round_bf16(acc);
      D += P[i * n_k + j] * dP[j];
    }
    for (int64_t j = 0; j < n_k; ++j) {
      float ds = round_bf16(P[i * n_k + j] * (dP[j] - D));
      if (cap > 0) ds = round_bf16(ds * G[i * n_k + j]);
      dS[i * n_k + j] = round_bf16(ds * scale);
    }
  }
  for (int64_t j = 0; j < n_k; ++j)
    for (int64_t c = 0; c < d; ++c) {
      float av = 0.0f, ak = 0.0f;
      for (int64_t i = 0; i < n_q; ++i) {
        av += P[i * n_k + j] * d_o[i * d + c];
        ak += dS[i * n_k + j] * q[i * d + c];
      }
      g.dv[j * d + c] = round_bf16(av);
      g.dk[j * d + c] = round_bf16(ak);
    }
  for (int64_t i = 0; i < n_q; ++i)
    for (int64_t c = 0; c < d; ++c) {
      float acc = 0.0f;
      for (int64_t j = 0; j < n_k; ++j) acc += dS[i * n_k + j] * k[j * d + c];
      g.dq[i * d + c] = round_bf16(acc);
    }
  return g;
}

struct Config {
  int64_t heads, kv_heads, d;
  std::vector<int64_t> lq, lk;
  bool causal;
  int64_t left, right;
  float softcap;
};

std::string describe(const Config& c) {
  std::string l;
  for (size_t b = 0; b < c.lq.size(); ++b) l += fmt::format("{}x{} ", c.lq[b], c.lk[b]);
  return fmt::format("h{} kvh{} d{} seqs [{}] causal {} window ({}, {}) softcap {}", c.heads, c.kv_heads, c.d,
                     l, c.causal, c.left, c.right, c.softcap);
}

Options options_of(const Config& c) {
  Options o;
  o.causal = c.causal;
  o.window_left = c.left;
  o.window_right = c.right;
  o.softcap = c.softcap;
  return o;
}

// One varlen run checked sequence by sequence against the fp64 math path (and, for bf16, the plain
// bf16 implementation): fp32 within 1e-5 of max |ref| per output and sequence; bf16 by flash-attn's
// rule, max |ridge - ref| <= 2 max |pt - ref| + 1e-5 (outputs), 3x (gradients).
template <typename T>
void check_config(const Config& c, uint32_t seed = 5) {
  SCOPED_TRACE(describe(c));
  constexpr bool is_bf16 = std::is_same_v<T, bf16>;
  const Options opt = options_of(c);
  Packed<T> r(c.heads, c.kv_heads, c.d, c.lq, c.lk, seed);
  r.forward(opt);
  r.backward(opt);
  const int64_t H = c.heads, KH = c.kv_heads, D = c.d, group = H / KH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (int64_t b = 0; b < r.batch(); ++b) {
    SCOPED_TRACE(fmt::format("sequence {}", b));
    const int64_t q0 = r.cu_q[b], nq = r.cu_q[b + 1] - q0, k0 = r.cu_k[b], nk = r.cu_k[b + 1] - k0;
    auto got = [&](std::vector<T>& x, int64_t start, int64_t hh, int64_t h, int64_t i, int64_t cc) {
      return val(x[static_cast<size_t>(((start + i) * hh + h) * D + cc)]);
    };
    if (nq == 0) {
      for (int64_t j = 0; j < nk; ++j)
        for (int64_t h = 0; h < KH; ++h)
          for (int64_t cc = 0; cc < D; ++cc) {
            ASSERT_EQ(got(r.dk, k0, KH, h, j, cc), 0.0);
            ASSERT_EQ(got(r.dv, k0, KH, h, j, cc), 0.0);
          }
      continue;
    }
    if (nk == 0) {
      for (int64_t i = 0; i < nq; ++i)
        for (int64_t h = 0; h < H; ++h) {
          ASSERT_TRUE(std::isinf(r.lse[h * r.tq + q0 + i]) && r.lse[h * r.tq + q0 + i] < 0);
          for (int64_t cc = 0; cc < D; ++cc) {
            ASSERT_EQ(got(r.o, q0, H, h, i, cc), 0.0);
            ASSERT_EQ(got(r.dq, q0, H, h, i, cc), 0.0);
          }
        }
      continue;
    }
    // fp64 reference over the same inputs.
    std::vector<double> o(nq * H * D), dq(nq * H * D), dk(nk * KH * D), dv(nk * KH * D), lse(H * nq);
    auto v4 = [](std::vector<double>& x, int64_t n, int64_t hh, int64_t dd) {
      TensorView<double> t;
      t.data = x.data();
      t.rank = 4;
      t.shape = {1, hh, n, dd};
      t.stride = {n * hh * dd, dd, hh * dd, 1};
      return t;
    };
    const auto qv = Packed<T>::seq4(r.q, q0, nq, H, D), kv = Packed<T>::seq4(r.k, k0, nk, KH, D),
               vv = Packed<T>::seq4(r.v, k0, nk, KH, D), dov = Packed<T>::seq4(r.d_o, q0, nq, H, D);
    attention_reference_forward<T, double>(qv, kv, vv, v4(o, nq, H, D),
                                           TensorView<double>::contiguous(lse.data(), {1, H, nq}), opt);
    attention_reference_backward<T, double>(qv, kv, vv, dov, v4(dq, nq, H, D), v4(dk, nk, KH, D),
                                            v4(dv, nk, KH, D), opt);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < nq; ++i) {
        const double want = lse[h * nq + i];
        const float have = r.lse[h * r.tq + q0 + i];
        if (std::isinf(want)) {
          ASSERT_TRUE(std::isinf(have) && have < 0) << "lse row " << i << " head " << h << " got " << have;
          for (int64_t cc = 0; cc < D; ++cc) {
            ASSERT_EQ(got(r.o, q0, H, h, i, cc), 0.0);
            ASSERT_EQ(got(r.dq, q0, H, h, i, cc), 0.0);
          }
        } else {
          ASSERT_NEAR(have, want, (is_bf16 ? 2e-2 : 1e-5) * std::max(1.0, std::abs(want)));
        }
      }
    // max |ridge - ref| and max |ref| per output.
    auto err = [&](std::vector<T>& x, std::vector<double>& ref, int64_t start, int64_t n, int64_t hh) {
      double e = 0, m = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t h = 0; h < hh; ++h)
          for (int64_t cc = 0; cc < D; ++cc) {
            const double a = got(x, start, hh, h, i, cc), w = ref[(i * hh + h) * D + cc];
            EXPECT_FALSE(std::isnan(a));
            e = std::max(e, std::abs(a - w));
            m = std::max(m, std::abs(w));
          }
      return std::pair<double, double>{e, m};
    };
    const auto eo = err(r.o, o, q0, nq, H), edq = err(r.dq, dq, q0, nq, H), edk = err(r.dk, dk, k0, nk, KH),
               edv = err(r.dv, dv, k0, nk, KH);
    if constexpr (!is_bf16) {
      // dQ and dK are sums of P (dP - D) terms: where P is one-hot (a row that sees one key, as in
      // window (0, 0)) they are 0 in exact arithmetic, and fp32 leaves the rounding of dP - D, so they
      // are held to 1e-5 of the terms that cancel (scale x max|dO| x max|v| x max|k| or max|q|)
      // when that is larger than the reference itself.
      auto amax = [](const std::vector<T>& x) {
        double m = 0;
        for (const auto& e : x) m = std::max(m, std::abs(val(e)));
        return m;
      };
      const double terms = scale * amax(r.d_o) * amax(r.v);
      EXPECT_LE(eo.first, 1e-5 * std::max(eo.second, 1e-30)) << "o";
      EXPECT_LE(edq.first, 1e-5 * std::max(edq.second, terms * amax(r.k))) << "dq";
      EXPECT_LE(edk.first, 1e-5 * std::max(edk.second, terms * amax(r.q))) << "dk";
      EXPECT_LE(edv.first, 1e-5 * std::max(edv.second, 1e-30)) << "dv";
    } else {
      // pt: the plain bf16 implementation, head by head (dk, dv summed over the group in fp32 then
      // rounded, as a bf16 framework's reduction of the expanded heads would).
      double po = 0, pdq = 0, pdk = 0, pdv = 0;
      std::vector<double> sdk(nk * KH * D, 0.0), sdv(nk * KH * D, 0.0);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kh = h / group;
        auto head = [&](std::vector<T>& x, int64_t start, int64_t n, int64_t hh, int64_t hd) {
          std::vector<float> out(n * D);
          for (int64_t i = 0; i < n; ++i)
            for (int64_t cc = 0; cc < D; ++cc)
              out[i * D + cc] = static_cast<float>(got(x, start, hh, hd, i, cc));
          return out;
        };
        const Grads g =
            bf16_attention_head(head(r.q, q0, nq, H, h), head(r.k, k0, nk, KH, kh), head(r.v, k0, nk, KH, kh),
                                head(r.d_o, q0, nq, H, h), nq, nk, D, scale, opt);
        for (int64_t i = 0; i < nq; ++i)
          for (int64_t cc = 0; cc < D; ++cc) {
            po = std::max(po, std::abs(g.o[i * D + cc] - o[(i * H + h) * D + cc]));
            pdq = std::max(pdq, std::abs(g.dq[i * D + cc] - dq[(i * H + h) * D + cc]));
          }
        for (int64_t j = 0; j < nk; ++j)
          for (int64_t cc = 0; cc < D; ++cc) {
            sdk[(j * KH + kh) * D + cc] += g.dk[j * D + cc];
            sdv[(j * KH + kh) * D + cc] += g.dv[j * D + cc];
          }
      }
      for (size_t x = 0; x < sdk.size(); ++x) {
        pdk = std::max(pdk, std::abs(round_bf16(sdk[x]) - dk[x]));
        pdv = std::max(pdv, std::abs(round_bf16(sdv[x]) - dv[x]));
      }
      EXPECT_LE(eo.first, 2 * po + 1e-5) << "o: the plain bf16 error is " << po;
      EXPECT_LE(edq.first, 3 * pdq + 1e-5) << "dq: the plain bf16 error is " << pdq;
      EXPECT_LE(edk.first, 3 * pdk + 1e-5) << "dk: the plain bf16 error is " << pdk;
      EXPECT_LE(edv.first, 3 * pdv + 1e-5) << "dv: the plain bf16 error is " << pdv;
    }
  }
}

// The awkward shapes, one configuration each (a full cross product would take hours on the scalar
// path): every head dimension of the list, GQA 1, 4, 8, windows (0,0), (1,0), (w,w), (-1,0) and
// wider than the sequence, with and without causal, softcap 0, 5, 30, 50, lengths 0, 1, 7, 127, 129
// and primes, n_q != n_k both ways.
std::vector<Config> configs() {
  return {
      {2, 2, 64, {7}, {7}, false, -1, -1, 0.0f},
      {4, 1, 32, {1}, {1}, false, 0, 0, 5.0f},
      {4, 1, 80, {127}, {129}, false, 0, 0, 0.0f},
      {8, 1, 96, {129}, {127}, false, 1, 0, 30.0f},
      {2, 1, 128, {131}, {131}, false, 16, 16, 50.0f},
      {4, 4, 64, {129}, {37}, false, -1, 0, 0.0f},
      {4, 1, 32, {37}, {129}, true, 300, -1, 30.0f},
      {1, 1, 80, {127}, {127}, false, 200, 200, 0.0f},
      {8, 1, 64, {61}, {67}, true, 7, -1, 5.0f},
      {2, 2, 96, {7, 0, 129, 1, 53, 0}, {11, 3, 127, 0, 53, 0}, true, -1, -1, 0.0f},
      {4, 1, 32, {127, 7, 1, 0, 64}, {127, 1, 7, 5, 64}, false, 5, 3, 50.0f},
      {2, 1, 128, {13, 129, 2}, {129, 13, 2}, false, 0, 0, 30.0f},
  };
}

TEST(FlashAttentionMasks, Fp32MatchesFp64OnEveryPath) {
  for (cpu::Isa isa : cpu::supported_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    dispatch::ScopedPath scoped({.isa = isa});
    for (const auto& c : configs()) check_config<float>(c);
  }
}

TEST(FlashAttentionMasks, Bf16MeetsFlashAttnRuleOnEveryPath) {
  for (cpu::Isa isa : cpu::supported_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    dispatch::ScopedPath scoped({.isa = isa});
    for (const auto& c : configs()) check_config<bf16>(c);
  }
}

// A seeded sample of the whole cross-product (the hand-picked configurations above cover each value
// once; these mix them): d in {32, 64, 80, 96, 128}, GQA 1/4/8, every window shape (with causal or
// not), softcap 0/5/30/50, and 1..3 sequences whose lengths come from the awkward list, q and k
// lengths drawn apart. Every ISA path, fp32 and bf16; fewer samples under RIDGE_TEST_SMALL.
std::vector<Config> sampled_configs(int n) {
  const std::vector<int64_t> ds = {32, 64, 80, 96, 128}, groups = {1, 4, 8},
                             lens = {0, 1, 2, 7, 13, 31, 61, 64, 97, 127, 128, 129};
  const std::vector<std::pair<int64_t, int64_t>> windows = {{-1, -1}, {0, 0},  {1, 0},     {9, 9},
                                                            {-1, 0},  {0, -1}, {300, 300}, {5, 2}};
  const std::vector<float> caps = {0.0f, 5.0f, 30.0f, 50.0f};
  std::mt19937 rng(2024);
  auto pick = [&](const auto& v) { return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)]; };
  std::vector<Config> out;
  for (int x = 0; x < n; ++x) {
    Config c;
    c.d = pick(ds);
    const int64_t g = pick(groups);
    c.kv_heads = g == 8 ? 1 : 1 + static_cast<int64_t>(rng() % 2);
    c.heads = g * c.kv_heads;
    const auto [l, r] = pick(windows);
    c.left = l;
    c.right = r;
    c.causal = rng() % 3 == 0;
    c.softcap = pick(caps);
    const int64_t seqs = 1 + static_cast<int64_t>(rng() % 3);
    for (int64_t b = 0; b < seqs; ++b) {
      const int64_t lq = pick(lens);
      c.lq.push_back(lq);
      c.lk.push_back(rng() % 2 ? lq : pick(lens));
    }
    out.push_back(c);
  }
  return out;
}

TEST(FlashAttentionMasks, SampledCrossProductOnEveryPath) {
  const std::vector<Config> sample = sampled_configs(small_tests() ? 6 : 12);
  for (cpu::Isa isa : cpu::supported_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    dispatch::ScopedPath scoped({.isa = isa});
    for (const auto& c : sample) {
      check_config<float>(c, 17);
      check_config<bf16>(c, 17);
    }
  }
}

// Longer sequences, so a window skips whole key blocks, and the backward's slices lowered so each
// sequence is cut into several (their dQ partials meet in the accumulator). On the path in force;
// slices of about `slice_scores` visible scores.
void long_windowed_and_sliced(int64_t n, double slice_scores, bool bf16_only) {
  ScopedSliceScores many(slice_scores);
  const std::vector<Config> long_configs = {
      {1, 1, 64, {n}, {n}, true, 128, -1, 0.0f},
      {2, 1, 32, {n}, {n + 40}, false, 64, 64, 30.0f},
      {1, 1, 64, {n}, {n}, true, -1, -1, 0.0f},
  };
  for (const auto& c : long_configs) {
    if (!bf16_only) check_config<float>(c);
    check_config<bf16>(c);
  }
}

TEST(FlashAttentionMasks, LongWindowedAndSlicedSequences) {
  for (cpu::Isa isa : cpu::supported_isas()) {
    if (isa == cpu::Isa::scalar && !small_tests()) continue;  // the scalar path is run by the shapes above
    SCOPED_TRACE(cpu::isa_name(isa));
    dispatch::ScopedPath scoped({.isa = isa});
    long_windowed_and_sliced(small_tests() ? 700 : 1500, 1 << 17, false);
  }
}

// The dense API takes the same options: its result is the varlen one of a single sequence.
TEST(FlashAttentionMasks, DenseEqualsVarlenOfOneSequence) {
  for (cpu::Isa isa : cpu::supported_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    dispatch::ScopedPath scoped({.isa = isa});
    const Config c{4, 2, 64, {100}, {77}, false, 20, 3, 30.0f};
    const Options opt = options_of(c);
    Packed<float> r(c.heads, c.kv_heads, c.d, c.lq, c.lk, 9);
    r.forward(opt);
    r.backward(opt);
    std::vector<float> o(r.o.size()), dq(r.dq.size()), dk(r.dk.size()), dv(r.dv.size()), lse(r.lse.size());
    auto lv = TensorView<float>::contiguous(lse.data(), {1, 4, 100});
    auto q4 = Packed<float>::seq4(r.q, 0, 100, 4, 64), k4 = Packed<float>::seq4(r.k, 0, 77, 2, 64),
         v4 = Packed<float>::seq4(r.v, 0, 77, 2, 64), do4 = Packed<float>::seq4(r.d_o, 0, 100, 4, 64);
    flash_attention_forward(q4, k4, v4, Packed<float>::seq4(o, 0, 100, 4, 64), lv, opt);
    flash_attention_backward(q4, k4, v4, Packed<float>::seq4(o, 0, 100, 4, 64), do4, lv,
                             Packed<float>::seq4(dq, 0, 100, 4, 64), Packed<float>::seq4(dk, 0, 77, 2, 64),
                             Packed<float>::seq4(dv, 0, 77, 2, 64), opt);
    EXPECT_EQ(o, r.o);
    EXPECT_EQ(lse, r.lse);
    EXPECT_EQ(dq, r.dq);
    EXPECT_EQ(dk, r.dk);
    EXPECT_EQ(dv, r.dv);
  }
}

template <typename T>
bool same_bits(const T* a, const T* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(T)) == 0;  // an empty sequence's data() may be null
}

// A batch gives, for each sequence, exactly the bits of that sequence run alone, at 1, 2, 3 and 7
// threads: one long sequence among short ones (its backward cut into slices: 8 query heads on one kv
// head, 1500 x 1500, causal, are 2 slices at the default slice size) and empty ones.
// `lq`, `lk`, `thread_counts`: a smaller batch and fewer counts for the tile emulator.
template <typename T>
void check_bit_identity(const Options& opt, const std::vector<int64_t>& lq = {5, 1500, 0, 64, 1, 129, 0, 300},
                        const std::vector<int64_t>& lk = {5, 1500, 9, 64, 3, 127, 0, 280},
                        const std::vector<int>& thread_counts = {1, 2, 3, 7}) {
  const int threads = get_num_threads();
  Packed<T> base(8, 1, 64, lq, lk, 21);
  set_num_threads(1);
  base.forward(opt);
  base.backward(opt);
  for (int nt : thread_counts) {
    SCOPED_TRACE(fmt::format("{} threads", nt));
    set_num_threads(nt);
    Packed<T> all(8, 1, 64, lq, lk, 21);
    all.forward(opt);
    all.backward(opt);
    EXPECT_TRUE(same_bits(all.o.data(), base.o.data(), base.o.size()));
    EXPECT_TRUE(same_bits(all.lse.data(), base.lse.data(), base.lse.size()));
    EXPECT_TRUE(same_bits(all.dq.data(), base.dq.data(), base.dq.size()));
    EXPECT_TRUE(same_bits(all.dk.data(), base.dk.data(), base.dk.size()));
    EXPECT_TRUE(same_bits(all.dv.data(), base.dv.data(), base.dv.size()));
    for (size_t b = 0; b < lq.size(); ++b) {
      SCOPED_TRACE(fmt::format("sequence {} alone", b));
      Packed<T> one(8, 1, 64, {lq[b]}, {lk[b]}, 1);
      const int64_t q0 = base.cu_q[b], k0 = base.cu_k[b];
      auto copy = [&](std::vector<T>& dst, const std::vector<T>& src, int64_t start, int64_t hh) {
        std::copy(src.begin() + start * hh * 64,
                  src.begin() + start * hh * 64 + static_cast<int64_t>(dst.size()), dst.begin());
      };
      copy(one.q, base.q, q0, 8);
      copy(one.d_o, base.d_o, q0, 8);
      copy(one.k, base.k, k0, 1);
      copy(one.v, base.v, k0, 1);
      one.forward(opt);
      one.backward(opt);
      EXPECT_TRUE(same_bits(one.o.data(), base.o.data() + q0 * 8 * 64, one.o.size()));
      EXPECT_TRUE(same_bits(one.dq.data(), base.dq.data() + q0 * 8 * 64, one.dq.size()));
      EXPECT_TRUE(same_bits(one.dk.data(), base.dk.data() + k0 * 64, one.dk.size()));
      EXPECT_TRUE(same_bits(one.dv.data(), base.dv.data() + k0 * 64, one.dv.size()));
      for (int64_t h = 0; h < 8; ++h)
        EXPECT_TRUE(same_bits(one.lse.data() + h * lq[b], base.lse.data() + h * base.tq + q0,
                              static_cast<size_t>(lq[b])));
    }
  }
  set_num_threads(threads);
}

TEST(FlashAttentionVarlen, EachSequenceAloneBitForBitAtAnyThreadCount) {
  for (cpu::Isa isa : cpu::supported_isas()) {
    if (isa == cpu::Isa::scalar) continue;  // slow there; the same body is checked below on one config
    SCOPED_TRACE(cpu::isa_name(isa));
    dispatch::ScopedPath scoped({.isa = isa});
    check_bit_identity<float>(options_of({1, 1, 64, {}, {}, true, -1, -1, 0.0f}));
    check_bit_identity<bf16>(options_of({1, 1, 64, {}, {}, false, 100, 20, 30.0f}));
    // Every sequence of 64 tokens and more cut into slices, up to the cap of 64 a unit.
    ScopedSliceScores many(1 << 14);
    check_bit_identity<float>(options_of({1, 1, 64, {}, {}, false, 200, -1, 5.0f}));
  }
  dispatch::ScopedPath scalar({.isa = cpu::Isa::scalar});
  check_bit_identity<float>(options_of({1, 1, 64, {}, {}, false, 64, 0, 5.0f}));
}

TEST(FlashAttentionVarlen, BadInputIsAnErrorNamingTheArgument) {
  Packed<float> r(2, 1, 32, {3, 4}, {5, 2}, 3);
  auto expect_error = [&](auto&& fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto fwd = [&](std::vector<int32_t> cq, std::vector<int32_t> ck, int64_t mq, int64_t mk,
                 const Options& opt) {
    flash_attention_varlen_forward<float>(
        Packed<float>::view3(r.q, 7, 2, 32), Packed<float>::view3(r.k, 7, 1, 32),
        Packed<float>::view3(r.v, 7, 1, 32), cq, ck, mq, mk, Packed<float>::view3(r.o, 7, 2, 32),
        TensorView<float>::contiguous(r.lse.data(), {2, 7}), opt);
  };
  const std::vector<int32_t> cq = {0, 3, 7}, ck = {0, 5, 7};
  fwd(cq, ck, 4, 5, {});  // accepted
  expect_error([&] { fwd({0, 4, 3}, ck, 4, 5, {}); }, "cu_seqlens_q must not decrease");
  expect_error([&] { fwd({1, 3, 7}, ck, 4, 5, {}); }, "cu_seqlens_q[0] must be 0");
  expect_error([&] { fwd(cq, {0, 5, 6}, 4, 5, {}); }, "cu_seqlens_k's last entry (6)");
  expect_error([&] { fwd(cq, {0, 5}, 4, 5, {}); }, "cu_seqlens_q and cu_seqlens_k must have the same size");
  expect_error([&] { fwd({0}, {0}, 4, 5, {}); }, "cu_seqlens_q must hold batch + 1 >= 2");
  expect_error([&] { fwd(cq, ck, 3, 5, {}); }, "max_seqlen_q (3) is less than");
  expect_error([&] { fwd(cq, ck, 4, 4, {}); }, "max_seqlen_k (4) is less than");
  Options bad;
  bad.window_left = -2;
  expect_error([&] { fwd(cq, ck, 4, 5, bad); }, "window_left must be >= 0, or -1");
  bad = {};
  bad.window_right = -5;
  expect_error([&] { fwd(cq, ck, 4, 5, bad); }, "window_right");
  bad = {};
  bad.softcap = -1.0f;
  expect_error([&] { fwd(cq, ck, 4, 5, bad); }, "softcap must be finite, >= 0");
  bad.softcap = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { fwd(cq, ck, 4, 5, bad); }, "softcap");
  // The dense form checks the same options.
  bad = {};
  bad.window_left = -3;
  expect_error(
      [&] {
        flash_attention_forward(Packed<float>::seq4(r.q, 0, 3, 2, 32), Packed<float>::seq4(r.k, 0, 5, 1, 32),
                                Packed<float>::seq4(r.v, 0, 5, 1, 32), Packed<float>::seq4(r.o, 0, 3, 2, 32),
                                TensorView<float>::contiguous(r.lse.data(), {1, 2, 3}), bad);
      },
      "window_left");
  // Outputs aliasing inputs are refused as in the dense form.
  expect_error(
      [&] {
        flash_attention_varlen_forward<float>(
            Packed<float>::view3(r.q, 7, 2, 32), Packed<float>::view3(r.k, 7, 1, 32),
            Packed<float>::view3(r.v, 7, 1, 32), cq, ck, 4, 5, Packed<float>::view3(r.q, 7, 2, 32),
            TensorView<float>::contiguous(r.lse.data(), {2, 7}), {});
      },
      "output o overlaps input q");
}

// The roofline's count of visible scores against a direct count.
TEST(FlashAttentionMasks, VisibleScoresCountsTheMask) {
  for (const auto& [nq, nk, causal, l, rr] :
       std::vector<std::tuple<int64_t, int64_t, bool, int64_t, int64_t>>{{7, 7, false, -1, -1},
                                                                         {7, 7, true, -1, -1},
                                                                         {5, 9, false, 2, 1},
                                                                         {9, 5, true, 3, -1},
                                                                         {100, 100, false, 0, 0}}) {
    Options o;
    o.causal = causal;
    o.window_left = l;
    o.window_right = rr;
    double want = 0;
    const int64_t right = causal ? 0 : rr;
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t j = 0; j < nk; ++j)
        want += (l < 0 || j >= i + nk - nq - l) && (right < 0 || j <= i + nk - nq + right);
    EXPECT_EQ(attention_visible_scores(nq, nk, o), want);
  }
}

// ---- The AMX path (issue #27): the bf16 sweeps above on the tile kernels. "Emulated": on the tile
// emulator (any machine; about 100x slower than the scalar path, so the long and sampled sweeps are
// cut down); "OnAmx": on the instructions, where this CPU has them.

TEST(FlashAttentionAmx, Bf16MeetsFlashAttnRuleEmulated) {
  dispatch::ScopedPath emulation({.amx_emulated = true});
  for (const auto& c : configs()) check_config<bf16>(c);
}
TEST(FlashAttentionAmx, Bf16MeetsFlashAttnRuleOnAmx) {
  RIDGE_NEED_AMX();
  dispatch::ScopedPath amx({.isa = cpu::Isa::amx});
  for (const auto& c : configs()) check_config<bf16>(c);
}

TEST(FlashAttentionAmx, SampledCrossProductEmulated) {
  dispatch::ScopedPath emulation({.amx_emulated = true});
  for (const auto& c : sampled_configs(small_tests() ? 3 : 6)) check_config<bf16>(c, 17);
}
TEST(FlashAttentionAmx, SampledCrossProductOnAmx) {
  RIDGE_NEED_AMX();
  dispatch::ScopedPath amx({.isa = cpu::Isa::amx});
  for (const auto& c : sampled_configs(small_tests() ? 6 : 12)) check_config<bf16>(c, 17);
}

TEST(FlashAttentionAmx, LongWindowedAndSlicedSequencesEmulated) {
  dispatch::ScopedPath emulation({.amx_emulated = true});
  long_windowed_and_sliced(300, 1 << 13, true);
}
TEST(FlashAttentionAmx, LongWindowedAndSlicedSequencesOnAmx) {
  RIDGE_NEED_AMX();
  dispatch::ScopedPath amx({.isa = cpu::Isa::amx});
  long_windowed_and_sliced(small_tests() ? 700 : 1500, 1 << 17, true);
}

TEST(FlashAttentionAmx, EachSequenceAloneBitForBitAtAnyThreadCountEmulated) {
  dispatch::ScopedPath emulation({.amx_emulated = true});
  ScopedSliceScores many(1 << 13);  // the 150 x 150 sequence in several slices
  check_bit_identity<bf16>(options_of({1, 1, 64, {}, {}, false, 100, 20, 30.0f}),
                           {5, 150, 0, 64, 1, 33, 0, 70}, {5, 150, 9, 64, 3, 31, 0, 61}, {3});
}
TEST(FlashAttentionAmx, EachSequenceAloneBitForBitAtAnyThreadCountOnAmx) {
  RIDGE_NEED_AMX();
  dispatch::ScopedPath amx({.isa = cpu::Isa::amx});
  check_bit_identity<bf16>(options_of({1, 1, 64, {}, {}, false, 100, 20, 30.0f}));
  ScopedSliceScores many(1 << 14);
  check_bit_identity<bf16>(options_of({1, 1, 64, {}, {}, true, -1, -1, 0.0f}));
}

}  // namespace
}  // namespace ridge::attention
