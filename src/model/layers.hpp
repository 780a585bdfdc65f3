// The model's elementwise layers as forward/backward pairs over explicit row-major buffers
// (llm.c style). S is the compute type (float or double); O is the GEMM-operand type a layer writes
// for the next GEMM (float, bf16 or double), rounded through `Round` (fp16 emulation rounds a float
// through fp16). Everything is computed in S; rows are independent and split over threads, and every
// reduction over rows (the norm-weight gradients) sums fixed-size chunks in a fixed order, so the
// result does not depend on the thread count.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "ridge/core/error.hpp"
#include "ridge/core/format.hpp"
#include "ridge/core/threads.hpp"
#include "core/check.hpp"
#include "model/fused.hpp"

namespace ridge::model::layers {

inline constexpr int64_t kRowChunk = 64;  // rows per partial sum of a reduction over rows
// Below this many elements of work a loop runs on the calling thread: a parallel region costs
// microseconds (and far more when the machine is oversubscribed), more than the loop itself.
inline constexpr int64_t kParallelMin = 1 << 15;

// ---- Operand rounding ----
enum class Round { none, fp16 };

template <typename O, typename S>
inline O to_op(S x, Round r) {
  if constexpr (std::is_same_v<O, bf16>) {
    return to_bf16(static_cast<float>(x));
  } else if constexpr (std::is_same_v<O, float>) {
    return r == Round::fp16 ? to_float(to_fp16(static_cast<float>(x))) : static_cast<float>(x);
  } else {
    return static_cast<O>(x);
  }
}
template <typename S, typename O>
inline S from_op(O x) {
  if constexpr (std::is_same_v<O, bf16>) {
    return static_cast<S>(to_float(x));
  } else {
    return static_cast<S>(x);
  }
}

// Rows computed in float reach a rounded operand (bf16, or fp32 rounded through fp16) through core's
// bulk conversions: their vector paths round exactly as to_bf16 / to_fp16 do, where a scalar to_op
// per element keeps the loop from vectorising.
template <typename S, typename O>
inline constexpr bool row_types = std::is_same_v<S, float> &&
                                  (std::is_same_v<O, bf16> || std::is_same_v<O, float>);
template <typename S, typename O>
inline bool rounds_rows(Round r) {
  if constexpr (std::is_same_v<S, float> && std::is_same_v<O, bf16>) return true;
  return row_types<S, O> && r == Round::fp16;
}
// A per-thread float row for a layer to compute into before the bulk rounding.
inline float* scratch_row(int64_t n, int which = 0) {
  thread_local std::vector<float> rows[2];
  auto& v = rows[which];
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}
// dst = src rounded to the operand (n floats, one row or chunk).
template <typename O>
void round_row(const float* src, O* dst, int64_t n, Round r) {
  if constexpr (std::is_same_v<O, bf16>) {
    convert(src, dst, static_cast<size_t>(n));
  } else if constexpr (std::is_same_v<O, float>) {
    if (r == Round::fp16) {
      thread_local std::vector<fp16> half;
      if (half.size() < static_cast<size_t>(n)) half.resize(static_cast<size_t>(n));
      convert(src, half.data(), static_cast<size_t>(n));
      convert(half.data(), dst, static_cast<size_t>(n));
    } else if (src != dst) {
      std::copy_n(src, n, dst);
    }
  }
}

template <typename O, typename S>
void cast(const S* src, O* dst, int64_t n, Round r) {
  const int nt = get_num_threads();
  if constexpr (row_types<S, O>) {
    if (rounds_rows<S, O>(r)) {
      constexpr int64_t chunk = 1 << 14;
      const int64_t chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for num_threads(nt) schedule(static) if (n >= kParallelMin)
      for (int64_t c = 0; c < chunks; ++c)
        round_row(src + c * chunk, dst + c * chunk, std::min(chunk, n - c * chunk), r);
      return;
    }
  }
#pragma omp parallel for num_threads(nt) schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) dst[i] = to_op<O>(src[i], r);
}

// ---- Embedding ----
// x[i, :] = table[tokens[i], :]
template <typename S>
void embedding_forward(const int32_t* tokens, int64_t n, const S* table, int64_t vocab, int64_t d, S* x) {
  for (int64_t i = 0; i < n; ++i)
    check(tokens[i] >= 0 && tokens[i] < vocab,
          "inputs: token {} at position {} is outside the vocabulary [0, {})", tokens[i], i, vocab);
  const int nt = get_num_threads();
#pragma omp parallel for num_threads(nt) schedule(static) if (n * d >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) std::copy_n(table + tokens[i] * d, d, x + i * d);
}
// dtable[tokens[i], :] += dx[i, :]; threads split the columns, so rows sharing a token never race
// and each column sums in token order.
template <typename S>
void embedding_backward(const int32_t* tokens, int64_t n, const S* dx, int64_t d, S* dtable) {
  const int nt = get_num_threads();
#pragma omp parallel num_threads(nt) if (n * d >= kParallelMin)
  {
#ifdef _OPENMP
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
#else
    const int t = 0, T = 1;
#endif
    const int64_t c0 = d * t / T, c1 = d * (t + 1) / T;
    for (int64_t i = 0; i < n; ++i) {
      S* row = dtable + tokens[i] * d;
      const S* g = dx + i * d;
      for (int64_t c = c0; c < c1; ++c) row[c] += g[c];
    }
  }
}

// ---- RMSNorm: y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) ----
template <typename S, typename O>
void rmsnorm_forward(const S* x, const S* w, int64_t n, int64_t d, S eps, S* rstd, O* y, Round r) {
  const int nt = get_num_threads();
#pragma omp parallel for num_threads(nt) schedule(static) if (n * d >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const S* xi = x + i * d;
    S ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += xi[j] * xi[j];
    const S rs = S(1) / std::sqrt(ss / static_cast<S>(d) + eps);
    rstd[i] = rs;
    O* yi = y + i * d;
    if (rounds_rows<S, O>(r)) {
      if constexpr (row_types<S, O>) {
        float* t = scratch_row(d);
        for (int64_t j = 0; j < d; ++j) t[j] = xi[j] * rs * w[j];
        round_row(t, yi, d, r);
      }
    } else {
      for (int64_t j = 0; j < d; ++j) yi[j] = to_op<O>(xi[j] * rs * w[j], r);
    }
  }
}
// The forward's output again, unrounded, from its saved 1/rms: y = x * rstd * w, formed as
// rmsnorm_forward forms it (the fp32 router's input where the operands are rounded).
template <typename S>
void rmsnorm_apply(const S* x, const S* w, const S* rstd, int64_t n, int64_t d, S* y) {
  const int nt = get_num_threads();
#pragma omp parallel for num_threads(nt) schedule(static) if (n * d >= kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) y[i * d + j] = x[i * d + j] * rstd[i] * w[j];
}
// dx (+)= rstd * (dxh - xh * mean(dxh * xh)) with xh = x * rstd, dxh = dy * w; dw += sum_i dy * xh.
// `accumulate` adds dx into the residual gradient the caller passes. With `dx_op`, the final dx is
// also written rounded to the operand type, for the next GEMM, in the same pass.
template <typename S, typename O = S>
void rmsnorm_backward(const S* dy, const S* x, const S* w, const S* rstd, int64_t n, int64_t d, S* dx, S* dw,
                      bool accumulate, O* dx_op = nullptr, Round r = Round::none) {
  const int nt = get_num_threads();
  const int64_t chunks = (n + kRowChunk - 1) / kRowChunk;
  std::vector<S> partial(static_cast<size_t>(chunks * d), S(0));
#pragma omp parallel for num_threads(nt) schedule(static) if (n * d >= kParallelMin)
  for (int64_t c = 0; c < chunks; ++c) {
    S* pw = partial.data() + c * d;
    for (int64_t i = c * kRowChunk; i < std::min(n, (c + 1) * kRowChunk); ++i) {
      const S* xi = x + i * d;
      const S* gi = dy + i * d;
      const S rs = rstd[i];
      S dot = 0;
      for (int64_t j = 0; j < d; ++j) {
        const S xh = xi[j] * rs;
        dot += gi[j] * w[j] * xh;
        pw[j] += gi[j] * xh;
      }
      const S mean = dot / static_cast<S>(d);
      S* dxi = dx + i * d;
      for (int64_t j = 0; j < d; ++j) {
        const S v = rs * (gi[j] * w[j] - xi[j] * rs * mean);
        dxi[j] = accumulate ? dxi[j] + v : v;
      }
      if (dx_op) {
        O* oi = dx_op + i * d;
        bool done = false;
        if constexpr (row_types<S, O>) {
          if (rounds_rows<S, O>(r)) {
            round_row(dxi, oi, d, r);
            done = true;
          }
        }
        if (!done)
          for (int64_t j = 0; j < d; ++j) oi[j] = to_op<O>(dxi[j], r);
      }
    }
  }
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t j = 0; j < d; ++j) dw[j] += partial[static_cast<size_t>(c * d + j)];
}

// ---- RoPE on q and k inside a fused q|k|v row (v untouched) ----
// A row of `row` elements holds q's heads, k's heads and v's heads, each dh wide: the first `rot`
// elements (q and k: d_model + kv heads * dh; 2 d_model without grouped-query attention) rotate, the
// rest (v) is copied. Row i sits at position pos[i]: training's rows are batch x seq, so pos[i] =
// i % seq (rope_positions); generation gives each row its own sequence's position. Pair (2p, 2p+1) of
// each head rotates by pos * theta^(-2p / dh). cos/sin tables are [positions, dh / 2], every pos[i]
// below `positions`.
template <typename S>
void rope_tables(int64_t positions, int64_t dh, double theta, std::vector<S>& cos_t, std::vector<S>& sin_t) {
  const int64_t half = dh / 2;
  cos_t.resize(static_cast<size_t>(positions * half));
  sin_t.resize(static_cast<size_t>(positions * half));
  for (int64_t t = 0; t < positions; ++t)
    for (int64_t p = 0; p < half; ++p) {
      const double angle = static_cast<double>(t) * std::pow(theta, -2.0 * static_cast<double>(p) / dh);
      cos_t[static_cast<size_t>(t * half + p)] = static_cast<S>(std::cos(angle));
      sin_t[static_cast<size_t>(t * half + p)] = static_cast<S>(std::sin(angle));
    }
}
// The positions of n = batch x seq rows of training: row i at i % seq.
inline void rope_positions(int64_t n, int64_t seq, std::vector<int64_t>& pos) {
  pos.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = i % seq;
}
// src is the fp32 GEMM output [n, row]; dst the operand copy for attention: q and k rotated, v copied.
template <typename S, typename O>
void rope_forward(const S* src, O* dst, int64_t n, const int64_t* pos, int64_t rot, int64_t row, int64_t dh,
                  const S* cos_t, const S* sin_t, Round r) {
  const int64_t half = dh / 2;
  const int nt = get_num_threads();
#pragma omp parallel for num_threads(nt) schedule(static) if (n * row >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const S* c = cos_t + pos[i] * half;
    const S* s = sin_t + pos[i] * half;
    const S* in = src + i * row;
    O* out = dst + i * row;
    if constexpr (row_types<S, O>) {
      if (rounds_rows<S, O>(r)) {
        float* t = scratch_row(rot);
        for (int64_t h = 0; h < rot; h += dh)  // q and k: every head's pairs
          for (int64_t p = 0; p < half; ++p) {
            const S x0 = in[h + 2 * p], x1 = in[h + 2 * p + 1];
            t[h + 2 * p] = x0 * c[p] - x1 * s[p];
            t[h + 2 * p + 1] = x0 * s[p] + x1 * c[p];
          }
        round_row(t, out, rot, r);
        round_row(in + rot, out + rot, row - rot, r);
        continue;
      }
    }
    for (int64_t h = 0; h < rot; h += dh)  // q and k: every head's pairs
      for (int64_t p = 0; p < half; ++p) {
        const S x0 = in[h + 2 * p], x1 = in[h + 2 * p + 1];
        out[h + 2 * p] = to_op<O>(x0 * c[p] - x1 * s[p], r);
        out[h + 2 * p + 1] = to_op<O>(x0 * s[p] + x1 * c[p], r);
      }
    for (int64_t j = rot; j < row; ++j) out[j] = to_op<O>(in[j], r);
  }
}
// The transpose of the rotation, from attention's dq|dk|dv (type G) to the GEMM operand dst (rows and
// positions as rope_forward's).
template <typename S, typename G, typename O>
void rope_backward(const G* src, O* dst, int64_t n, const int64_t* pos, int64_t rot, int64_t row, int64_t dh,
                   const S* cos_t, const S* sin_t, Round r) {
  const int64_t half = dh / 2;
  const int nt = get_num_threads();
#pragma omp parallel for num_threads(nt) schedule(static) if (n * row >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const S* c = cos_t + pos[i] * half;
    const S* s = sin_t + pos[i] * half;
    const G* in = src + i * row;
    O* out = dst + i * row;
    if constexpr (row_types<S, O> && (std::is_same_v<G, bf16> || std::is_same_v<G, float>)) {
      if (rounds_rows<S, O>(r)) {
        const float* g = nullptr;
        if constexpr (std::is_same_v<G, bf16>) {
          float* gf = scratch_row(rot, 0);
          convert(in, gf, static_cast<size_t>(rot));
          g = gf;
        } else {
          g = in;
        }
        float* t = scratch_row(rot, 1);
        for (int64_t h = 0; h < rot; h += dh)
          for (int64_t p = 0; p < half; ++p) {
            const S g0 = g[h + 2 * p], g1 = g[h + 2 * p + 1];
            t[h + 2 * p] = g0 * c[p] + g1 * s[p];
            t[h + 2 * p + 1] = -g0 * s[p] + g1 * c[p];
          }
        round_row(t, out, rot, r);
        if constexpr (std::is_same_v<G, bf16> && std::is_same_v<O, bf16>)
          std::copy_n(in + rot, row - rot,
                      out + rot);  // dv is bf16 already: rounding it again changes no value
        else if constexpr (std::is_same_v<G, float>)
          round_row(in + rot, out + rot, row - rot, r);
        else
          for (int64_t j = rot; j < row; ++j) out[j] = to_op<O>(from_op<S>(in[j]), r);
        continue;
      }
    }
    for (int64_t j = 0; j < rot; j += 2) {
      const int64_t p = (j % dh) / 2;
      const S g0 = from_op<S>(in[j]), g1 = from_op<S>(in[j + 1]);
      out[j] = to_op<O>(g0 * c[p] + g1 * s[p], r);
      out[j + 1] = to_op<O>(-g0 * s[p] + g1 * c[p], r);
    }
    for (int64_t j = rot; j < row; ++j) out[j] = to_op<O>(from_op<S>(in[j]), r);
  }
}

// ---- SwiGLU: g = silu(a) * b, from the fused GEMM output [n, 2 f] = a | b ----
template <typename S>
inline S sigmoid(S x) {
  return S(1) / (S(1) + std::exp(-x));
}
// ab: the GEMM output (S); ab_saved: its operand-type copy kept for backward, or null where no backward
// follows (generation); g: the w2 operand. a and b are rounded to O before the product either way: with
// bf16 operands, silu(a) * b is formed from the bf16 a and b, in training and in generation alike.
template <typename S, typename O>
void swiglu_forward(const S* ab, int64_t n, int64_t f, O* ab_saved, O* g, Round r) {
  if constexpr (std::is_same_v<S, float> && (std::is_same_v<O, float> || std::is_same_v<O, bf16>)) {
    if (r == Round::none && fused::swiglu_forward(ab, n, f, ab_saved, g)) return;
    if constexpr (std::is_same_v<O, float>)
      if (r == Round::fp16 && fused::swiglu_forward_fp16(ab, n, f, ab_saved, g)) return;
  }
  const int nt = get_num_threads();
#pragma omp parallel for num_threads(nt) schedule(static) if (n * f >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const S* a = ab + i * 2 * f;
    const S* b = a + f;
    O* sa = ab_saved ? ab_saved + i * 2 * f : nullptr;
    O* gi = g + i * f;
    for (int64_t j = 0; j < f; ++j) {
      // What backward sees is the rounded a and b, so g is formed from the same values.
      const O ao = to_op<O>(a[j], r), bo = to_op<O>(b[j], r);
      if (sa) {
        sa[j] = ao;
        sa[f + j] = bo;
      }
      const S av = from_op<S>(ao), bv = from_op<S>(bo);
      gi[j] = to_op<O>(av * sigmoid(av) * bv, r);
    }
  }
}
// dab = [dg * b * silu'(a) | dg * silu(a)], silu'(a) = s (1 + a (1 - s)), s = sigmoid(a).
template <typename S, typename O>
void swiglu_backward(const S* dg, const O* ab, int64_t n, int64_t f, O* dab, Round r) {
  if constexpr (std::is_same_v<S, float> && (std::is_same_v<O, float> || std::is_same_v<O, bf16>)) {
    if (r == Round::none && fused::swiglu_backward(dg, ab, n, f, dab)) return;
    if constexpr (std::is_same_v<O, float>)
      if (r == Round::fp16 && fused::swiglu_backward_fp16(dg, ab, n, f, dab)) return;
  }
  const int nt = get_num_threads();
#pragma omp parallel for num_threads(nt) schedule(static) if (n * f >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const O* a = ab + i * 2 * f;
    const O* b = a + f;
    const S* gi = dg + i * f;
    O* da = dab + i * 2 * f;
    O* db = da + f;
    for (int64_t j = 0; j < f; ++j) {
      const S av = from_op<S>(a[j]), bv = from_op<S>(b[j]);
      const S s = sigmoid(av);
      da[j] = to_op<O>(gi[j] * bv * s * (S(1) + av * (S(1) - s)), r);
      db[j] = to_op<O>(gi[j] * av * s, r);
    }
  }
}

// ---- Cross-entropy over logits [n, vocab], mean over the n rows ----
// Returns the mean loss (accumulated in double).
template <typename S>
double cross_entropy_forward(const S* logits, const int32_t* targets, int64_t n, int64_t vocab, S* lse) {
  for (int64_t i = 0; i < n; ++i)
    check(targets[i] >= 0 && targets[i] < vocab,
          "targets: token {} at position {} is outside the vocabulary [0, {})", targets[i], i, vocab);
  // Per-row losses summed in row order afterwards: the same bits whatever the thread count.
  std::vector<double> row_loss(static_cast<size_t>(n));
  bool vector = false;
  if constexpr (std::is_same_v<S, float>)
    vector = fused::cross_entropy_forward(logits, targets, n, vocab, lse, row_loss.data());
  const int nt = get_num_threads();
  if (!vector) {
#pragma omp parallel for num_threads(nt) schedule(static) if (n * vocab >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const S* li = logits + i * vocab;
      S m = li[0];
      for (int64_t j = 1; j < vocab; ++j) m = std::max(m, li[j]);
      S sum = 0;
      for (int64_t j = 0; j < vocab; ++j) sum += std::exp(li[j] - m);
      lse[i] = m + std::log(sum);
      row_loss[static_cast<size_t>(i)] = static_cast<double>(lse[i] - li[targets[i]]);
    }
  }
  double total = 0;
  for (double v : row_loss) total += v;
  return total / static_cast<double>(n);
}
// In place: logits becomes d(scale * mean loss)/d(logits) = scale * (softmax - onehot) / n.
template <typename S>
void cross_entropy_backward(S* logits, const int32_t* targets, const S* lse, int64_t n, int64_t vocab,
                            S scale) {
  const S k = scale / static_cast<S>(n);
  if constexpr (std::is_same_v<S, float>) {
    if (fused::cross_entropy_backward(logits, targets, lse, n, vocab, k, logits)) return;
  }
  const int nt = get_num_threads();
#pragma omp parallel for num_threads(nt) schedule(static) if (n * vocab >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    S* li = logits + i * vocab;
    for (int64_t j = 0; j < vocab; ++j) li[j] = std::exp(li[j] - lse[i]) * k;
    li[targets[i]] -= k;
  }
}
// The same gradient written straight into the GEMM operand `out` (the rounding fused into this pass,
// so the fp32 gradient is never stored); logits are left as they are.
template <typename S, typename O>
void cross_entropy_backward(const S* logits, const int32_t* targets, const S* lse, int64_t n, int64_t vocab,
                            S scale, O* out, Round r) {
  const S k = scale / static_cast<S>(n);
  if constexpr (std::is_same_v<S, float> && std::is_same_v<O, bf16>) {
    if (fused::cross_entropy_backward(logits, targets, lse, n, vocab, k, out)) return;
  }
  const int nt = get_num_threads();
#pragma omp parallel for num_threads(nt) schedule(static) if (n * vocab >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const S* li = logits + i * vocab;
    O* oi = out + i * vocab;
    if constexpr (std::is_same_v<S, float> && std::is_same_v<O, float>) {
      // fp16 emulation: the row's fp32 gradient by the vector path (one row: no nested threads),
      // then rounded through fp16 in bulk.
      float* t = scratch_row(vocab);
      if (r == Round::fp16 && fused::cross_entropy_backward(li, targets + i, lse + i, 1, vocab, k, t)) {
        round_row(t, oi, vocab, r);
        continue;
      }
    }
    for (int64_t j = 0; j < vocab; ++j) {
      S v = std::exp(li[j] - lse[i]) * k;
      if (j == targets[i]) v -= k;
      oi[j] = to_op<O>(v, r);
    }
  }
}

}  // namespace ridge::model::layers
