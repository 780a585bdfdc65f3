// FlashAttention-2 on the CPU: forward and backward over strided views, fp32 or bf16 in and out,
// fp32 accumulation, with the materialised "math path" beside it as the reference and baseline.
//
// Shapes: q [batch, heads, n_q, d]; k, v [batch, kv_heads, n_k, d] with heads a multiple of
// kv_heads (grouped-query attention); o, dq like q; dk, dv like k; lse [batch, heads, n_q] fp32.
// Masks (flash-attn's, aligned to the bottom right): query i sees keys j with
//   i + n_k - n_q - window_left <= j <= i + n_k - n_q + window_right
// (-1 = no limit on that side); causal sets window_right = 0, so causal alone is j <= i + n_k - n_q.
// Blocks of keys no query of a block sees are skipped: the cost grows with the window, not n_k.
// A query that sees no key gets o = 0, lse = -inf and zero gradients.
// Softcap (Gemma 2, Grok): the scaled score s = q.k * scale becomes softcap * tanh(s / softcap)
// before the softmax (0 = off); the backward multiplies dS by 1 - tanh^2(s / softcap).
#pragma once

#include <cstdint>
#include <span>

#include "ridge/core/format.hpp"
#include "ridge/core/memory.hpp"
#include "ridge/core/tensor.hpp"

namespace ridge::attention {

struct Options {
  bool causal = false;
  float scale = 0.0f;                           // 0 means 1/sqrt(d); otherwise must be finite and > 0
  int64_t window_left = -1, window_right = -1;  // flash-attn's window_size; -1 = unbounded, else >= 0
  float softcap = 0.0f;                         // 0 = off; otherwise finite, > 0 (and <= 1e30)
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

// ---- Variable-length batches (flash-attn's flash_attn_varlen_func) ----
// Sequences packed without padding: q, o, dq [total_q, heads, d]; k, v, dk, dv [total_k, kv_heads, d];
// sequence b's queries are rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1, its keys rows
// cu_seqlens_k[b] .. cu_seqlens_k[b+1]-1 (int32, batch + 1 entries each, starting at 0, never
// decreasing, ending at total_q / total_k; a sequence may be empty, and its n_q and n_k differ).
// max_seqlen_q/k bound the longest sequence (as flash-attn's; a smaller one is an error). lse is
// [heads, total_q] fp32. Masks and softcap are per sequence, as in the dense form. Work is split into
// (sequence, head, block of queries) items, balanced over the threads by cost; the result of each
// sequence is bit for bit that of the same call on that sequence alone, at any thread count.
template <typename T>
void flash_attention_varlen_forward(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v,
                                    std::span<const int32_t> cu_seqlens_q,
                                    std::span<const int32_t> cu_seqlens_k, int64_t max_seqlen_q,
                                    int64_t max_seqlen_k, const TensorView<T>& o,
                                    const TensorView<float>& lse, const Options& options = {});
template <typename T>
void flash_attention_varlen_backward(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v,
                                     const TensorView<T>& o, const TensorView<T>& d_o,
                                     const TensorView<float>& lse, std::span<const int32_t> cu_seqlens_q,
                                     std::span<const int32_t> cu_seqlens_k, int64_t max_seqlen_q,
                                     int64_t max_seqlen_k, const TensorView<T>& dq, const TensorView<T>& dk,
                                     const TensorView<T>& dv, const Options& options = {});

// The number of score entries a mask leaves visible in one (sequence, head): n_q * n_k without a
// mask, about half with causal, about n_q * (left + right + 1) with a window. What the roofline of a
// masked row counts (4 * d FLOPs each forward).
double attention_visible_scores(int64_t n_q, int64_t n_k, const Options& options);

// ---- The math path ----
// Materialises S = q k^T * scale (the window's masks and the softcap applied as in the kernels) and
// P = softmax(S) per (batch, head) in Acc precision (float or double), then O = P v; backward materialises dP
// and dS the same way. Memory grows with n_q * n_k: this is the baseline FlashAttention is measured against,
// and (Acc = double) the tests' reference. Outputs are in Acc; lse like flash_attention_forward's.
template <typename T, typename Acc>
void attention_reference_forward(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v,
                                 const TensorView<Acc>& o, const TensorView<Acc>& lse,
                                 const Options& options = {});
template <typename T, typename Acc>
void attention_reference_backward(const TensorView<T>& q, const TensorView<T>& k, const TensorView<T>& v,
                                  const TensorView<T>& d_o, const TensorView<Acc>& dq,
                                  const TensorView<Acc>& dk, const TensorView<Acc>& dv,
                                  const Options& options = {});

// ---- Decode attention over a paged KV cache (flash-decoding) ----
// flash-attn's flash_attn_with_kvcache on the CPU (docs/attention.md, "Decode attention over a paged
// KV cache"). Layouts (flash-attn's, not the [batch, heads, seq, d] of the functions above):
//   q, o          [batch, seqlen_q, heads, d]
//   k_cache, v_cache [num_blocks, block_size, kv_heads, d]: a pool of blocks shared by the sequences
//   cache_seqlens [batch]: the number of valid keys of each sequence (0 allowed: o = 0, lse = -inf)
//   block_table   [batch, max_blocks_per_seq] int32: position p of sequence b lives in block
//                 block_table[b][p / block_size] at row p % block_size (entries past a sequence's
//                 length are never read, so they may hold anything)
//   lse           [batch, heads, seqlen_q] fp32, or an empty view (data == nullptr) when not wanted
// T = float or bf16, fp32 accumulation; heads a multiple of kv_heads; d in 16..256; any positive strides.
// The most ways decode attention splits a sequence's keys (KVCacheOptions::num_splits).
inline constexpr int kMaxKVCacheSplits = 256;

struct KVCacheOptions {
  float scale = 0.0f;  // 0 means 1/sqrt(d); otherwise finite and > 0
  bool causal = true;  // seqlen_q > 1: query i sees cache positions j <= i + seqlen_k - seqlen_q
  // 0: chosen by a heuristic; 1: no split; n (<= kMaxKVCacheSplits): each sequence's keys split n ways
  int num_splits = 0;
};

template <typename T>
void flash_attn_with_kvcache(const TensorView<T>& q, const TensorView<T>& k_cache,
                             const TensorView<T>& v_cache, std::span<const int32_t> cache_seqlens,
                             MatrixView<const int32_t> block_table, const TensorView<T>& o,
                             const TensorView<float>& lse = {}, const KVCacheOptions& options = {});

// Writes k_new, v_new [batch, seqlen_new, kv_heads, d] into the cache at positions cache_seqlens[b] ..
// cache_seqlens[b] + seqlen_new - 1 of each sequence (the caller then attends with cache_seqlens +
// seqlen_new). Every argument is checked before anything is written; nothing else in the pool changes.
template <typename T>
void kvcache_append(const TensorView<T>& k_new, const TensorView<T>& v_new, const TensorView<T>& k_cache,
                    const TensorView<T>& v_cache, std::span<const int32_t> cache_seqlens,
                    MatrixView<const int32_t> block_table);

// The scalar reference twin of flash_attn_with_kvcache: plain loops in fp64 (scores, softmax and the
// weighted sum), one rounding to T at the end; the same arguments and checks (num_splits is ignored).
template <typename T>
void flash_attn_with_kvcache_reference(const TensorView<T>& q, const TensorView<T>& k_cache,
                                       const TensorView<T>& v_cache, std::span<const int32_t> cache_seqlens,
                                       MatrixView<const int32_t> block_table, const TensorView<T>& o,
                                       const TensorView<float>& lse = {}, const KVCacheOptions& options = {});

// The heuristic behind num_splits = 0: how many ways a sequence of seqlen_k keys is split when
// `units` = batch * kv_heads (sequence, kv head) pairs share `threads` threads. Enough splits that
// the work items number about 4 x threads, none shorter than 256 keys, at most 64; 1 when the units
// alone are that many. It depends on the thread count, so the bits of o do too (within 1e-6): pass
// num_splits explicitly for results that are the same at every thread count.
int kvcache_num_splits(int64_t seqlen_k, int64_t units, int threads);

// FLOPs counted the way FlashAttention papers count them: 4 * n_q * n_k * d * batch * heads for
// the forward pass (two matmuls), 2.5x that for backward (five), halved when causal and n_q == n_k
// (in general: scaled by the visible fraction of the score matrix).
double attention_flops(int64_t batch, int64_t heads, int64_t n_q, int64_t n_k, int64_t d, bool causal,
                       bool backward);

}  // namespace ridge::attention
