// AVX512_BF16 micro-kernel, 14x32 over K pairs: vdpbf16ps multiplies two bf16 pairs per fp32
// lane and adds both products into the lane, so the panels interleave K in pairs: A holds one
// 32-bit (k, k+1) word per row, broadcast; B holds 32 columns x 2 k per zmm pair. 28 accumulators
// cover the instruction's latency at two per cycle.
// GCC 12 reports its own intrinsics' undefined-value temporaries as (maybe-)uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "gemm/kernel.hpp"

namespace ridge::gemm::detail {
namespace {

constexpr int kMR = 14;
constexpr int kNR = 32;
// The most rows of A the small-m kernels take (small_m_lanes.inc past 16): at 32-64 rows they ran
// 1.0-1.4x the blocked path (docs/gemm.md, 17..64 rows).
constexpr int64_t kSmallMRows = 64;

#include "simd/scalar.inc"
#include "simd/avx512.inc"
#include "gemm/epilogue_avx512.inc"

template <int M>
void ukernel(int64_t kc, const void* a_panel, const void* b_panel, int /*mr*/, int nr, const Scales&,
             const Tile& t) {
  const uint32_t* a = static_cast<const uint32_t*>(a_panel);
  const __m512bh* b = static_cast<const __m512bh*>(b_panel);
  __m512 c0[M], c1[M];
#pragma GCC unroll 14
  for (int i = 0; i < M; ++i) {
    c0[i] = _mm512_setzero_ps();
    c1[i] = _mm512_setzero_ps();
  }
  const int64_t pairs = (kc + 1) / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    const __m512bh b0 = b[0];
    const __m512bh b1 = b[1];
#pragma GCC unroll 14
    for (int i = 0; i < M; ++i) {
      const __m512bh ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[i]));
      c0[i] = _mm512_dpbf16_ps(c0[i], ai, b0);
      c1[i] = _mm512_dpbf16_ps(c1[i], ai, b1);
    }
    a += kMR;
    b += 2;
  }
  store_tile_x32<M>(c0, c1, nr, t);
}

#include "gemm/ukernel_rows.inc"

#include "gemm/dot_bf16_avx512bf16.inc"
#include "gemm/small_m_avx512.inc"

// Decode shapes of 1..4 rows (small_m_avx512.inc).
void small_m(const SmallM& s, int64_t n0, int64_t n1, const Tile& t) {
  small_m_blocks<DotBf16>(s.m, n0, n1, s.k, s.a, s.lda, s.b, s.ldb, t,
                          rows_in_address_order(s.m, s.k, sizeof(uint16_t), sizeof(uint16_t)));
}

// acc += a . broadcast(*b), the broadcast embedded in the memory operand ({1toN}); GCC's separate
// vpbroadcastd competes with vdpbf16ps for Zen 4's vector pipes.
inline void dp_bcast(__m512& acc, __m512bh a, const void* b) {
  __asm__("vdpbf16ps %[b]%{1to16%}, %[a], %[acc]"
          : [acc] "+v"(acc)
          : [a] "v"(a), [b] "m"(*static_cast<const uint32_t*>(b)));
}
inline void dp_bcast(__m256& acc, __m256bh a, const void* b) {
  __asm__("vdpbf16ps %[b]%{1to8%}, %[a], %[acc]"
          : [acc] "+v"(acc)
          : [a] "v"(a), [b] "m"(*static_cast<const uint32_t*>(b)));
}

#include "gemm/transpose_avx512.inc"

inline void transpose16_ps(__m512 v[16]) {
  __m512i r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_castps_si512(v[i]);
  transpose16(r);
  for (int i = 0; i < 16; ++i) v[i] = _mm512_castsi512_ps(r[i]);
}

// D[:, j0 .. j0+16) for m <= L rows held in the lanes: acc[j] (one register per column of B) sums
// A^T[pair] . broadcast(B[j] pair) over all of K, so B is read once and needs no transposition, and
// A^T (small) was transposed once. B's 16 rows are copied 256 k at a time into a compact buffer
// first: read in place, rows a power-of-two apart map to one L1 set and evicted each other
// (0.3x oneDNN at k = 16384). The next block's rows are prefetched during the copy.
template <int L>
struct LaneReg {
  using R = __m512;
  using A = __m512bh;
};
template <>
struct LaneReg<8> {
  using R = __m256;
  using A = __m256bh;
};

// k per copied chunk: 16 rows of bf16 in a quarter of L1 (256 on a 32 KiB L1), a multiple of 32.
inline int64_t lane_chunk() {
  const int64_t l1 = cpu::cache_sizes().l1d;
  return imin(1024, imax(64, l1 / 4 / 32 / 32 * 32));
}

// Copies 16 rows of B, k in [k0, k0 + chunk), into buf (zero past k); prefetches the rows of
// the next column block.
inline void copy_chunk(int64_t k, int64_t k0, int64_t chunk, const uint16_t* const br[16], int64_t ldb,
                       uint16_t* buf) {
  for (int j = 0; j < 16; ++j) {
    for (int64_t x = 0; x < chunk; x += 32) {
      const int64_t left = k - k0 - x;
      const __mmask32 km = left >= 32 ? ~__mmask32(0) : left <= 0 ? __mmask32(0) : (__mmask32(1) << left) - 1;
      _mm512_storeu_si512(buf + j * chunk + x, _mm512_maskz_loadu_epi16(km, br[j] + k0 + x));
      if (left > 0) _mm_prefetch(reinterpret_cast<const char*>(br[j] + 16 * ldb + k0 + x), _MM_HINT_T1);
    }
  }
}

// The whole block in one function, accumulators passed through the chunk loop by value, so GCC
// keeps them in registers (an array live across the copy loop was spilled: a load and a store
// around every product).
template <int L>
void lanes_block(int64_t k, int64_t chunk, const uint32_t* at, const uint16_t* const br[16], int64_t ldb,
                 uint16_t* buf, __m512 out[16]) {
  using R = typename LaneReg<L>::R;
  R a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15;
  if constexpr (L == 16)
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = a8 = a9 = a10 = a11 = a12 = a13 = a14 = a15 = _mm512_setzero_ps();
  else
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = a8 = a9 = a10 = a11 = a12 = a13 = a14 = a15 = _mm256_setzero_ps();
  const uint32_t* b32 = reinterpret_cast<const uint32_t*>(buf);
  const int64_t S = chunk / 2;
  for (int64_t k0 = 0; k0 < k; k0 += chunk) {
    copy_chunk(k, k0, chunk, br, ldb, buf);
    const int64_t np = imin(chunk, k - k0 + 1) / 2;
    const uint32_t* ap = at + (k0 / 2) * 16;
    for (int64_t kp = 0; kp < np; ++kp) {
      typename LaneReg<L>::A a;
      if constexpr (L == 16) {
        const __m512i v = _mm512_loadu_si512(ap + kp * 16);
        a = reinterpret_cast<const __m512bh&>(v);
      } else {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ap + kp * 16));
        a = reinterpret_cast<const __m256bh&>(v);
      }
      const uint32_t* bp = b32 + kp;
      dp_bcast(a0, a, bp + 0 * S);
      dp_bcast(a1, a, bp + 1 * S);
      dp_bcast(a2, a, bp + 2 * S);
      dp_bcast(a3, a, bp + 3 * S);
      dp_bcast(a4, a, bp + 4 * S);
      dp_bcast(a5, a, bp + 5 * S);
      dp_bcast(a6, a, bp + 6 * S);
      dp_bcast(a7, a, bp + 7 * S);
      dp_bcast(a8, a, bp + 8 * S);
      dp_bcast(a9, a, bp + 9 * S);
      dp_bcast(a10, a, bp + 10 * S);
      dp_bcast(a11, a, bp + 11 * S);
      dp_bcast(a12, a, bp + 12 * S);
      dp_bcast(a13, a, bp + 13 * S);
      dp_bcast(a14, a, bp + 14 * S);
      dp_bcast(a15, a, bp + 15 * S);
    }
  }
  const R acc[16] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15};
  for (int j = 0; j < 16; ++j) {
    if constexpr (L == 16)
      out[j] = acc[j];
    else
      out[j] = _mm512_castps256_ps512(acc[j]);
  }
}

// Decode batches of 5..16 rows (rows in the vector lanes; 5..8 in ymm, which Zen 4 issues two per
// cycle, so no lane is wasted). The 4x4 dot-product blocks of small_m re-read A from L2 for every
// 4 columns and pay a horizontal reduction per output; this reads each operand once.
void small_m_lanes(const SmallM& s, int64_t n0, int64_t n1, const Tile& t) {
  const int64_t m = s.m, k = s.k, lda = s.lda, ldb = s.ldb;
  const uint16_t* a = static_cast<const uint16_t*>(s.a);
  const uint16_t* b = static_cast<const uint16_t*>(s.b);
  const int64_t full = k / 2, pairs = (k + 1) / 2;
  const int64_t chunk = lane_chunk();
  // A^T, then the B chunk buffer, in the thread's workspace.
  const size_t at_bytes = static_cast<size_t>(pairs * 16 * 4 + 63) / 64 * 64;
  std::byte* ws = thread_scratch(at_bytes + static_cast<size_t>(16 * chunk * 2));
  auto* at = reinterpret_cast<uint32_t*>(ws);
  auto* buf = reinterpret_cast<uint16_t*>(ws + at_bytes);
  for (int64_t kp = 0; kp < pairs; ++kp)
    for (int i = 0; i < 16; ++i) {
      uint32_t w = 0;
      if (i < m) {
        if (kp < full)
          std::memcpy(&w, a + i * lda + 2 * kp, 4);
        else
          w = a[i * lda + 2 * kp];
      }
      at[kp * 16 + i] = w;
    }
  for (int64_t j0 = n0; j0 < n1; j0 += 16) {
    const int nj = static_cast<int>(imin(16, n1 - j0));
    const uint16_t* br[16];
    for (int j = 0; j < 16; ++j) br[j] = b + (j0 + imin(j, nj - 1)) * ldb;
    __m512 v[16];
    if (m > 8)
      lanes_block<16>(k, chunk, at, br, ldb, buf, v);
    else
      lanes_block<8>(k, chunk, at, br, ldb, buf, v);
    transpose16_ps(v);  // v[i] = row i, columns j0..j0+15
    alignas(64) float out[16][16];
    for (int i = 0; i < m; ++i) _mm512_store_ps(out[i], v[i]);
    store_tile_generic(&out[0][0], 16, static_cast<int>(m), nj, tile_at(t, 0, j0));
  }
}

// 17..64 rows (small_m_lanes.inc): row blocks of 16 over each chunk of B, the lanes of the kernel above.
struct LanesBf16 {
  using E = uint16_t;
  static constexpr int kWordK = 2;
  static __m512i words(const uint16_t* p, int64_t left) {
    const __mmask32 km = left >= 32 ? ~__mmask32(0) : left <= 0 ? __mmask32(0) : (__mmask32(1) << left) - 1;
    return _mm512_maskz_loadu_epi16(km, p);
  }
  static void madd(__m512& acc, __m512i a, const uint32_t* b) { dp_bcast(acc, (__m512bh)a, b); }
  static void madd(__m256& acc, __m256i a, const uint32_t* b) { dp_bcast(acc, (__m256bh)a, b); }
};

#include "gemm/small_m_lanes.inc"
#include "gemm/small_m_lanes_avx512.inc"

void small_m_dispatch(const SmallM& s, int64_t n0, int64_t n1, const Tile& t) {
  if (s.m > 16) return small_m_lanes_rows<Lanes512<LanesBf16>>(s, n0, n1, t);
  if (s.m >= 5) return small_m_lanes(s, n0, n1, t);
  small_m(s, n0, n1, t);
}

// A K-major operand's two k rows zero-extended to 32-bit lanes and merged: each word is a
// (k, k+1) pair, 16 rows per step, masked at the panel's last rows (and its zero padding).
void pack_kmajor_pairs(const uint16_t* src, int64_t ld, int64_t count, int64_t kc, int R, uint32_t* dst) {
  const int64_t words = (kc + 1) / 2;
  const int64_t npanels = (count + R - 1) / R;
  for (int64_t p = 0; p < kc; p += 2) {
    const uint16_t* lo = src + p * ld;
    const uint16_t* hi = p + 1 < kc ? lo + ld : nullptr;
    for (int64_t q = 0; q < npanels; ++q) {
      const int64_t r0 = q * R;
      const int rows = static_cast<int>(imin(R, count - r0));
      uint32_t* out = dst + q * R * words + p / 2 * R;
      for (int r = 0; r < R; r += 16) {
        const int n = static_cast<int>(imin(imax(rows - r, 0), 16)), w = static_cast<int>(imin(R - r, 16));
        const __mmask16 load = static_cast<__mmask16>((1u << n) - 1),
                        store = static_cast<__mmask16>((1u << w) - 1);
        __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(load, lo + r0 + r));
        if (hi) {
          const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(load, hi + r0 + r));
          v = _mm512_or_si512(v, _mm512_slli_epi32(h, 16));
        }
        _mm512_mask_storeu_epi32(out + r, store, v);
      }
    }
  }
}

}  // namespace

KernelInfo kernel_bf16_avx512bf16() {
  return KernelInfo{.name = "bf16_avx512bf16_14x32",
                    .mr = kMR,
                    .nr = kNR,
                    .panel = Panel::bf16pair,
                    .ukernel = &ukernel_dispatch,
                    .pack_a = &pack_dense,
                    .pack_b = &pack_dense,
                    .small_m = &small_m_dispatch,
                    .small_m_elem = Elem::bf16,
                    .small_m_rows = kSmallMRows,
                    .pack_words = &pack_words_avx512,
                    .pack_kmajor_pairs = &pack_kmajor_pairs};
}

}  // namespace ridge::gemm::detail
