// What the public attention API hands to the per-ISA kernels: one plain description of the
// problem (pointers, shapes, element strides), so every ISA file exposes only plain functions.
#pragma once

#include <cstdint>

namespace ridge::attention::detail {

// A [batch, heads, seq, d] operand; element strides.
struct Operand {
  void* data = nullptr;
  int64_t sb = 0, sh = 0, ss = 0, sd = 0;
};

struct Problem {
  int64_t batch = 0, heads = 0, kv_heads = 0, n_q = 0, n_k = 0, d = 0;
  bool bf16 = false;  // element type of every operand but lse (fp32 otherwise)
  bool causal = false;
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
};

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

void forward_scalar(const Problem& p);
void backward_scalar(const Problem& p);
void forward_avx2(const Problem& p);
void backward_avx2(const Problem& p);
void forward_avx512(const Problem& p);
void backward_avx512(const Problem& p);
void forward_avx512bf16(const Problem& p);
void backward_avx512bf16(const Problem& p);

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
