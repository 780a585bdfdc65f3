// FlashAttention-2 with AVX-512 + AVX512_BF16. fp32 inputs take the AVX-512 fp32 algorithm
// (flash_impl.inc); bf16 inputs take a forward whose two matmuls are vdpbf16ps (each instruction
// multiplies pairs of bf16 and accumulates in fp32: twice the FLOPs of an fp32 FMA), with P
// rounded to bf16 for the P V product, as FlashAttention does on GPUs.
//
// GCC 12 reports its own _mm512_undefined_ps() inside the intrinsics headers as maybe-uninitialized
// (GCC PR 105593), a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "attention/internal.hpp"
#include "ridge/core/format.hpp"
#include "ridge/core/memory.hpp"

namespace ridge::attention::detail {
namespace {

#include "attention/vec_avx512.inc"
#include "attention/flash_impl.inc"

// ---- bf16 pair layouts ----
// A "pair" is two bf16 in one 32-bit word, the unit vdpbf16ps multiplies: dst += a.lo*b.lo + a.hi*b.hi.

// C[r][c] (op)= sum_t A[r*ar + t*ak] . B[t*ldb + 16c .. 16c+15] over T pairs; A broadcast, B vectors.
template <int R, int CV, int M>
inline void dot_tile(const uint32_t* A, int64_t ar, int64_t ak, const uint32_t* B, int64_t ldb, int T, float* C,
                     int64_t ldc, const float* colscale) {
  __m512 acc[R][CV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < CV; ++c) {
      if constexpr (M == kSet) acc[r][c] = _mm512_setzero_ps();
      else if constexpr (M == kAdd) acc[r][c] = _mm512_loadu_ps(C + r * ldc + c * 16);
      else acc[r][c] = _mm512_mul_ps(_mm512_loadu_ps(C + r * ldc + c * 16), _mm512_loadu_ps(colscale + c * 16));
    }
  }
  for (int t = 0; t < T; ++t) {
    __m512bh b[CV];
#pragma GCC unroll 16
    for (int c = 0; c < CV; ++c) b[c] = (__m512bh)_mm512_loadu_si512(B + t * ldb + c * 16);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32(static_cast<int>(A[r * ar + t * ak]));
#pragma GCC unroll 16
      for (int c = 0; c < CV; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], a, b[c]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < CV; ++c) _mm512_storeu_ps(C + r * ldc + c * 16, acc[r][c]);
  }
}

constexpr int kDotR = 6;

template <int M, int R>
inline void dot_cv(int cv, const uint32_t* A, int64_t ar, int64_t ak, const uint32_t* B, int64_t ldb, int T, float* C,
                   int64_t ldc, const float* cs) {
  switch (cv) {
    case 1: dot_tile<R, 1, M>(A, ar, ak, B, ldb, T, C, ldc, cs); break;
    case 2: dot_tile<R, 2, M>(A, ar, ak, B, ldb, T, C, ldc, cs); break;
    case 3: dot_tile<R, 3, M>(A, ar, ak, B, ldb, T, C, ldc, cs); break;
    default: dot_tile<R, 4, M>(A, ar, ak, B, ldb, T, C, ldc, cs); break;
  }
}

// rows x cols (cols a multiple of 16) (op)= A (rows x T pairs) . B (T pair-rows x cols).
template <int M>
void dot_gemm(int rows, int cols, int T, const uint32_t* A, int64_t ar, int64_t ak, const uint32_t* B, int64_t ldb,
              float* C, int64_t ldc, const float* colscale = nullptr) {
  const int nv = cols / 16;
  for (int v0 = 0; v0 < nv; v0 += 4) {
    const int cv = nv - v0 < 4 ? nv - v0 : 4;
    const uint32_t* Bv = B + v0 * 16;
    const float* cs = colscale ? colscale + v0 * 16 : nullptr;
    for (int r0 = 0; r0 < rows; r0 += kDotR) {
      const int r = rows - r0 < kDotR ? rows - r0 : kDotR;
      const uint32_t* Ar = A + r0 * ar;
      float* Cr = C + r0 * ldc + v0 * 16;
      switch (r) {
        case 1: dot_cv<M, 1>(cv, Ar, ar, ak, Bv, ldb, T, Cr, ldc, cs); break;
        case 2: dot_cv<M, 2>(cv, Ar, ar, ak, Bv, ldb, T, Cr, ldc, cs); break;
        case 3: dot_cv<M, 3>(cv, Ar, ar, ak, Bv, ldb, T, Cr, ldc, cs); break;
        case 4: dot_cv<M, 4>(cv, Ar, ar, ak, Bv, ldb, T, Cr, ldc, cs); break;
        case 5: dot_cv<M, 5>(cv, Ar, ar, ak, Bv, ldb, T, Cr, ldc, cs); break;
        default: dot_cv<M, 6>(cv, Ar, ar, ak, Bv, ldb, T, Cr, ldc, cs); break;
      }
    }
  }
}

inline uint32_t pair(uint16_t lo, uint16_t hi) { return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16); }

inline uint16_t bf16_at(const Operand& t, int64_t b, int64_t h, int64_t s, int64_t c) {
  return static_cast<const bf16*>(t.data)[b * t.sb + h * t.sh + s * t.ss + c * t.sd].bits;
}

// Rows s0..s0+rows of a bf16 operand as pairs along d: dst[r * dpairs + t] = (x[2t], x[2t+1]),
// zero past d.
void pack_pairs_along_d(const Operand& t, int64_t b, int64_t h, int64_t s0, int rows, int64_t d, uint32_t* dst) {
  const int64_t dpairs = (d + 1) / 2;
  for (int r = 0; r < rows; ++r) {
    uint32_t* out = dst + r * dpairs;
    if (t.sd == 1 && d % 2 == 0) {
      std::memcpy(out, static_cast<const bf16*>(t.data) + b * t.sb + h * t.sh + (s0 + r) * t.ss, d * 2);
    } else {
      for (int64_t x = 0; x < dpairs; ++x)
        out[x] = pair(bf16_at(t, b, h, s0 + r, 2 * x), 2 * x + 1 < d ? bf16_at(t, b, h, s0 + r, 2 * x + 1) : 0);
    }
  }
}

// Pairs of consecutive rows: dst[u * d + c] = (x[s0 + 2u][c], x[s0 + 2u + 1][c]), a zero row past
// `rows`. With unit stride along d, two rows interleave with one vpermt2w per 16 columns.
void pack_pairs_along_seq(const Operand& t, int64_t b, int64_t h, int64_t s0, int rows, int64_t d, uint32_t* dst) {
  const int64_t upairs = (rows + 1) / 2;
  const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                          37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi_idx = _mm512_set_epi16(63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56, 24, 55, 23, 54,
                                          22, 53, 21, 52, 20, 51, 19, 50, 18, 49, 17, 48, 16);
  for (int64_t u = 0; u < upairs; ++u) {
    const int64_t r0 = s0 + 2 * u;
    const bool second = 2 * u + 1 < rows;
    uint32_t* out = dst + u * d;
    if (t.sd == 1) {
      const uint16_t* a = &static_cast<const bf16*>(t.data)[b * t.sb + h * t.sh + r0 * t.ss].bits;
      const uint16_t* bb = second ? a + t.ss : nullptr;
      for (int64_t c = 0; c < d; c += 32) {
        const int64_t n = d - c < 32 ? d - c : 32;
        const __mmask32 m = n == 32 ? ~__mmask32(0) : ((__mmask32(1) << n) - 1);
        const __m512i va = _mm512_maskz_loadu_epi16(m, a + c);
        const __m512i vb = second ? _mm512_maskz_loadu_epi16(m, bb + c) : _mm512_setzero_si512();
        const __m512i lo = _mm512_permutex2var_epi16(va, lo_idx, vb);
        const __m512i hi = _mm512_permutex2var_epi16(va, hi_idx, vb);
        const int64_t nlo = n < 16 ? n : 16;
        _mm512_mask_storeu_epi32(out + c, static_cast<__mmask16>(nlo == 16 ? 0xFFFF : (1u << nlo) - 1), lo);
        if (n > 16)
          _mm512_mask_storeu_epi32(out + c + 16, static_cast<__mmask16>(n - 16 == 16 ? 0xFFFF : (1u << (n - 16)) - 1),
                                   hi);
      }
    } else {
      for (int64_t c = 0; c < d; ++c)
        out[c] = pair(bf16_at(t, b, h, r0, c), second ? bf16_at(t, b, h, r0 + 1, c) : 0);
    }
  }
}

void forward_bf16_dot(const Problem& p) {
  int BR, BC;
  blocks_for(p, BR, BC);
  const int64_t d = p.d;
  const int64_t dpairs = (d + 1) / 2;
  const int64_t group = p.heads / p.kv_heads;
  const int64_t nqb = (p.n_q + BR - 1) / BR;
  const int64_t tasks = p.batch * p.heads * nqb;
  const int64_t off = p.n_k - p.n_q;
  const float c = p.scale * kLog2e;
  // Interleaves the bf16 of two fp32 vectors: lane i of the result = (a[i], b[i]).
  const __m512i inter = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);

#pragma omp parallel num_threads(p.threads)
  {
    // Per thread: Q^T pairs (dpairs x BR words), O^T (d x BR), K pairs (BC x dpairs), V pairs
    // (BC/2 x d), S^T (BC x BR), P^T pairs (BC/2 x BR), row statistics.
    const size_t words = static_cast<size_t>(dpairs * BR + d * BR + BC * dpairs + (BC / 2 + 1) * d + BC * BR +
                                             (BC / 2 + 1) * BR + 4 * BR);
    Scratch ws(words, "attention.forward.workspace");
    uint32_t* QTp = reinterpret_cast<uint32_t*>(ws.data());
    float* OT = ws.data() + dpairs * BR;
    uint32_t* Kp = reinterpret_cast<uint32_t*>(OT + d * BR);
    uint32_t* Vp = Kp + BC * dpairs;
    float* ST = reinterpret_cast<float*>(Vp + (BC / 2 + 1) * d);
    uint32_t* PTp = reinterpret_cast<uint32_t*>(ST + BC * BR);
    float* m = reinterpret_cast<float*>(PTp + (BC / 2 + 1) * BR);
    float* l = m + BR;
    float* alpha = l + BR;
    float* mu = alpha + BR;

#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t qb = t % nqb;
      const int64_t h = (t / nqb) % p.heads;
      const int64_t b = t / (nqb * p.heads);
      const int64_t kvh = h / group;
      const int64_t i0 = qb * BR;
      const int mr = static_cast<int>(imin(BR, p.n_q - i0));
      int64_t j_end = p.n_k;
      if (p.causal) j_end = imin(p.n_k, i0 + mr + off);
      if (j_end < 0) j_end = 0;

      for (int64_t x = 0; x < dpairs; ++x)
        for (int i = 0; i < BR; ++i)
          QTp[x * BR + i] = i < mr ? pair(bf16_at(p.q, b, h, i0 + i, 2 * x),
                                          2 * x + 1 < d ? bf16_at(p.q, b, h, i0 + i, 2 * x + 1) : 0)
                                   : 0;
      for (int i = 0; i < BR; ++i) {
        m[i] = kNegInf;
        l[i] = 0.0f;
      }
      for (int64_t x = 0; x < d * BR; ++x) OT[x] = 0.0f;

      for (int64_t j0 = 0; j0 < j_end; j0 += BC) {
        const int nc = static_cast<int>(imin(BC, j_end - j0));
        const int npairs = (nc + 1) / 2;
        pack_pairs_along_d(p.k, b, kvh, j0, nc, d, Kp);
        pack_pairs_along_seq(p.v, b, kvh, j0, nc, d, Vp);
        dot_gemm<kSet>(nc, BR, static_cast<int>(dpairs), Kp, dpairs, 1, QTp, BR, ST, BR);
        if (p.causal && j0 + nc - 1 > i0 + off) {
          for (int j = 0; j < nc; ++j) {
            float* row = ST + j * BR;
            const int64_t lim = imin(BR, j0 + j - off - i0);
            for (int64_t i = 0; i < lim; ++i) row[i] = kNegInf;
          }
        }
        for (int v0 = 0; v0 < BR; v0 += 16) {
          __m512 mx = _mm512_set1_ps(kNegInf);
          for (int j = 0; j < nc; ++j) mx = _mm512_max_ps(mx, _mm512_loadu_ps(ST + j * BR + v0));
          const __m512 m_old = _mm512_loadu_ps(m + v0);
          const __m512 m_new = _mm512_max_ps(m_old, _mm512_mul_ps(mx, _mm512_set1_ps(c)));
          const __m512 m_use = _mm512_max_ps(m_new, _mm512_set1_ps(-std::numeric_limits<float>::max()));
          const __m512 neg_m = _mm512_sub_ps(_mm512_setzero_ps(), m_use);
          const __m512 cc = _mm512_set1_ps(c);
          __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
          for (int u = 0; u < npairs; ++u) {
            const int j = 2 * u;
            const __m512 p0 = V::exp2(_mm512_fmadd_ps(_mm512_loadu_ps(ST + j * BR + v0), cc, neg_m));
            const __m512 p1 = j + 1 < nc ? V::exp2(_mm512_fmadd_ps(_mm512_loadu_ps(ST + (j + 1) * BR + v0), cc, neg_m))
                                         : _mm512_setzero_ps();
            sum0 = _mm512_add_ps(sum0, p0);
            sum1 = _mm512_add_ps(sum1, p1);
            const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(p1, p0);
            _mm512_storeu_si512(PTp + u * BR + v0, _mm512_permutexvar_epi16(inter, both));
          }
          const __m512 a = V::exp2(_mm512_add_ps(m_old, neg_m));
          _mm512_storeu_ps(alpha + v0, a);
          _mm512_storeu_ps(l + v0, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(l + v0), a), _mm512_add_ps(sum0, sum1)));
          _mm512_storeu_ps(m + v0, m_new);
        }
        dot_gemm<kScale>(static_cast<int>(d), BR, npairs, Vp, 1, d, PTp, BR, OT, BR, alpha);
      }

      for (int i = 0; i < mr; ++i) {
        const bool seen = l[i] > 0.0f;
        mu[i] = seen ? 1.0f / l[i] : 0.0f;
        p.lse[b * p.lse_sb + h * p.lse_sh + (i0 + i) * p.lse_ss] = seen ? m[i] * kLn2 + logf(l[i]) : kNegInf;
      }
      for (int i = 0; i < mr; ++i)
        for (int64_t dd = 0; dd < d; ++dd) store_value(p.o, true, b, h, i0 + i, dd, OT[dd * BR + i] * mu[i]);
    }
  }
}

}  // namespace

void forward_avx512bf16(const Problem& p) {
  if (p.bf16) forward_bf16_dot(p);
  else forward(p);
}
void backward_avx512bf16(const Problem& p) { backward(p); }

}  // namespace ridge::attention::detail
