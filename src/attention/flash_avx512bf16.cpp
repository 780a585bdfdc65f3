// FlashAttention-2 with AVX-512 + AVX512_BF16. fp32 inputs take the AVX-512 fp32 algorithm
// (flash_impl.inc); bf16 inputs take a forward and a backward whose matmuls are vdpbf16ps (each
// instruction multiplies pairs of bf16 and accumulates in fp32: twice the FLOPs of an fp32 FMA),
// with P and dS rounded to bf16 for the products that consume them, as FlashAttention does on GPUs.
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
void pack_pairs_along_seq(const Operand& t, int64_t b, int64_t h, int64_t s0, int rows, int64_t d, uint32_t* dst,
                          int64_t ld) {
  const int64_t upairs = (rows + 1) / 2;
  const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                          37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi_idx = _mm512_set_epi16(63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56, 24, 55, 23, 54,
                                          22, 53, 21, 52, 20, 51, 19, 50, 18, 49, 17, 48, 16);
  for (int64_t u = 0; u < upairs; ++u) {
    const int64_t r0 = s0 + 2 * u;
    const bool second = 2 * u + 1 < rows;
    uint32_t* out = dst + u * ld;
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
        pack_pairs_along_seq(p.v, b, kvh, j0, nc, d, Vp, d);
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

void backward_bf16_dot(const Problem& p) {
  int BR, BC;
  blocks_for(p, BR, BC);
  const int64_t d = p.d;
  const int64_t group = p.heads / p.kv_heads;
  const int64_t nkb = (p.n_k + BC - 1) / BC;
  const int64_t off = p.n_k - p.n_q;
  const float c = p.scale * kLog2e;
  const int64_t units = p.batch * p.kv_heads;
  // Each (batch, kv head) is one unit of work that owns its dK, dV. When there are fewer units
  // than threads, a unit's key blocks are dealt round-robin to `slices` tasks; their dQ partial
  // sums then meet in an fp32 accumulator under a lock (O(n_q * d) work against O(n_q n_k d)).
  const int64_t slices = units >= p.threads ? 1 : (p.threads + units - 1) / units;
  const int64_t tasks = units * slices;
  const int64_t dq_unit = group * p.n_q * round_up(d, 16);

  // D = rowsum(dO * O) and lse in the log2 domain, per query row: O(n_q) each.
  Scratch rowstat(static_cast<size_t>(2 * p.batch * p.heads * p.n_q), "attention.backward.rowstats");
  float* Dv = rowstat.data();
  float* L2 = Dv + p.batch * p.heads * p.n_q;
  Scratch dq_total(static_cast<size_t>(slices > 1 ? units * dq_unit : 0), "attention.backward.dq_accumulator");
  if (slices > 1)
    for (int64_t x = 0; x < units * dq_unit; ++x) dq_total[x] = 0.0f;

#pragma omp parallel num_threads(p.threads)
  {
    {
      Scratch rows(static_cast<size_t>(2 * d), "attention.backward.workspace");
#pragma omp for schedule(static)
      for (int64_t r = 0; r < p.batch * p.heads * p.n_q; ++r) {
        const int64_t i = r % p.n_q, h = (r / p.n_q) % p.heads, b = r / (p.n_q * p.heads);
        pack_rows(p.o, p.bf16, b, h, i, 1, d, rows.data(), d);
        pack_rows(p.d_o, p.bf16, b, h, i, 1, d, rows.data() + d, d);
        double acc = 0.0;
        for (int64_t x = 0; x < d; ++x) acc += static_cast<double>(rows[x]) * rows[d + x];
        Dv[r] = static_cast<float>(acc);
        const float lse = p.lse[b * p.lse_sb + h * p.lse_sh + i * p.lse_ss];
        // A row that saw no key has lse = -inf; +inf makes its P exactly 0 below.
        L2[r] = lse == kNegInf ? std::numeric_limits<float>::infinity() : lse * kLog2e;
      }
    }

    const int64_t dpairs = (d + 1) / 2;
    const int64_t dp16 = round_up(d, 16);
    // Pair-packed operands (32-bit words), fp32 tiles and the dq accumulator.
    const size_t ws_floats = static_cast<size_t>(2 * dpairs * BC + (BC / 2 + 1) * dp16 + 2 * d * BC +
                                                 2 * BR * dpairs + 2 * (BR / 2 + 1) * d + 2 * BR * BC +
                                                 2 * (BR / 2 + 1) * BC + BR * (BC / 2) + BC * dpairs + 2 * BR + dq_unit);
    Scratch ws(ws_floats, "attention.backward.workspace");
    uint32_t* KTp = reinterpret_cast<uint32_t*>(ws.data());  // dpairs x BC: K^T, pairs along d
    uint32_t* VTp = KTp + dpairs * BC;                        // dpairs x BC
    uint32_t* Ks = VTp + dpairs * BC;                         // BC/2 x dp16: K, pairs along keys
    float* dKT = reinterpret_cast<float*>(Ks + (BC / 2 + 1) * dp16);  // d x BC
    float* dVT = dKT + d * BC;                                // d x BC
    uint32_t* Qd = reinterpret_cast<uint32_t*>(dVT + d * BC); // BR x dpairs: Q, pairs along d
    uint32_t* dOd = Qd + BR * dpairs;                         // BR x dpairs
    uint32_t* Qs = dOd + BR * dpairs;                         // BR/2 x d: Q, pairs along queries
    uint32_t* dOs = Qs + (BR / 2 + 1) * d;                    // BR/2 x d
    float* P = reinterpret_cast<float*>(dOs + (BR / 2 + 1) * d);  // BR x BC
    float* dS = P + BR * BC;                                  // BR x BC
    uint32_t* Pp = reinterpret_cast<uint32_t*>(dS + BR * BC); // BR/2 x BC: P, pairs along queries
    uint32_t* dSp = Pp + (BR / 2 + 1) * BC;                   // BR/2 x BC
    uint32_t* dSr = dSp + (BR / 2 + 1) * BC;                  // BR x BC/2: dS rows, pairs along keys
    uint32_t* Kd = dSr + BR * (BC / 2);                       // BC x dpairs (scratch for K^T)
    float* lrow = reinterpret_cast<float*>(Kd + BC * dpairs); // BR
    float* drow = lrow + BR;                                  // BR
    float* dQ = drow + BR;                                    // group x n_q x dp16
    const __m512i inter = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                           6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    // Rows r, r+1 of an fp32 tile (BC wide) as bf16 pairs along the rows.
    auto pair_rows = [&](const float* tile, int rows, uint32_t* out) {
      for (int u = 0; u < (rows + 1) / 2; ++u)
        for (int v0 = 0; v0 < BC; v0 += 16) {
          const __m512 a = _mm512_loadu_ps(tile + 2 * u * BC + v0);
          const __m512 b2 = 2 * u + 1 < rows ? _mm512_loadu_ps(tile + (2 * u + 1) * BC + v0) : _mm512_setzero_ps();
          _mm512_storeu_si512(out + u * BC + v0, _mm512_permutexvar_epi16(inter, (__m512i)_mm512_cvtne2ps_pbh(b2, a)));
        }
    };
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t unit = t / slices, slice = t % slices;
      const int64_t b = unit / p.kv_heads, kvh = unit % p.kv_heads;
      for (int64_t x = 0; x < dq_unit; ++x) dQ[x] = 0.0f;

      for (int64_t kb = slice; kb < nkb; kb += slices) {
        const int64_t j0 = kb * BC;
        const int nc = static_cast<int>(imin(BC, p.n_k - j0));
        pack_pairs_along_d(p.k, b, kvh, j0, nc, d, Kd);
        for (int64_t x = 0; x < dpairs; ++x)
          for (int j = 0; j < BC; ++j) KTp[x * BC + j] = j < nc ? Kd[j * dpairs + x] : 0u;
        pack_pairs_along_d(p.v, b, kvh, j0, nc, d, Kd);
        for (int64_t x = 0; x < dpairs; ++x)
          for (int j = 0; j < BC; ++j) VTp[x * BC + j] = j < nc ? Kd[j * dpairs + x] : 0u;
        for (int64_t x = 0; x < (BC / 2 + 1) * dp16; ++x) Ks[x] = 0u;
        pack_pairs_along_seq(p.k, b, kvh, j0, nc, d, Ks, dp16);
        for (int64_t x = 0; x < d * BC; ++x) dKT[x] = dVT[x] = 0.0f;
        // Queries before i_first see none of this block's keys.
        const int64_t i_first = p.causal ? imax(0, j0 - off) : 0;

        for (int64_t hq = 0; hq < group; ++hq) {
          const int64_t h = kvh * group + hq;
          const int64_t rbase = (b * p.heads + h) * p.n_q;
          for (int64_t i0 = i_first / BR * BR; i0 < p.n_q; i0 += BR) {
            const int mr = static_cast<int>(imin(BR, p.n_q - i0));
            pack_pairs_along_d(p.q, b, h, i0, mr, d, Qd);
            pack_pairs_along_d(p.d_o, b, h, i0, mr, d, dOd);
            pack_pairs_along_seq(p.q, b, h, i0, mr, d, Qs, d);
            pack_pairs_along_seq(p.d_o, b, h, i0, mr, d, dOs, d);
            for (int i = 0; i < mr; ++i) {
              lrow[i] = L2[rbase + i0 + i];
              drow[i] = Dv[rbase + i0 + i];
            }
            dot_gemm<kSet>(mr, BC, static_cast<int>(dpairs), Qd, dpairs, 1, KTp, BC, P, BC);
            dot_gemm<kSet>(mr, BC, static_cast<int>(dpairs), dOd, dpairs, 1, VTp, BC, dS, BC);
            const bool diag = p.causal && j0 + nc - 1 > i0 + off;
            for (int i = 0; i < mr; ++i) {
              float* prow = P + i * BC;
              float* srow = dS + i * BC;
              // Keys at or past `lim` are hidden from this row (causal mask or past n_k).
              int64_t lim = nc;
              if (diag) lim = imin(imax(i0 + i + off - j0 + 1, 0), nc);
              for (int64_t j = lim; j < BC; ++j) prow[j] = kNegInf;
              const typename V::R nl = V::set1(-lrow[i]);
              const typename V::R cc = V::set1(c);
              const typename V::R dr = V::set1(drow[i]);
              for (int v0 = 0; v0 < BC; v0 += V::W) {
                const typename V::R pv = V::exp2(V::fma(V::load(prow + v0), cc, nl));
                V::store(prow + v0, pv);
                V::store(srow + v0, V::mul(pv, V::sub(V::load(srow + v0), dr)));
              }
            }
            // P and dS rounded to bf16 for the three products, as FlashAttention does on GPUs.
            const int ipairs = (mr + 1) / 2;
            pair_rows(P, mr, Pp);
            pair_rows(dS, mr, dSp);
            for (int i = 0; i < mr; ++i)
              for (int v0 = 0; v0 < BC; v0 += 32) {
                const __m512 lo = _mm512_loadu_ps(dS + i * BC + v0);
                const __m512 hi = v0 + 16 < BC ? _mm512_loadu_ps(dS + i * BC + v0 + 16) : _mm512_setzero_ps();
                const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
                if (v0 + 16 < BC) _mm512_storeu_si512(dSr + i * (BC / 2) + v0 / 2, both);
                else _mm256_storeu_si256(reinterpret_cast<__m256i*>(dSr + i * (BC / 2) + v0 / 2), _mm512_castsi512_si256(both));
              }
            dot_gemm<kAdd>(static_cast<int>(d), BC, ipairs, dOs, 1, d, Pp, BC, dVT, BC);
            dot_gemm<kAdd>(static_cast<int>(d), BC, ipairs, Qs, 1, d, dSp, BC, dKT, BC);
            dot_gemm<kAdd>(mr, static_cast<int>(dp16), (nc + 1) / 2, dSr, BC / 2, 1, Ks, dp16,
                           dQ + (hq * p.n_q + i0) * dp16, dp16);
          }
        }
        for (int j = 0; j < nc; ++j)
          for (int64_t x = 0; x < d; ++x) {
            store_value(p.dk, p.bf16, b, kvh, j0 + j, x, dKT[x * BC + j] * p.scale);
            store_value(p.dv, p.bf16, b, kvh, j0 + j, x, dVT[x * BC + j]);
          }
      }

      if (slices == 1) {
        for (int64_t hq = 0; hq < group; ++hq)
          for (int64_t i = 0; i < p.n_q; ++i)
            for (int64_t x = 0; x < d; ++x)
              store_value(p.dq, p.bf16, b, kvh * group + hq, i, x, dQ[(hq * p.n_q + i) * dp16 + x] * p.scale);
      } else {
        float* total = dq_total.data() + unit * dq_unit;
#pragma omp critical(ridge_attention_dq)
        for (int64_t x = 0; x < dq_unit; ++x) total[x] += dQ[x];
      }
    }

    if (slices > 1) {
#pragma omp for schedule(static)
      for (int64_t unit = 0; unit < units; ++unit) {
        const int64_t b = unit / p.kv_heads, kvh = unit % p.kv_heads;
        const float* total = dq_total.data() + unit * dq_unit;
        for (int64_t hq = 0; hq < group; ++hq)
          for (int64_t i = 0; i < p.n_q; ++i)
            for (int64_t x = 0; x < d; ++x)
              store_value(p.dq, p.bf16, b, kvh * group + hq, i, x, total[(hq * p.n_q + i) * round_up(d, 16) + x] * p.scale);
      }
    }
  }
}

}  // namespace

void forward_avx512bf16(const Problem& p) {
  if (p.bf16) forward_bf16_dot(p);
  else forward(p);
}
void backward_avx512bf16(const Problem& p) {
  if (p.bf16) backward_bf16_dot(p);
  else backward(p);
}

}  // namespace ridge::attention::detail
