// Vector paths of the model's exp-heavy and rounding-heavy elementwise layers (SwiGLU forward and
// backward, the cross-entropy rows), for fp32 compute with fp32 or bf16 operands. Each returns false
// when the active ISA (ridge::cpu::active_isa()) has no vector path, and the caller runs the
// scalar twin in layers.hpp, which stays the reference the tests
// hold these against. Rows are split over threads as the twins split them, so results do not depend
// on the thread count. exp is a degree-6 polynomial on 2^f (relative error < 2e-7), so results
// differ from the twins' std::exp by a few float ulps, never by a bf16 rounding step more than that.
#pragma once

#include <cstdint>

#include "ridge/core/format.hpp"

namespace ridge::model::fused {

// g = silu(a) * b from ab = [n, 2f] (a | b), a and b rounded to the operand type first; ab_saved gets
// that operand-type copy of ab, or is null (generation keeps none).
bool swiglu_forward(const float* ab, int64_t n, int64_t f, bf16* ab_saved, bf16* g);
bool swiglu_forward(const float* ab, int64_t n, int64_t f, float* ab_saved, float* g);
// dab = [dg * b * silu'(a) | dg * silu(a)].
bool swiglu_backward(const float* dg, const bf16* ab, int64_t n, int64_t f, bf16* dab);
bool swiglu_backward(const float* dg, const float* ab, int64_t n, int64_t f, float* dab);
// The fp16 emulation's forms: every operand value rounded through fp16 and kept as fp32.
bool swiglu_forward_fp16(const float* ab, int64_t n, int64_t f, float* ab_saved, float* g);
bool swiglu_backward_fp16(const float* dg, const float* ab, int64_t n, int64_t f, float* dab);
// Per row: lse[i] = log sum exp(logits[i, :]); row_loss[i] = lse[i] - logits[i, targets[i]].
bool cross_entropy_forward(const float* logits, const int32_t* targets, int64_t n, int64_t vocab, float* lse,
                           double* row_loss);
// out[i, j] = exp(logits[i, j] - lse[i]) * k, minus k at the target. The fp32 form may write in
// place (out == logits); the bf16 form fuses the rounding for the lm_head GEMMs into this pass.
bool cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse, int64_t n,
                            int64_t vocab, float k, float* out);
bool cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse, int64_t n,
                            int64_t vocab, float k, bf16* out);

// The vector paths' table (the per-ISA convention, core/isa_paths.hpp): fused_avx512.cpp fills it;
// the functions above call its entries on a path that has them.
struct Kernels {
  void (*swiglu_forward_bf16)(const float*, int64_t, int64_t, bf16*, bf16*) = nullptr;
  void (*swiglu_forward_f32)(const float*, int64_t, int64_t, float*, float*) = nullptr;
  void (*swiglu_forward_fp16)(const float*, int64_t, int64_t, float*, float*) = nullptr;
  void (*swiglu_backward_bf16)(const float*, const bf16*, int64_t, int64_t, bf16*) = nullptr;
  void (*swiglu_backward_f32)(const float*, const float*, int64_t, int64_t, float*) = nullptr;
  void (*swiglu_backward_fp16)(const float*, const float*, int64_t, int64_t, float*) = nullptr;
  void (*cross_entropy_forward_f32)(const float*, const int32_t*, int64_t, int64_t, float*,
                                    double*) = nullptr;
  void (*cross_entropy_backward_f32)(const float*, const int32_t*, const float*, int64_t, int64_t, float,
                                     float*) = nullptr;
  void (*cross_entropy_backward_bf16)(const float*, const int32_t*, const float*, int64_t, int64_t, float,
                                      bf16*) = nullptr;
};
Kernels kernels_avx512();

}  // namespace ridge::model::fused
