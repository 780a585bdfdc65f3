// The packers of the plain x86-64 build: fp32/bf16 operands (row-major or K-major) into the
// micro-kernels' panels (f32 [k][R] or bf16 pairs [k/2][R][2]), and fp8 operands widened to fp32
// panels through the e4m3 table (exact) for the FP8 kernels without AVX512_BF16. The AVX-512 word
// transposes they can call are in the ISA files (pack_words_avx512, pack_kmajor_pairs); the FP8
// AVX512_BF16 packers, which widen fp8 to bf16 pairs in registers, are in fp8_pack_avx512bf16.inc.
#include <algorithm>
#include <cstring>

#include "gemm/kernel.hpp"

namespace ridge::gemm::detail {

size_t panel_elt(Panel p) {
  return p == Panel::f32 ? 4 : 2;
}
int64_t panel_k(Panel p, int64_t k) {
  return p == Panel::f32 ? k : p == Panel::amx ? (k + 31) / 32 * 32 : (k + 1) / 2 * 2;
}

namespace {

int64_t ceil_div(int64_t x, int64_t m) {
  return (x + m - 1) / m;
}

// Copies `count` rows of src (row-major, ld elements), columns [p0, p0 + kc), into panels of R
// rows: panel q holds rows [q*R, q*R + R) as [k][R] (f32) or [k/2][R][2] (bf16 pairs); rows past
// `count` and the odd-K pad are zero. Panel stride: R * panel_k(kc) elements.
void pack_panels(const void* src, bool src_bf16, int64_t ld, int64_t count, int64_t p0, int64_t kc, int R,
                 Panel panel, void* dst, PackWords pack_words, PackWords pack_widen) {
  // K is walked in chunks so the R destination rows being transposed into stay in L1 (a whole
  // deep panel does not; experiment 3 in docs/gemm.md, dense GEMM experiments).
  constexpr int64_t kChunk = 64;
  const int64_t kp = panel_k(panel, kc);
  const int64_t npanels = ceil_div(count, R);
  for (int64_t q = 0; q < npanels; ++q) {
    const int64_t r0 = q * R;
    const int rows = static_cast<int>(std::min<int64_t>(R, count - r0));
    if (pack_words && panel == Panel::f32 && !src_bf16) {
      pack_words(static_cast<const float*>(src) + r0 * ld + p0, ld * 4, rows, kc, R,
                 reinterpret_cast<uint32_t*>(static_cast<float*>(dst) + q * R * kp));
      continue;
    }
    if (pack_widen && panel == Panel::f32 && src_bf16) {
      pack_widen(static_cast<const uint16_t*>(src) + r0 * ld + p0, ld * 2, rows, kc, R,
                 reinterpret_cast<uint32_t*>(static_cast<float*>(dst) + q * R * kp));
      continue;
    }
    if (panel == Panel::f32) {
      float* out = static_cast<float*>(dst) + q * R * kp;
      for (int64_t c0 = 0; c0 < kc; c0 += kChunk) {
        const int64_t c1 = std::min(kc, c0 + kChunk);
        for (int r = 0; r < rows; ++r) {
          if (src_bf16) {
            const uint16_t* s = static_cast<const uint16_t*>(src) + (r0 + r) * ld + p0;
            for (int64_t p = c0; p < c1; ++p) {
              const uint32_t w = static_cast<uint32_t>(s[p]) << 16;
              std::memcpy(&out[p * R + r], &w, 4);
            }
          } else {
            const float* s = static_cast<const float*>(src) + (r0 + r) * ld + p0;
            for (int64_t p = c0; p < c1; ++p) out[p * R + r] = s[p];
          }
        }
        for (int r = rows; r < R; ++r)
          for (int64_t p = c0; p < c1; ++p) out[p * R + r] = 0.0f;
      }
    } else {
      // bf16 pairs: each (k, k+1) pair is one 32-bit word, so this is a 32-bit transpose.
      uint32_t* out = reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(dst) + q * R * kp);
      const int64_t full = kc / 2;
      if (pack_words)
        pack_words(static_cast<const uint16_t*>(src) + r0 * ld + p0, ld * 2, rows, full, R, out);
      for (int64_t c0 = 0; !pack_words && c0 < full; c0 += kChunk) {
        const int64_t c1 = std::min(full, c0 + kChunk);
        for (int r = 0; r < rows; ++r) {
          const uint16_t* s = static_cast<const uint16_t*>(src) + (r0 + r) * ld + p0;
          for (int64_t p = c0; p < c1; ++p) {
            uint32_t w;
            std::memcpy(&w, s + 2 * p, 4);
            out[p * R + r] = w;
          }
        }
        for (int r = rows; r < R; ++r)
          for (int64_t p = c0; p < c1; ++p) out[p * R + r] = 0;
      }
      if (kc & 1) {
        for (int r = 0; r < R; ++r)
          out[full * R + r] = r < rows ? static_cast<const uint16_t*>(src)[(r0 + r) * ld + p0 + kc - 1] : 0;
      }
    }
  }
}

// pack_panels for an operand stored K-major ([k, rows], ld elements: A of tn/tt, B of nn/tn), src
// at (k = 0, row = 0). The panels are [k][R] (or [k/2][R][2]), so each k step copies a contiguous
// run of rows: no transpose; bf16 pairs interleave two source rows. k is the outer loop so each
// source row is used up while in L1: panel by panel, a power-of-two ld would map every row's
// slice to one L1 set and an R = 14 panel would read each line from L3 about twice.
void pack_panels_kmajor(const void* src, bool src_bf16, int64_t ld, int64_t count, int64_t kc, int R,
                        Panel panel, void* dst) {
  const int64_t kp = panel_k(panel, kc);
  const int64_t npanels = ceil_div(count, R);
  const auto* s16 = static_cast<const uint16_t*>(src);
  const auto* s32 = static_cast<const float*>(src);
  if (panel == Panel::f32) {
    for (int64_t p = 0; p < kc; ++p) {
      for (int64_t q = 0; q < npanels; ++q) {
        const int64_t r0 = q * R;
        const int rows = static_cast<int>(std::min<int64_t>(R, count - r0));
        float* out = static_cast<float*>(dst) + q * R * kp + p * R;
        if (src_bf16) {
          const uint16_t* s = s16 + p * ld + r0;
          for (int r = 0; r < rows; ++r) {
            const uint32_t w = static_cast<uint32_t>(s[r]) << 16;
            std::memcpy(&out[r], &w, 4);
          }
        } else {
          std::memcpy(out, s32 + p * ld + r0, static_cast<size_t>(rows) * 4);
        }
        for (int r = rows; r < R; ++r) out[r] = 0.0f;
      }
    }
    return;
  }
  for (int64_t p = 0; p < kc; p += 2) {
    const uint16_t* lo = s16 + p * ld;
    const uint16_t* hi = p + 1 < kc ? lo + ld : nullptr;  // odd K: the pad half is 0
    for (int64_t q = 0; q < npanels; ++q) {
      const int64_t r0 = q * R;
      const int rows = static_cast<int>(std::min<int64_t>(R, count - r0));
      uint32_t* out = reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(dst) + q * R * kp) + p / 2 * R;
      if (hi) {
        for (int r = 0; r < rows; ++r) out[r] = lo[r0 + r] | static_cast<uint32_t>(hi[r0 + r]) << 16;
      } else {
        for (int r = 0; r < rows; ++r) out[r] = lo[r0 + r];
      }
      for (int r = rows; r < R; ++r) out[r] = 0;
    }
  }
}

}  // namespace

void pack_dense(const KernelInfo& ki, const Operand& src, int64_t r0, int64_t count, int64_t p0, int64_t kc,
                int R, void* dst, bool fast) {
  const bool src_bf16 = src.elem == Elem::bf16;
  const size_t in_elt = src_bf16 ? 2 : 4;
  const std::byte* b = static_cast<const std::byte*>(src.data);
  const int64_t ld = src.ld;
  const PackWords pack_words = fast ? ki.pack_words : nullptr;
  const PackKmajorPairs pack_pairs = fast && ki.pack_words ? ki.pack_kmajor_pairs : nullptr;
  if (src.kmajor && pack_pairs && ki.panel == Panel::bf16pair) {
    pack_pairs(reinterpret_cast<const uint16_t*>(b + (p0 * ld + r0) * in_elt), ld, count, kc, R,
               static_cast<uint32_t*>(dst));
  } else if (src.kmajor) {
    pack_panels_kmajor(b + (p0 * ld + r0) * in_elt, src_bf16, ld, count, kc, R, ki.panel, dst);
  } else {
    pack_panels(b + r0 * ld * in_elt, src_bf16, ld, count, p0, kc, R, ki.panel, dst, pack_words,
                fast ? ki.pack_widen_bf16 : nullptr);
  }
}

void pack_fp8_lut(const KernelInfo&, const Operand& src, int64_t r0, int64_t count, int64_t p0, int64_t kc,
                  int R, void* dst, bool) {
  const float* lut = fp8::e4m3_table();
  const auto* bytes = static_cast<const uint8_t*>(src.data);
  const int64_t npanels = ceil_div(count, R);
  for (int64_t q = 0; q < npanels; ++q) {
    float* panel = static_cast<float*>(dst) + q * R * kc;
    for (int r = 0; r < R; ++r) {
      const int64_t row = q * R + r, j = r0 + row;
      if (row >= count) {
        for (int64_t kk = 0; kk < kc; ++kk) panel[kk * R + r] = 0.0f;
      } else if (src.fp8_panels) {
        const uint8_t* s =
            bytes + (j / kFp8PanelRows) * src.ld * kFp8PanelPairBytes + (j % kFp8PanelRows) * 2;
        for (int64_t kk = 0; kk < kc; ++kk)
          panel[kk * R + r] = lut[s[((p0 + kk) / 2) * kFp8PanelPairBytes + ((p0 + kk) & 1)]];
      } else {
        const uint8_t* s = bytes + j * src.ld + p0;
        for (int64_t kk = 0; kk < kc; ++kk) panel[kk * R + r] = lut[s[kk]];
      }
    }
  }
}

}  // namespace ridge::gemm::detail
