// FlashAttention-2 on the CPU: forward and backward over strided views, fp32 or bf16 in and out,
// fp32 accumulation, with the materialised "math path" beside it as the reference and baseline.
//
// Shapes: q [batch, heads, n_q, d]; k, v [batch, kv_heads, n_k, d] with heads a multiple of
// kv_heads (grouped-query attention); o, dq like q; dk, dv like k; lse [batch, heads, n_q] fp32.
// Causal: query i sees keys j <= i + n_k - n_q (aligned to the end, as when decoding with a
// cache). A query that sees no key gets o = 0 and lse = -inf.
#pragma once

#include <cstdint>

#include "ridge/core/format.hpp"
#include "ridge/core/memory.hpp"
#include "ridge/core/tensor.hpp"

namespace ridge::attention {

struct Options {
  bool causal = false;
  float scale = 0.0f;  // 0 means 1/sqrt(d); otherwise must be finite and > 0
};

// ---- FlashAttention-2 ----
// T is float or bf16. Outputs go into the caller's views; lse is the only state saved for backward.
template <typename T>
void flash_attention_forward(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v,
                             const TensorView<T>& o, const TensorView<float>& lse,
                             const Options& options = {});

// dq, dk, dv are overwritten; dk, dv are summed over the query heads that share a kv head.
template <typename T>
void flash_attention_backward(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v,
                              const TensorView<T>& o, const TensorView<T>& d_o, const TensorView<float>& lse,
                              const TensorView<T>& dq, const TensorView<T>& dk, const TensorView<T>& dv,
                              const Options& options = {});

// Convenience forms that allocate dense outputs through ridge::Buffer.
template <typename T>
struct ForwardResult {
  Buffer<T> o_storage;
  Buffer<float> lse_storage;
  TensorView<T> o;
  TensorView<float> lse;
};
template <typename T>
struct BackwardResult {
  Buffer<T> dq_storage, dk_storage, dv_storage;
  TensorView<T> dq, dk, dv;
};
template <typename T>
ForwardResult<T> flash_attention_forward(const TensorView<T>& q, const TensorView<T>& k,
                                         const TensorView<T>& v, const Options& options = {});
template <typename T>
BackwardResult<T> flash_attention_backward(const TensorView<T>& q, const TensorView<T>& k,
                                           const TensorView<T>& v, const TensorView<T>& o,
                                           const TensorView<T>& d_o, const TensorView<float>& lse,
                                           const Options& options = {});

// ---- The math path ----
// Materialises S = q k^T * scale and P = softmax(S) per (batch, head) in Acc precision (float or
// double), then O = P v; backward materialises dP and dS the same way. Memory grows with n_q * n_k:
// this is the baseline FlashAttention is measured against, and (Acc = double) the tests' reference.
// Outputs are in Acc; lse like flash_attention_forward's.
template <typename T, typename Acc>
void attention_reference_forward(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v,
                                 const TensorView<Acc>& o, const TensorView<Acc>& lse,
                                 const Options& options = {});
template <typename T, typename Acc>
void attention_reference_backward(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v,
                                  const TensorView<T>& d_o, const TensorView<Acc>& dq,
                                  const TensorView<Acc>& dk, const TensorView<Acc>& dv,
                                  const Options& options = {});

// FLOPs counted the way FlashAttention papers count them: 4 * n_q * n_k * d * batch * heads for
// the forward pass (two matmuls), 2.5x that for backward (five), halved when causal and n_q == n_k
// (in general: scaled by the visible fraction of the score matrix).
double attention_flops(int64_t batch, int64_t heads, int64_t n_q, int64_t n_k, int64_t d, bool causal,
                       bool backward);

}  // namespace ridge::attention
