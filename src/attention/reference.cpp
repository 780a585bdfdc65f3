// The math path: S = q k^T * scale, mask, softmax, O = P v, each materialised per (batch, head),
// and the backward through the same stored matrices. With Acc = double it is the tests' reference;
// with Acc = float it is the baseline FlashAttention is compared with.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ridge/attention.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/threads.hpp"
#include "core/check.hpp"

namespace ridge::attention {
namespace {

template <typename T>
double as_double(T x) {
  if constexpr (std::is_same_v<T, bf16>)
    return to_float(x);
  else
    return static_cast<double>(x);
}

struct Dims {
  int64_t batch, heads, kv_heads, n_q, n_k, d;
};

template <typename T>
Dims check_shapes(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v) {
  check(q.rank == 4 && k.rank == 4 && v.rank == 4,
        "attention reference: q, k, v must be rank 4 [batch, heads, seq, d]");
  Dims s{q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3]};
  check(k.shape[0] == s.batch && v.shape[0] == s.batch && k.shape[3] == s.d && v.shape[3] == s.d &&
            v.shape[1] == s.kv_heads && v.shape[2] == s.n_k,
        "attention reference: k and v must be [batch, kv_heads, n_k, d] matching q");
  check(s.kv_heads >= 1 && s.heads % s.kv_heads == 0,
        "attention reference: heads must be a multiple of kv_heads");
  check(s.n_q >= 1 && s.n_k >= 1 && s.d >= 1, "attention reference: empty shapes are not accepted");
  return s;
}

template <typename T, typename Acc>
void load_head(const TensorView<T>& t, int64_t b, int64_t h, int64_t n, int64_t d, Acc* out) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < d; ++c)
      out[i * d + c] = static_cast<Acc>(
          as_double(t.data[b * t.stride[0] + h * t.stride[1] + i * t.stride[2] + c * t.stride[3]]));
}

template <typename Acc>
Acc& at(const TensorView<Acc>& t, int64_t b, int64_t h, int64_t i, int64_t c) {
  return t.data[b * t.stride[0] + h * t.stride[1] + i * t.stride[2] + c * t.stride[3]];
}

// P = softmax(softcap(mask(q k^T * scale))) for one head, materialised; lse per row (-inf for a row
// that sees no key, whose P row is all zeros). Row i sees keys [i + off - left, i + off + right]
// (off = n_k - n_q; -1 = unbounded; causal is right = 0). With a softcap, G (when given) gets
// d(capped)/d(score) = 1 - tanh^2(score / softcap) for the backward.
template <typename Acc>
void probabilities(const Acc* q, const Acc* k, int64_t n_q, int64_t n_k, int64_t d, double scale,
                   const Options& opt, Acc* P, Acc* lse, Acc* G = nullptr) {
  const int64_t off = n_k - n_q;
  const int64_t left = opt.window_left, right = opt.causal ? 0 : opt.window_right;
  const Acc cap = static_cast<Acc>(opt.softcap);
  for (int64_t i = 0; i < n_q; ++i) {
    Acc* row = P + i * n_k;
    const int64_t lo = left >= 0 ? std::max<int64_t>(0, i + off - left) : 0;
    const int64_t hi = right >= 0 ? std::min<int64_t>(n_k, i + off + right + 1) : n_k;
    Acc mx = -std::numeric_limits<Acc>::infinity();
    for (int64_t j = 0; j < n_k; ++j) {
      row[j] = 0;
      if (G) G[i * n_k + j] = 0;
    }
    for (int64_t j = lo; j < hi; ++j) {
      Acc s = 0;
      for (int64_t c = 0; c < d; ++c) s += q[i * d + c] * k[j * d + c];
      s *= static_cast<Acc>(scale);
      if (cap > 0) {
        const Acc t = std::tanh(s / cap);
        s = cap * t;
        if (G) G[i * n_k + j] = 1 - t * t;
      }
      row[j] = s;
      mx = std::max(mx, row[j]);
    }
    if (hi <= lo) {
      lse[i] = -std::numeric_limits<Acc>::infinity();
      continue;
    }
    Acc sum = 0;
    for (int64_t j = lo; j < hi; ++j) {
      row[j] = std::exp(row[j] - mx);
      sum += row[j];
    }
    for (int64_t j = lo; j < hi; ++j) row[j] /= sum;
    lse[i] = mx + std::log(sum);
  }
}

double resolve_scale(float scale, int64_t d, const Options& opt = {}) {
  check(std::isfinite(scale) && scale >= 0.0f,
        "attention: scale must be finite and > 0 (0 means 1/sqrt(d)), got {}", scale);
  check(opt.window_left >= -1 && opt.window_right >= -1,
        "attention reference: window_left and window_right must be >= 0 or -1, got {} and {}",
        opt.window_left, opt.window_right);
  check(std::isfinite(opt.softcap) && opt.softcap >= 0.0f,
        "attention reference: softcap must be finite and >= 0, got {}", opt.softcap);
  return scale == 0.0f ? 1.0 / std::sqrt(static_cast<double>(d)) : static_cast<double>(scale);
}

}  // namespace

template <typename T, typename Acc>
void attention_reference_forward(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v,
                                 const TensorView<Acc>& o, const TensorView<Acc>& lse,
                                 const Options& options) {
  const Dims s = check_shapes(q, k, v);
  check(o.rank == 4 && o.shape == q.shape, "attention reference: o must have q's shape");
  check(lse.rank == 3 && lse.shape[0] == s.batch && lse.shape[1] == s.heads && lse.shape[2] == s.n_q,
        "attention reference: lse must be [batch, heads, n_q]");
  const double scale = resolve_scale(options.scale, s.d, options);
  const int64_t group = s.heads / s.kv_heads;
#pragma omp parallel num_threads(get_num_threads())
  {
    Buffer<Acc> qh(s.n_q * s.d, "attention.math.q"), kh(s.n_k * s.d, "attention.math.k"),
        vh(s.n_k * s.d, "attention.math.v"), P(s.n_q * s.n_k, "attention.math.P"),
        l(s.n_q, "attention.math.lse");
    std::vector<Acc> acc(s.d);
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < s.batch * s.heads; ++bh) {
      const int64_t b = bh / s.heads, h = bh % s.heads;
      load_head(q, b, h, s.n_q, s.d, qh.data());
      load_head(k, b, h / group, s.n_k, s.d, kh.data());
      load_head(v, b, h / group, s.n_k, s.d, vh.data());
      probabilities(qh.data(), kh.data(), s.n_q, s.n_k, s.d, scale, options, P.data(), l.data());
      for (int64_t i = 0; i < s.n_q; ++i) {
        for (auto& x : acc) x = 0;
        for (int64_t j = 0; j < s.n_k; ++j) {
          const Acc pij = P[i * s.n_k + j];
          if (pij == 0) continue;
          for (int64_t c = 0; c < s.d; ++c) acc[c] += pij * vh[j * s.d + c];
        }
        for (int64_t c = 0; c < s.d; ++c) at(o, b, h, i, c) = acc[c];
        lse.data[b * lse.stride[0] + h * lse.stride[1] + i * lse.stride[2]] = l[i];
      }
    }
  }
}

template <typename T, typename Acc>
void attention_reference_backward(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v,
                                  const TensorView<T>& d_o, const TensorView<Acc>& dq,
                                  const TensorView<Acc>& dk, const TensorView<Acc>& dv,
                                  const Options& options) {
  const Dims s = check_shapes(q, k, v);
  check(d_o.rank == 4 && d_o.shape == q.shape, "attention reference: do must have q's shape");
  check(dq.rank == 4 && dq.shape == q.shape, "attention reference: dq must have q's shape");
  check(dk.rank == 4 && dk.shape == k.shape && dv.rank == 4 && dv.shape == v.shape,
        "attention reference: dk and dv must have k's shape");
  const double scale = resolve_scale(options.scale, s.d, options);
  const int64_t group = s.heads / s.kv_heads;
  const int64_t n_q = s.n_q, n_k = s.n_k, d = s.d;
  // One task per (batch, kv head), so the group's dk, dv sums have a single writer.
#pragma omp parallel num_threads(get_num_threads())
  {
    Buffer<Acc> qh(n_q * d, "attention.math.q"), kh(n_k * d, "attention.math.k"),
        vh(n_k * d, "attention.math.v"), doh(n_q * d, "attention.math.do"), P(n_q * n_k, "attention.math.P"),
        dP(n_q * n_k, "attention.math.dP"), G(n_q * n_k, "attention.math.G"), l(n_q, "attention.math.lse"),
        dqh(n_q * d, "attention.math.dq"), dkh(n_k * d, "attention.math.dk"),
        dvh(n_k * d, "attention.math.dv");
#pragma omp for schedule(dynamic, 1)
    for (int64_t unit = 0; unit < s.batch * s.kv_heads; ++unit) {
      const int64_t b = unit / s.kv_heads, kvh = unit % s.kv_heads;
      load_head(k, b, kvh, n_k, d, kh.data());
      load_head(v, b, kvh, n_k, d, vh.data());
      for (auto& x : dkh) x = 0;
      for (auto& x : dvh) x = 0;
      for (int64_t hq = 0; hq < group; ++hq) {
        const int64_t h = kvh * group + hq;
        load_head(q, b, h, n_q, d, qh.data());
        load_head(d_o, b, h, n_q, d, doh.data());
        probabilities(qh.data(), kh.data(), n_q, n_k, d, scale, options, P.data(), l.data(), G.data());
        for (auto& x : dqh) x = 0;
        for (int64_t i = 0; i < n_q; ++i) {
          Acc Di = 0;
          for (int64_t j = 0; j < n_k; ++j) {
            Acc x = 0;
            for (int64_t c = 0; c < d; ++c) x += doh[i * d + c] * vh[j * d + c];
            dP[i * n_k + j] = x;
            Di += P[i * n_k + j] * x;
          }
          for (int64_t j = 0; j < n_k; ++j) {
            const Acc pij = P[i * n_k + j];
            if (pij == 0) continue;
            Acc ds = pij * (dP[i * n_k + j] - Di) * static_cast<Acc>(scale);
            if (options.softcap > 0.0f) ds *= G[i * n_k + j];
            for (int64_t c = 0; c < d; ++c) {
              dqh[i * d + c] += ds * kh[j * d + c];
              dkh[j * d + c] += ds * qh[i * d + c];
              dvh[j * d + c] += pij * doh[i * d + c];
            }
          }
        }
        for (int64_t i = 0; i < n_q; ++i)
          for (int64_t c = 0; c < d; ++c) at(dq, b, h, i, c) = dqh[i * d + c];
      }
      for (int64_t j = 0; j < n_k; ++j)
        for (int64_t c = 0; c < d; ++c) {
          at(dk, b, kvh, j, c) = dkh[j * d + c];
          at(dv, b, kvh, j, c) = dvh[j * d + c];
        }
    }
  }
}

#define RIDGE_INSTANTIATE(T, Acc)                                                                 \
  template void attention_reference_forward<T, Acc>(const TensorView<T>&, const TensorView<T>&,   \
                                                    const TensorView<T>&, const TensorView<Acc>&, \
                                                    const TensorView<Acc>&, const Options&);      \
  template void attention_reference_backward<T, Acc>(                                             \
      const TensorView<T>&, const TensorView<T>&, const TensorView<T>&, const TensorView<T>&,     \
      const TensorView<Acc>&, const TensorView<Acc>&, const TensorView<Acc>&, const Options&);
RIDGE_INSTANTIATE(float, float)
RIDGE_INSTANTIATE(float, double)
RIDGE_INSTANTIATE(bf16, float)
RIDGE_INSTANTIATE(bf16, double)
RIDGE_INSTANTIATE(double, double)  // the fp64 reference model of the gradient checks
#undef RIDGE_INSTANTIATE

}  // namespace ridge::attention
