// What the public attention API hands to the per-ISA kernels: one plain description of the
// problem (pointers, shapes, element strides), so every ISA file exposes only plain functions.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace ridge::attention::detail {

// A [batch, heads, seq, d] operand; element strides. A packed (varlen) operand [total, heads, d]
// has sb = 0: its sequence b starts at token cu_seqlens[b], which the body adds to the position.
struct Operand {
  void* data = nullptr;
  int64_t sb = 0, sh = 0, ss = 0, sd = 0;
};

struct Problem {
  int64_t batch = 0, heads = 0, kv_heads = 0, n_q = 0, n_k = 0, d = 0;
  bool bf16 = false;  // element type of every operand but lse (fp32 otherwise)
  bool causal = false;
  // The window in keys around query i's diagonal i + n_k - n_q (per sequence): keys
  // [diag - left, diag + right] are visible; -1 = unbounded on that side. Causal is folded in
  // (right = 0) before the kernels see it.
  int64_t left = -1, right = -1;
  // Softcap: scores s * scale become softcap * tanh(s * scale / softcap) before the softmax; 0 = off.
  // With it, c = log2(e) (the scale is applied inside the tanh), and cap_k = scale / softcap.
  float softcap = 0.0f;
  float cap_k = 0.0f;
  float scale = 1.0f;
  // The scores go to the log2 domain (s * c) so exp2 does the softmax. c = scale * log2(e), except
  // for a scale so large that s * c could overflow fp32 (flash.cpp, log2_scale): there c is capped
  // where the softmax is already a hard max, and lse = m * lse_factor + log(l) (m in c's units)
  // and, in the backward, lse * l2_factor undo the cap. Uncapped: ln 2 and log2(e).
  float c = 1.4426950408889634f;
  float lse_factor = 0.6931471805599453f;
  float l2_factor = 1.4426950408889634f;
  Operand q, k, v, o, d_o, dq, dk, dv;
  float* lse = nullptr;
  int64_t lse_sb = 0, lse_sh = 0, lse_ss = 0;
  int threads = 1;
  // Block sizes (queries per block, keys per block); 0 = choose from the cache sizes.
  int block_q = 0, block_k = 0;
  // Varlen: sequence b's queries are tokens cu_q[b] .. cu_q[b+1]-1, its keys cu_k[b] .. cu_k[b+1]-1
  // (batch + 1 entries each, checked); null for a dense problem (every sequence n_q, n_k long).
  const int32_t* cu_q = nullptr;
  const int32_t* cu_k = nullptr;
};

// One sequence of a problem: where its tokens start and how many there are.
struct Seq {
  int64_t q0 = 0, n_q = 0, k0 = 0, n_k = 0;
};
inline Seq seq_of(const Problem& p, int64_t b) {
  if (!p.cu_q) return {0, p.n_q, 0, p.n_k};
  return {p.cu_q[b], p.cu_q[b + 1] - p.cu_q[b], p.cu_k[b], p.cu_k[b + 1] - p.cu_k[b]};
}

// Keys [lo, hi) visible to some query of rows [i_first, i_last] of a sequence (empty: hi <= lo).
inline void keys_seen(const Problem& p, const Seq& s, int64_t i_first, int64_t i_last, int64_t& lo,
                      int64_t& hi) {
  const int64_t off = s.n_k - s.n_q;
  lo = p.left >= 0 ? std::max<int64_t>(0, i_first + off - p.left) : 0;
  hi = p.right >= 0 ? std::min<int64_t>(s.n_k, i_last + off + p.right + 1) : s.n_k;
}
// Queries [lo, hi) that see some key of [j_first, j_last] of a sequence (empty: hi <= lo).
inline void queries_seeing(const Problem& p, const Seq& s, int64_t j_first, int64_t j_last, int64_t& lo,
                           int64_t& hi) {
  const int64_t off = s.n_k - s.n_q;
  lo = p.right >= 0 ? std::max<int64_t>(0, j_first - off - p.right) : 0;
  hi = p.left >= 0 ? std::min<int64_t>(s.n_q, j_last - off + p.left + 1) : s.n_q;
}

// The work lists, planned once per call in flash.cpp (plain code, no ISA flags) and run by every
// path's body. Forward: one item per (sequence, head, block of bq queries), costliest first.
// Backward: one unit per (sequence, kv head); a unit's key blocks are cut into `slices` runs of
// consecutive blocks of about equal cost (visible scores), a number that depends on the unit's shape
// only, never on the thread count. Each slice computes its dK, dV rows alone and a dQ partial over
// the queries its keys are seen by; the partials are added in slice order into an fp32 accumulator
// (`acc` floats into it, group x n_q x dp per unit): the bits are the same at any thread count and
// for a sequence run alone or in a batch. A unit's slices come in order in the list (dealt
// round-robin among the sliced units), so a slice waiting for its predecessor's add waits on a task
// already handed out (OpenMP's dynamic schedule hands iterations out in order).
struct FwdItem {
  int64_t b = 0, h = 0, i0 = 0;
};
struct BwdTask {
  int64_t b = 0, kvh = 0, unit = 0;
  int64_t kb0 = 0, kb1 = 0;  // key blocks [kb0, kb1) of the sequence
  int64_t slice = 0, slices = 1;
  int64_t acc = -1;  // floats into the dQ accumulator (slices > 1), -1 otherwise
};
std::vector<FwdItem> plan_forward(const Problem& p, int bq);
std::vector<BwdTask> plan_backward(const Problem& p, int bk, int64_t& units, int64_t& acc_floats, int64_t dp);
// Visible scores (times the group's heads) per backward slice: the planner's one constant, a
// reference so tests can lower it and cut short sequences into many slices (ScopedSliceScores in
// tests/attention/test_flash_masks.cpp); nothing else writes it.
double& backward_slice_scores();

// Each path's file (flash_<isa>.cpp) exposes its entry points and one table of them (the per-ISA
// convention, core/isa_paths.hpp).
struct Kernels {
  void (*forward)(const Problem& p) = nullptr;
  void (*backward)(const Problem& p) = nullptr;
};
Kernels kernels_scalar();
Kernels kernels_avx2();
Kernels kernels_avx512();
Kernels kernels_avx512bf16();
Kernels kernels_amx();     // bf16 on AMX tiles (the instructions), fp32 as avx512bf16
Kernels kernels_amxemu();  // bf16 on AMX tiles over the emulator, any machine (the amx_emulated switch)

void forward_scalar(const Problem& p);
void backward_scalar(const Problem& p);
void forward_avx2(const Problem& p);
void backward_avx2(const Problem& p);
void forward_avx512(const Problem& p);
void backward_avx512(const Problem& p);
void forward_avx512bf16(const Problem& p);
void backward_avx512bf16(const Problem& p);
void forward_amx(const Problem& p);
void backward_amx(const Problem& p);
void forward_amxemu(const Problem& p);
void backward_amxemu(const Problem& p);

}  // namespace ridge::attention::detail

namespace ridge::attention::detail {
// Block sizes (queries, keys) for a head dimension and vector width; want_* > 0 overrides
// (rounded to a multiple of w). Both come out multiples of w.
void choose_blocks(int64_t d, int w, int want_q, int want_k, int& bq, int& bk);
}  // namespace ridge::attention::detail

namespace ridge::attention::detail {

// ---- Decode attention over a paged KV cache (decode.cpp plans, decode_body.inc runs) ----

// One unit of work: the queries folded onto kv head `kvh` of sequence `b` (rows r = i * group + hq,
// i the query position, hq the head within the group) against keys [k0, k1) of that sequence.
// `partial` is where it leaves its unnormalised output and statistics (floats into
// DecodeProblem::partials), or -1 when the item is its unit's only split and writes o and lse itself.
struct DecodeItem {
  int64_t b = 0, kvh = 0, k0 = 0, k1 = 0, partial = -1;
};

// A (sequence, kv head) whose keys were split: its `splits` partial slots (each DecodeProblem::slot
// floats, consecutive from `partial`) are combined into o and lse.
struct DecodeUnit {
  int64_t b = 0, kvh = 0, splits = 0, partial = 0;
};

struct DecodeProblem {
  int64_t batch = 0, seqlen_q = 0, heads = 0, kv_heads = 0, d = 0;
  int64_t num_blocks = 0, block_size = 0;
  bool bf16 = false;
  bool causal = true;
  // Scores s * c in the log2 domain (as Problem::c), lse = m * lse_factor + ln(l).
  float c = 1.4426950408889634f;
  float lse_factor = 0.6931471805599453f;
  // q, o: [batch, seqlen_q, heads, d]; Operand's sb, ss, sh, sd are the strides of those dimensions.
  Operand q, o;
  // k_cache, v_cache: [num_blocks, block_size, kv_heads, d] with these element strides.
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t k_blk = 0, k_row = 0, k_h = 0, k_d = 0;
  int64_t v_blk = 0, v_row = 0, v_h = 0, v_d = 0;
  const int32_t* seqlens = nullptr;
  const int32_t* block_table = nullptr;  // row b at block_table + b * table_ld (ids already checked)
  int64_t table_ld = 0;
  float* lse = nullptr;  // may be null
  int64_t lse_sb = 0, lse_sh = 0, lse_ss = 0;
  const DecodeItem* items = nullptr;  // longest first
  int64_t n_items = 0;
  const DecodeUnit* units = nullptr;  // the split units, combined after every item is done
  int64_t n_units = 0;
  float* partials = nullptr;
  int64_t slot = 0;  // floats per partial slot: rows * (d + 2)
  int threads = 1;
};

struct DecodeKernels {
  void (*decode)(const DecodeProblem& p) = nullptr;
};
DecodeKernels decode_kernels_scalar();
DecodeKernels decode_kernels_avx2();
DecodeKernels decode_kernels_avx512();
DecodeKernels decode_kernels_avx512bf16();

}  // namespace ridge::attention::detail
