// FP8 GEMM on AVX512_BF16. Every e4m3 value is exactly a bf16, so fp8 is widened to bf16 in
// registers (a bit-arithmetic conversion plus an 8-entry table for the subnormals) and the
// products run on vdpbf16ps, which multiplies bf16 pairs exactly and accumulates in fp32.
//  - blocked path: A rows widened into a packed block, B widened and transposed into k-pair
//    interleaved panels (from raw rows, or from a PackedFp8B that is already interleaved); a
//    6x32 micro-kernel keeps the 128-wide partial sums and the scaled totals in registers.
//  - streaming path for decode shapes (few rows of A): B rows are read once, as fp8, straight
//    from memory, widened in registers and dotted with every row of A (lanes hold partial sums
//    along K, reduced once at the end), so memory traffic for B is one byte per element.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "gemm/fp8_internal.hpp"
#include "ridge/core/cpu.hpp"
#include "ridge/core/format.hpp"
#include "ridge/core/memory.hpp"
#include "ridge/core/threads.hpp"

// GCC 12's AVX-512 intrinsics initialise their "undefined" operand from itself, which -O3 reports
// as maybe-uninitialized (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace ridge::gemm::fp8 {
namespace {

using Problem = ::ridge::gemm::fp8::Problem;

// bf16 bits of m * 2^-9 minus (m << 4), for the e4m3 subnormals m = 1..7; entry 8 is the exponent
// rebias for normal numbers (120 << 7).
inline __m512i subnormal_table() {
  return _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x3C00,
                          0x3BF0, 0x3BE0, 0x3BD0, 0x3BC0, 0x3B90, 0x3B60, 0x3AF0, 0);
}

// 32 fp8 e4m3 -> 32 bf16, exact (NaN stays NaN).
inline __m512i widen(__m256i x, __m512i table) {
  const __m512i w = _mm512_cvtepu8_epi16(x);
  const __m512i mag = _mm512_and_si512(w, _mm512_set1_epi16(0x7F));
  const __m512i adj = _mm512_permutexvar_epi16(_mm512_min_epu16(mag, _mm512_set1_epi16(8)), table);
  __m512i r = _mm512_add_epi16(_mm512_slli_epi16(mag, 4), adj);
  r = _mm512_ternarylogic_epi32(r, _mm512_slli_epi16(w, 8), _mm512_set1_epi16(static_cast<short>(0x8000)), 0xF8);
  const __mmask32 nan = _mm512_cmpeq_epi16_mask(mag, _mm512_set1_epi16(0x7F));
  return _mm512_mask_mov_epi16(r, nan, _mm512_set1_epi16(0x7FC0));
}

inline __m256i load_bytes(const uint8_t* p, int64_t count) {
  if (count >= 32) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if (count <= 0) return _mm256_setzero_si256();
  return _mm256_maskz_loadu_epi8(static_cast<__mmask32>((1ull << count) - 1), p);
}

inline __m512bh as_bh(__m512i v) { return reinterpret_cast<__m512bh&>(v); }

// 16x16 transpose of 32-bit elements.
inline void transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  // u[4i + c] holds, in 128-bit lane L, column 4L + c of rows 4i..4i+3.
  for (int c = 0; c < 4; ++c) {
    const __m512i s0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88);
    const __m512i s1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xDD);
    const __m512i s2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88);
    const __m512i s3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xDD);
    r[0 + c] = _mm512_shuffle_i32x4(s0, s2, 0x88);
    r[8 + c] = _mm512_shuffle_i32x4(s0, s2, 0xDD);
    r[4 + c] = _mm512_shuffle_i32x4(s1, s3, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(s1, s3, 0xDD);
  }
}

template <int MR>
void ukernel_t(int64_t kc, const uint16_t* a, int64_t lda, const uint16_t* b, const float* sa, int64_t ldsa,
               const float* sb, float* c, int64_t ldc) {
  __m512 f[MR][2];
  for (int i = 0; i < MR; ++i) f[i][0] = f[i][1] = _mm512_setzero_ps();
  const int64_t pairs = (kc + 1) / 2;
  for (int64_t kb = 0, kp0 = 0; kp0 < pairs; ++kb, kp0 += 64) {
    const int64_t kp1 = kp0 + 64 < pairs ? kp0 + 64 : pairs;
    __m512 s[MR][2];
    for (int i = 0; i < MR; ++i) s[i][0] = s[i][1] = _mm512_setzero_ps();
    for (int64_t kp = kp0; kp < kp1; ++kp) {
      const __m512bh b0 = as_bh(_mm512_loadu_si512(b + kp * 64));
      const __m512bh b1 = as_bh(_mm512_loadu_si512(b + kp * 64 + 32));
      for (int i = 0; i < MR; ++i) {
        int32_t pair;
        std::memcpy(&pair, a + i * lda + 2 * kp, sizeof(pair));
        const __m512bh av = as_bh(_mm512_set1_epi32(pair));
        s[i][0] = _mm512_dpbf16_ps(s[i][0], av, b0);
        s[i][1] = _mm512_dpbf16_ps(s[i][1], av, b1);
      }
    }
    const float sbk = sb[kb];
    for (int i = 0; i < MR; ++i) {
      const __m512 sc = _mm512_set1_ps(sa[i * ldsa + kb] * sbk);
      f[i][0] = _mm512_fmadd_ps(s[i][0], sc, f[i][0]);
      f[i][1] = _mm512_fmadd_ps(s[i][1], sc, f[i][1]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    float* row = c + i * ldc;
    _mm512_storeu_ps(row, _mm512_add_ps(_mm512_loadu_ps(row), f[i][0]));
    _mm512_storeu_ps(row + 16, _mm512_add_ps(_mm512_loadu_ps(row + 16), f[i][1]));
  }
}

struct Kern {
  using Elem = uint16_t;
  static constexpr int MR = 6, NR = 32;
  static constexpr int64_t kPad = 32;

  static int64_t b_panel_elems(int64_t kc) { return (kc + 1) / 2 * 64; }

  static void pack_a(const Problem& p, int64_t i0, int64_t mc, int64_t k0, int64_t kc, uint16_t* ap, int64_t ldap) {
    const __m512i table = subnormal_table();
    for (int64_t i = 0; i < mc; ++i) {
      const uint8_t* src = p.a + (i0 + i) * p.lda + k0;
      uint16_t* dst = ap + i * ldap;
      for (int64_t kk = 0; kk < ldap; kk += 32)
        _mm512_storeu_si512(dst + kk, widen(load_bytes(src + kk, kc - kk), table));
    }
  }

  static void pack_b(const Problem& p, int64_t j0, int64_t nc, int64_t k0, int64_t kc, uint16_t* bp) {
    const __m512i table = subnormal_table();
    const int64_t pairs = (kc + 1) / 2;
    const int64_t stride = b_panel_elems(kc);
    for (int64_t jp = 0; jp < nc; jp += 32) {
      uint16_t* panel = bp + (jp / 32) * stride;
      if (p.b_packed) {
        const uint8_t* src = p.b_packed + ((j0 + jp) / kPanelRows) * p.packed_pairs * kPanelPairBytes + (k0 / 2) * 64;
        for (int64_t kp = 0; kp < pairs; ++kp) {
          _mm512_storeu_si512(panel + kp * 64, widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + kp * 64)), table));
          _mm512_storeu_si512(panel + kp * 64 + 32,
                              widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + kp * 64 + 32)), table));
        }
        continue;
      }
      for (int h = 0; h < 2; ++h) {
        const int64_t jr0 = j0 + jp + h * 16;
        for (int64_t kk = 0; kk < kc; kk += 32) {
          __m512i r[16];
          for (int rr = 0; rr < 16; ++rr) {
            const int64_t j = jr0 + rr;
            r[rr] = j < p.n ? widen(load_bytes(p.b + j * p.ldb + k0 + kk, kc - kk), table) : _mm512_setzero_si512();
          }
          transpose16(r);
          const int64_t kp0 = kk / 2;
          const int64_t cols = pairs - kp0 < 16 ? pairs - kp0 : 16;
          for (int64_t cidx = 0; cidx < cols; ++cidx)
            _mm512_storeu_si512(panel + (kp0 + cidx) * 64 + h * 32, r[cidx]);
        }
      }
    }
  }

  static void ukernel(int mr, int64_t kc, const uint16_t* a, int64_t lda, const uint16_t* b, const float* sa,
                      int64_t ldsa, const float* sb, float* c, int64_t ldc) {
    switch (mr) {
      case 6: return ukernel_t<6>(kc, a, lda, b, sa, ldsa, sb, c, ldc);
      case 5: return ukernel_t<5>(kc, a, lda, b, sa, ldsa, sb, c, ldc);
      case 4: return ukernel_t<4>(kc, a, lda, b, sa, ldsa, sb, c, ldc);
      case 3: return ukernel_t<3>(kc, a, lda, b, sa, ldsa, sb, c, ldc);
      case 2: return ukernel_t<2>(kc, a, lda, b, sa, ldsa, sb, c, ldc);
      default: return ukernel_t<1>(kc, a, lda, b, sa, ldsa, sb, c, ldc);
    }
  }
};


#include "gemm/fp8_driver.hpp"

// Round to nearest even; NaN stays NaN (quieted).
inline uint16_t round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// Decode shapes (a few rows of A): each group of 4 rows of B is read once, 128 fp8 at a time,
// widened in registers and dotted with every row of A (pre-widened once, it is small). Lanes keep
// partial sums along K; the per-block scale is applied lane-wise (it is linear), and lanes are
// reduced once at the end.
constexpr int64_t kStreamMaxM = 16;

void run_stream(const Problem& p) {
  const int64_t nkb = (p.k + 127) / 128, kpad = nkb * 128;
  const __m512i table = subnormal_table();
  const int64_t groups = (p.n + 3) / 4;
  const int used = static_cast<int>(imin(imax(1, ridge::get_num_threads()), groups));
  Scratch scratch(1 + used);
  auto* aw = static_cast<uint16_t*>(scratch.alloc(0, p.m * kpad * 2, "gemm.fp8.stream_a"));
  for (int t = 0; t < used; ++t) scratch.alloc(1 + t, p.m * 64 * 4, "gemm.fp8.stream_acc");
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t kk = 0; kk < kpad; kk += 32)
      _mm512_storeu_si512(aw + i * kpad + kk, widen(load_bytes(p.a + i * p.lda + kk, p.k - kk), table));
#pragma omp parallel num_threads(used)
  {
    const int t = omp_get_thread_num();
    const int64_t g0 = groups * t / used, g1 = groups * (t + 1) / used;
    float* f = static_cast<float*>(scratch.get(1 + t));
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t j0 = g * 4;
      const uint8_t* rows[4];
      for (int jj = 0; jj < 4; ++jj) rows[jj] = p.b + imin(j0 + jj, p.n - 1) * p.ldb;
      std::memset(f, 0, sizeof(float) * static_cast<size_t>(p.m * 64));
      const float* sbrow = p.sb + (j0 / 128) * p.ldsb;
      for (int64_t kb = 0; kb < nkb; ++kb) {
        const int64_t k0 = kb * 128;
        __m512i bz[4][4];
        for (int jj = 0; jj < 4; ++jj)
          for (int c = 0; c < 4; ++c) bz[jj][c] = widen(load_bytes(rows[jj] + k0 + 32 * c, p.k - k0 - 32 * c), table);
        const float sbk = sbrow[kb];
        for (int64_t i = 0; i < p.m; ++i) {
          const uint16_t* ar = aw + i * kpad + k0;
          __m512 acc[4];
          for (int jj = 0; jj < 4; ++jj) acc[jj] = _mm512_setzero_ps();
          for (int c = 0; c < 4; ++c) {
            const __m512bh av = as_bh(_mm512_loadu_si512(ar + 32 * c));
            for (int jj = 0; jj < 4; ++jj) acc[jj] = _mm512_dpbf16_ps(acc[jj], av, as_bh(bz[jj][c]));
          }
          const __m512 sc = _mm512_set1_ps(p.sa[i * p.ldsa + kb] * sbk);
          float* fi = f + i * 64;
          for (int jj = 0; jj < 4; ++jj)
            _mm512_storeu_ps(fi + 16 * jj, _mm512_fmadd_ps(acc[jj], sc, _mm512_loadu_ps(fi + 16 * jj)));
        }
      }
      for (int64_t i = 0; i < p.m; ++i)
        for (int jj = 0; jj < 4 && j0 + jj < p.n; ++jj) {
          float v = _mm512_reduce_add_ps(_mm512_loadu_ps(f + i * 64 + 16 * jj));
          if (p.c) v += p.c[i * p.ldc + j0 + jj];
          if (p.d_bf16) static_cast<uint16_t*>(p.d)[i * p.ldd + j0 + jj] = round_bf16(v);
          else static_cast<float*>(p.d)[i * p.ldd + j0 + jj] = v;
        }
    }
  }
}

}  // namespace

void run_avx512bf16(const Problem& p) {
  if (!p.b_packed && p.m <= kStreamMaxM) return run_stream(p);
  run_panel<Kern>(p);
}

}  // namespace ridge::gemm::fp8
