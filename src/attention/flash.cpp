// FlashAttention-2 entry points: argument checks, block sizes from the caches, and dispatch to
// the per-ISA kernels (flash_<isa>.cpp).
#include <algorithm>
#include <initializer_list>
#include <iterator>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <type_traits>

#include "attention/internal.hpp"
#include "core/isa_paths.hpp"
#include "ridge/attention.hpp"
#include "ridge/core/cpu.hpp"
#include "ridge/core/env.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/threads.hpp"
#include "core/check.hpp"
#include "core/overlap.hpp"

namespace ridge::attention {
namespace detail {

void choose_blocks(int64_t d, int w, int want_q, int want_k, int& bq, int& bk) {
  const int unit = std::max(w, 16);
  auto round_to = [&](int x) { return std::max(unit, (x + unit - 1) / unit * unit); };
  // Queries per block: enough that every K/V element loaded is reused for 64 queries, few enough
  // that Q^T and O^T (2 * d * bq floats) stay in L1/L2 beside the key block.
  bq = want_q > 0 ? round_to(want_q) : 64;
  if (want_k > 0) {
    bk = round_to(want_k);
    return;
  }
  // Keys per block: the per-thread working set (Q^T, O^T, K, V blocks and S^T) within half of L2.
  const int64_t l2 = cpu::cache_sizes().l2;
  const int64_t budget = l2 / 2 / 4 - 2 * d * bq;
  int64_t k = budget / (2 * d + bq);
  // Capped at 256 keys (idle machine, 2 threads: 256 beat 128 by 2-5% in fp32 forward and backward
  // at n = 2048..4096, d = 64/128, neutral in bf16; docs/attention.md, experiment 6).
  k = std::clamp<int64_t>(k, unit, 256);
  bk = static_cast<int>(k / unit * unit);
}

}  // namespace detail

namespace {

template <typename T>
detail::Operand operand(const TensorView<T>& t) {
  detail::Operand o;
  o.data = const_cast<void*>(static_cast<const void*>(t.data));
  o.sb = t.stride[0];
  o.sh = t.stride[1];
  o.ss = t.stride[2];
  o.sd = t.stride[3];
  return o;
}

template <typename T>
void check_view(const TensorView<T>& t, const char* name, int64_t b, int64_t h, int64_t n, int64_t d) {
  check_tensor_view("attention", name, t.data, t.rank, t.shape, t.stride, {b, h, n, d});
}

// The largest |x_i| (Euclidean norm of a row of d elements) over every row of a [b, h, n, d] view.
template <typename T>
double max_row_norm(const TensorView<T>& t) {
  double best = 0.0;
  for (int64_t b = 0; b < t.shape[0]; ++b)
    for (int64_t h = 0; h < t.shape[1]; ++h)
      for (int64_t i = 0; i < t.shape[2]; ++i) {
        const T* row = t.data + b * t.stride[0] + h * t.stride[1] + i * t.stride[2];
        double acc = 0.0;
        for (int64_t c = 0; c < t.shape[3]; ++c) {
          double x;
          if constexpr (std::is_same_v<T, bf16>)
            x = to_float(row[c * t.stride[3]]);
          else
            x = static_cast<double>(row[c * t.stride[3]]);
          acc += x * x;
        }
        best = std::max(best, acc);
      }
  return std::sqrt(best);
}

// The kernels compute exp2(s * c - m) with c = scale * log2(e) in fp32. For a scale so large that
// s * c could overflow (scale * log2(e) itself overflows past 2.4e38), c is capped at 2^124 / bound,
// bound >= |s| by Cauchy-Schwarz (largest row norm of q times that of k), so |s * c| <= 2^124 and
// differences of two such values stay finite. At the cap the softmax is already a hard max for
// every pair of scores fp32 can tell apart (a gap of 2^-100 |s| is 2^24 in the exponent), so the
// cap changes nothing but lse, which lse_factor and l2_factor carry back to the user's scale.
// A scale up to 1024 / log2(e) skips the O((n_q + n_k) d) scan: there only scores beyond 2^114,
// from inputs near 10^17, could overflow.
template <typename T>
void log2_scale(detail::Problem& p, const TensorView<T>& q, const TensorView<T>& k) {
  constexpr double kLog2e = 1.4426950408889634;
  p.c = p.scale * static_cast<float>(kLog2e);
  p.lse_factor = static_cast<float>(1.0 / kLog2e);
  p.l2_factor = static_cast<float>(kLog2e);
  const double c = static_cast<double>(p.scale) * kLog2e;
  if (c <= 1024.0) return;
  const double bound = max_row_norm(q) * max_row_norm(k);
  const double cap = bound > 0.0 ? std::ldexp(1.0, 124) / bound : std::ldexp(1.0, 124);
  if (c <= cap && c <= static_cast<double>(std::numeric_limits<float>::max())) return;
  const float capped =
      static_cast<float>(std::min(cap, static_cast<double>(std::numeric_limits<float>::max())));
  p.c = capped;
  p.lse_factor = static_cast<float>(static_cast<double>(p.scale) / capped);
  p.l2_factor = static_cast<float>(capped / static_cast<double>(p.scale));
}

template <typename T>
detail::Problem make_problem(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v,
                             const TensorView<float>& lse, const Options& options) {
  check(q.rank == 4, "attention: q must be rank 4 [batch, heads, n_q, d], got rank {}", q.rank);
  check(k.rank == 4, "attention: k must be rank 4 [batch, kv_heads, n_k, d], got rank {}", k.rank);
  detail::Problem p;
  p.batch = q.shape[0];
  p.heads = q.shape[1];
  p.n_q = q.shape[2];
  p.d = q.shape[3];
  p.kv_heads = k.shape[1];
  p.n_k = k.shape[2];
  check(p.batch >= 1 && p.heads >= 1 && p.kv_heads >= 1, "attention: batch, heads and kv_heads must be >= 1");
  check(p.n_q >= 1, "attention: q's sequence length n_q must be >= 1, got {}", p.n_q);
  check(p.n_k >= 1, "attention: k's sequence length n_k must be >= 1, got {}", p.n_k);
  check(p.d >= 16 && p.d <= 256, "attention: head dimension d must be in 16..256, got {}", p.d);
  check(p.heads % p.kv_heads == 0, "attention: heads ({}) must be a multiple of kv_heads ({})", p.heads,
        p.kv_heads);
  check_view(q, "q", p.batch, p.heads, p.n_q, p.d);
  check_view(k, "k", p.batch, p.kv_heads, p.n_k, p.d);
  check_view(v, "v", p.batch, p.kv_heads, p.n_k, p.d);
  check_tensor_view("attention", "lse", lse.data, lse.rank, lse.shape, lse.stride, {p.batch, p.heads, p.n_q});
  check(std::isfinite(options.scale) && options.scale >= 0.0f,
        "attention: scale must be finite and > 0 (0 means 1/sqrt(d)), got {}", options.scale);
  p.bf16 = std::is_same_v<T, bf16>;
  p.causal = options.causal;
  p.scale =
      options.scale == 0.0f ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.d))) : options.scale;
  log2_scale(p, q, k);
  p.q = operand(q);
  p.k = operand(k);
  p.v = operand(v);
  p.lse = lse.data;
  p.lse_sb = lse.stride[0];
  p.lse_sh = lse.stride[1];
  p.lse_ss = lse.stride[2];
  p.threads = get_num_threads();
  // Block-size experiments without a rebuild (docs/attention.md records them).
  p.block_q = env::knobs().attention_block_q;  // 0 when unset; checked where it is parsed
  p.block_k = env::knobs().attention_block_k;
  return p;
}

// Outputs written while the inputs are still read: an output sharing memory with an input (or with
// another output) would give silently wrong numbers, so it is refused, naming both arguments.
struct Named {
  const char* name;
  overlap::Bytes bytes;
};
template <typename T>
Named named(const char* name, const TensorView<T>& v) {
  return {name, overlap::bytes_of(v)};
}

void check_no_alias(std::initializer_list<Named> outputs, std::initializer_list<Named> inputs) {
  for (auto o = outputs.begin(); o != outputs.end(); ++o) {
    for (const auto& i : inputs)
      check(!overlap::overlaps(o->bytes, i.bytes),
            "attention: output {} overlaps input {} in memory; an output must not alias an input", o->name,
            i.name);
    for (auto p = std::next(o); p != outputs.end(); ++p)
      check(!overlap::overlaps(o->bytes, p->bytes), "attention: outputs {} and {} overlap in memory", o->name,
            p->name);
  }
}

template <typename T>
TensorView<T> dense(Buffer<T>& buf, int64_t a, int64_t b, int64_t c, int64_t d) {
  return TensorView<T>::contiguous(buf.data(), {a, b, c, d});
}

// The path's table, picked once per call from the active ISA (RIDGE_ISA / ScopedIsa may change it).
detail::Kernels kernels() {
  static constexpr isa::Paths<detail::Kernels> paths{detail::kernels_scalar, detail::kernels_avx2,
                                                     detail::kernels_avx512, detail::kernels_avx512bf16};
  return isa::pick_path(paths, cpu::active_isa());
}

}  // namespace

template <typename T>
void flash_attention_forward(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v,
                             const TensorView<T>& o, const TensorView<float>& lse, const Options& options) {
  detail::Problem p = make_problem(q, k, v, lse, options);
  check_view(o, "o", p.batch, p.heads, p.n_q, p.d);
  check_no_alias({named("o", o), named("lse", lse)}, {named("q", q), named("k", k), named("v", v)});
  p.o = operand(o);
  kernels().forward(p);
}

template <typename T>
void flash_attention_backward(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v,
                              const TensorView<T>& o, const TensorView<T>& d_o, const TensorView<float>& lse,
                              const TensorView<T>& dq, const TensorView<T>& dk, const TensorView<T>& dv,
                              const Options& options) {
  detail::Problem p = make_problem(q, k, v, lse, options);
  check_view(o, "o", p.batch, p.heads, p.n_q, p.d);
  check_view(d_o, "do", p.batch, p.heads, p.n_q, p.d);
  check_view(dq, "dq", p.batch, p.heads, p.n_q, p.d);
  check_view(dk, "dk", p.batch, p.kv_heads, p.n_k, p.d);
  check_view(dv, "dv", p.batch, p.kv_heads, p.n_k, p.d);
  check_no_alias(
      {named("dq", dq), named("dk", dk), named("dv", dv)},
      {named("q", q), named("k", k), named("v", v), named("o", o), named("do", d_o), named("lse", lse)});
  p.o = operand(o);
  p.d_o = operand(d_o);
  p.dq = operand(dq);
  p.dk = operand(dk);
  p.dv = operand(dv);
  kernels().backward(p);
}

template <typename T>
ForwardResult<T> flash_attention_forward(const TensorView<T>& q, const TensorView<T>& k,
                                         const TensorView<T>& v, const Options& options) {
  check(q.rank == 4, "attention: q must be rank 4 [batch, heads, n_q, d], got rank {}", q.rank);
  const int64_t b = q.shape[0], h = q.shape[1], n = q.shape[2], d = q.shape[3];
  ForwardResult<T> r;
  r.o_storage = Buffer<T>(static_cast<size_t>(std::max<int64_t>(0, b * h * n * d)), "attention.o");
  r.lse_storage = Buffer<float>(static_cast<size_t>(std::max<int64_t>(0, b * h * n)), "attention.lse");
  r.o = dense(r.o_storage, b, h, n, d);
  r.lse = TensorView<float>::contiguous(r.lse_storage.data(), {b, h, n});
  flash_attention_forward(q, k, v, r.o, r.lse, options);
  return r;
}

template <typename T>
BackwardResult<T> flash_attention_backward(const TensorView<T>& q, const TensorView<T>& k,
                                           const TensorView<T>& v, const TensorView<T>& o,
                                           const TensorView<T>& d_o, const TensorView<float>& lse,
                                           const Options& options) {
  check(q.rank == 4 && k.rank == 4, "attention: q and k must be rank 4 [batch, heads, seq, d]");
  BackwardResult<T> r;
  const auto qs = q.shape, ks = k.shape;
  r.dq_storage =
      Buffer<T>(static_cast<size_t>(std::max<int64_t>(0, qs[0] * qs[1] * qs[2] * qs[3])), "attention.dq");
  r.dk_storage =
      Buffer<T>(static_cast<size_t>(std::max<int64_t>(0, ks[0] * ks[1] * ks[2] * ks[3])), "attention.dk");
  r.dv_storage =
      Buffer<T>(static_cast<size_t>(std::max<int64_t>(0, ks[0] * ks[1] * ks[2] * ks[3])), "attention.dv");
  r.dq = dense(r.dq_storage, qs[0], qs[1], qs[2], qs[3]);
  r.dk = dense(r.dk_storage, ks[0], ks[1], ks[2], ks[3]);
  r.dv = dense(r.dv_storage, ks[0], ks[1], ks[2], ks[3]);
  flash_attention_backward(q, k, v, o, d_o, lse, r.dq, r.dk, r.dv, options);
  return r;
}

double attention_flops(int64_t batch, int64_t heads, int64_t n_q, int64_t n_k, int64_t d, bool causal,
                       bool backward) {
  double f = 4.0 * static_cast<double>(batch) * static_cast<double>(heads) * static_cast<double>(n_q) *
             static_cast<double>(n_k) * static_cast<double>(d);
  if (causal) f *= 0.5;
  if (backward) f *= 2.5;
  return f;
}

#define RIDGE_INSTANTIATE(T)                                                                                 \
  template void flash_attention_forward<T>(const TensorView<T>&, const TensorView<T>&, const TensorView<T>&, \
                                           const TensorView<T>&, const TensorView<float>&, const Options&);  \
  template void flash_attention_backward<T>(                                                                 \
      const TensorView<T>&, const TensorView<T>&, const TensorView<T>&, const TensorView<T>&,                \
      const TensorView<T>&, const TensorView<float>&, const TensorView<T>&, const TensorView<T>&,            \
      const TensorView<T>&, const Options&);                                                                 \
  template ForwardResult<T> flash_attention_forward<T>(const TensorView<T>&, const TensorView<T>&,           \
                                                       const TensorView<T>&, const Options&);                \
  template BackwardResult<T> flash_attention_backward<T>(                                                    \
      const TensorView<T>&, const TensorView<T>&, const TensorView<T>&, const TensorView<T>&,                \
      const TensorView<T>&, const TensorView<float>&, const Options&);
RIDGE_INSTANTIATE(float)
RIDGE_INSTANTIATE(bf16)
#undef RIDGE_INSTANTIATE

}  // namespace ridge::attention
