// AVX-512 paths of model/fused.hpp: 16 floats per step, row tails through masked loads and stores.
// bf16 rounding is done on the float's bits (nearest even, NaN kept quiet), exactly as to_bf16, and
// e^x is the degree-6 polynomial of simd/avx512.inc (relative error < 2e-7).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593 (see core/format_avx512.cpp)
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cmath>
#include <type_traits>

#include "model/fused.hpp"
#include "ridge/core/threads.hpp"

namespace ridge::model::fused {
namespace {

// exp_ps, to_bf16_ps and from_bf16_ps: this unit's private copies (docs/core.md, "Per-ISA convention").
#include "simd/avx512.inc"

// Below this many elements a loop runs on the calling thread (as layers::kParallelMin).
constexpr int64_t kParallelMin = 1 << 15;

[[gnu::always_inline]] inline __m512 sigmoid_ps(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

// fp32 rounded through fp16 and back (fp16 emulation): vcvtps2ph with the rounding in the
// instruction (nearest even, whatever MXCSR says), IEEE subnormals and overflow to inf, as to_fp16.
[[gnu::always_inline]] inline __m512 round_fp16_ps(__m512 v) {
  return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// Operand-type loads and stores of 16 (or the first `m`) elements.
template <typename O>
[[gnu::always_inline]] inline __m512 load(const O* p, __mmask16 m) {
  if constexpr (std::is_same_v<O, bf16>)
    return from_bf16_ps(_mm256_maskz_loadu_epi16(m, p));
  else
    return _mm512_maskz_loadu_ps(m, p);
}
// Stores the operand-type value and returns it as a float (what a reader of the operand sees);
// F16 rounds a float operand through fp16 first.
template <typename O, bool F16 = false>
[[gnu::always_inline]] inline __m512 store(O* p, __m512 v, __mmask16 m) {
  if constexpr (F16) {
    static_assert(std::is_same_v<O, float>);
    v = round_fp16_ps(v);
    _mm512_mask_storeu_ps(p, m, v);
    return v;
  } else if constexpr (std::is_same_v<O, bf16>) {
    const __m256i h = to_bf16_ps(v);
    _mm256_mask_storeu_epi16(p, m, h);
    return from_bf16_ps(h);
  } else {
    _mm512_mask_storeu_ps(p, m, v);
    return v;
  }
}
// The operand-type value as a float, stored nowhere (store's value without the store).
template <typename O, bool F16 = false>
[[gnu::always_inline]] inline __m512 rounded(__m512 v) {
  if constexpr (F16)
    return round_fp16_ps(v);
  else if constexpr (std::is_same_v<O, bf16>)
    return from_bf16_ps(to_bf16_ps(v));
  else
    return v;
}
inline __mmask16 tail(int64_t left) {
  return left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

// Save: ab_saved is written (training); without, a and b are only rounded (generation).
template <typename O, bool F16, bool Save>
void swiglu_fwd_rows(const float* ab, int64_t n, int64_t f, O* ab_saved, O* g) {
  const int nt = get_num_threads();
#pragma omp parallel for num_threads(nt) schedule(static) if (n * f >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float* a = ab + i * 2 * f;
    const float* b = a + f;
    O* sa = Save ? ab_saved + i * 2 * f : nullptr;
    O* gi = g + i * f;
    for (int64_t j = 0; j < f; j += 16) {
      const __mmask16 m = tail(f - j);
      // g is formed from the rounded a and b, the values backward reads.
      const __m512 ai = _mm512_maskz_loadu_ps(m, a + j), bi = _mm512_maskz_loadu_ps(m, b + j);
      __m512 av, bv;
      if constexpr (Save) {
        av = store<O, F16>(sa + j, ai, m);
        bv = store<O, F16>(sa + f + j, bi, m);
      } else {
        av = rounded<O, F16>(ai);
        bv = rounded<O, F16>(bi);
      }
      store<O, F16>(gi + j, _mm512_mul_ps(_mm512_mul_ps(av, sigmoid_ps(av)), bv), m);
    }
  }
}
template <typename O, bool F16 = false>
void swiglu_fwd(const float* ab, int64_t n, int64_t f, O* ab_saved, O* g) {
  if (ab_saved)
    swiglu_fwd_rows<O, F16, true>(ab, n, f, ab_saved, g);
  else
    swiglu_fwd_rows<O, F16, false>(ab, n, f, ab_saved, g);
}

template <typename O, bool F16 = false>
void swiglu_bwd(const float* dg, const O* ab, int64_t n, int64_t f, O* dab) {
  const int nt = get_num_threads();
  const __m512 one = _mm512_set1_ps(1.0f);
#pragma omp parallel for num_threads(nt) schedule(static) if (n * f >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const O* a = ab + i * 2 * f;
    const O* b = a + f;
    const float* gi = dg + i * f;
    O* da = dab + i * 2 * f;
    O* db = da + f;
    for (int64_t j = 0; j < f; j += 16) {
      const __mmask16 m = tail(f - j);
      const __m512 av = load(a + j, m), bv = load(b + j, m), gv = _mm512_maskz_loadu_ps(m, gi + j);
      const __m512 s = sigmoid_ps(av);
      // d a = g b s (1 + a (1 - s)), d b = g a s: the twin's order of products.
      const __m512 gb = _mm512_mul_ps(_mm512_mul_ps(gv, bv), s);
      const __m512 t = _mm512_add_ps(one, _mm512_mul_ps(av, _mm512_sub_ps(one, s)));
      store<O, F16>(da + j, _mm512_mul_ps(gb, t), m);
      store<O, F16>(db + j, _mm512_mul_ps(_mm512_mul_ps(gv, av), s), m);
    }
  }
}

void swiglu_forward_bf16(const float* ab, int64_t n, int64_t f, bf16* ab_saved, bf16* g) {
  swiglu_fwd(ab, n, f, ab_saved, g);
}
void swiglu_forward_f32(const float* ab, int64_t n, int64_t f, float* ab_saved, float* g) {
  swiglu_fwd(ab, n, f, ab_saved, g);
}
void swiglu_forward_fp16(const float* ab, int64_t n, int64_t f, float* ab_saved, float* g) {
  swiglu_fwd<float, true>(ab, n, f, ab_saved, g);
}
void swiglu_backward_fp16(const float* dg, const float* ab, int64_t n, int64_t f, float* dab) {
  swiglu_bwd<float, true>(dg, ab, n, f, dab);
}
void swiglu_backward_bf16(const float* dg, const bf16* ab, int64_t n, int64_t f, bf16* dab) {
  swiglu_bwd(dg, ab, n, f, dab);
}
void swiglu_backward_f32(const float* dg, const float* ab, int64_t n, int64_t f, float* dab) {
  swiglu_bwd(dg, ab, n, f, dab);
}

void cross_entropy_forward_f32(const float* logits, const int32_t* targets, int64_t n, int64_t vocab,
                               float* lse, double* row_loss) {
  const int nt = get_num_threads();
#pragma omp parallel for num_threads(nt) schedule(static) if (n * vocab >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float* li = logits + i * vocab;
    __m512 mv = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < vocab; j += 16) {
      const __mmask16 m = tail(vocab - j);
      mv = _mm512_mask_max_ps(mv, m, mv, _mm512_maskz_loadu_ps(m, li + j));
    }
    const float mx = _mm512_reduce_max_ps(mv);
    const __m512 neg = _mm512_set1_ps(-mx);
    __m512 sv = _mm512_setzero_ps();
    for (int64_t j = 0; j < vocab; j += 16) {
      const __mmask16 m = tail(vocab - j);
      sv = _mm512_mask_add_ps(sv, m, sv, exp_ps(_mm512_add_ps(_mm512_maskz_loadu_ps(m, li + j), neg)));
    }
    lse[i] = mx + logf(_mm512_reduce_add_ps(sv));
    row_loss[i] = static_cast<double>(lse[i] - li[targets[i]]);
  }
}

template <typename O>
void ce_bwd(const float* logits, const int32_t* targets, const float* lse, int64_t n, int64_t vocab, float k,
            O* out) {
  const int nt = get_num_threads();
  const __m512 kv = _mm512_set1_ps(k);
#pragma omp parallel for num_threads(nt) schedule(static) if (n * vocab >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float* li = logits + i * vocab;
    O* oi = out + i * vocab;
    const __m512 neg = _mm512_set1_ps(-lse[i]);
    const int64_t t = targets[i];
    for (int64_t j = 0; j < vocab; j += 16) {
      const __mmask16 m = tail(vocab - j);
      __m512 v = _mm512_mul_ps(exp_ps(_mm512_add_ps(_mm512_maskz_loadu_ps(m, li + j), neg)), kv);
      if (t >= j && t < j + 16)  // the target's lane: minus k after the product, as the twin
        v = _mm512_mask_sub_ps(v, static_cast<__mmask16>(1u << (t - j)), v, kv);
      store(oi + j, v, m);
    }
  }
}

void cross_entropy_backward_f32(const float* logits, const int32_t* targets, const float* lse, int64_t n,
                                int64_t vocab, float k, float* out) {
  ce_bwd(logits, targets, lse, n, vocab, k, out);
}
void cross_entropy_backward_bf16(const float* logits, const int32_t* targets, const float* lse, int64_t n,
                                 int64_t vocab, float k, bf16* out) {
  ce_bwd(logits, targets, lse, n, vocab, k, out);
}

}  // namespace

Kernels kernels_avx512() {
  Kernels k;
  k.swiglu_forward_bf16 = swiglu_forward_bf16;
  k.swiglu_forward_f32 = swiglu_forward_f32;
  k.swiglu_forward_fp16 = swiglu_forward_fp16;
  k.swiglu_backward_bf16 = swiglu_backward_bf16;
  k.swiglu_backward_f32 = swiglu_backward_f32;
  k.swiglu_backward_fp16 = swiglu_backward_fp16;
  k.cross_entropy_forward_f32 = cross_entropy_forward_f32;
  k.cross_entropy_backward_f32 = cross_entropy_backward_f32;
  k.cross_entropy_backward_bf16 = cross_entropy_backward_bf16;
  return k;
}

}  // namespace ridge::model::fused
