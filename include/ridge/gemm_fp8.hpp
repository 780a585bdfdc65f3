// FP8 GEMM with fine-grained block scaling, DeepGEMM semantics, "nt" form:
//   D[m,n] = (C[m,n] +) sum_kb  sa[m,kb] * sb[n/128,kb] * sum_{k in block kb} A[m,k] * B[n,k]
//
// A is fp8 e4m3 [m,k] with fp32 scales [m, ceil(k/128)] (one per row per 128 columns, "1x128");
// B is fp8 e4m3 [n,k] with fp32 scales [ceil(n/128), ceil(k/128)] ("128x128" blocks). Each 128-wide
// K block is accumulated exactly in fp32 into a fresh partial sum, then promoted into the fp32
// accumulator with its two scales (two-level accumulation). The output is bf16 (rounded once, at
// the end) or fp32; C is fp32 and may alias an fp32 D exactly.
//
// Grouped (MoE) layouts group along M only: every group shares n and k.
//   contiguous: A [m_sum,k] holds the rows of all groups end to end, m_indices[row] is the row's
//               group or -1 for padding (skipped: its output row is left untouched); each aligned
//               block of m_alignment_for_contiguous_layout() rows holds one group (plus padding).
//   masked:     A [G, m_max, k], D [G, m_max, n]; only the first masked_m[g] rows of group g are
//               computed, the rest of D is left untouched. expected_m hints at the typical count.
//
// Shapes need not be multiples of any block. Bad shapes, strides, scale shapes, group indices or
// masks throw ridge::Error naming the argument. The path follows ridge::cpu::active_isa(): the
// AVX512_BF16 kernel (fp8 widened exactly to bf16 in registers, vdpbf16ps), fp32 FMA kernels for
// AVX-512 and AVX2, and the scalar reference. Threads follow ridge::get_num_threads().
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "ridge/core/cpu.hpp"
#include "ridge/core/format.hpp"
#include "ridge/core/memory.hpp"
#include "ridge/core/tensor.hpp"
#include "ridge/gemm_grouped.hpp"  // m_alignment_for_contiguous_layout

namespace ridge::gemm {

// Width of a scaling block along K (and along N for B): 128, as in DeepGEMM.
inline constexpr int64_t kFp8Block = 128;
inline constexpr int64_t fp8_scale_blocks(int64_t len) {
  return (len + kFp8Block - 1) / kFp8Block;
}

// ---- dense ----
void fp8_gemm_nt(MatrixView<const fp8_e4m3> a, MatrixView<const float> a_scales, MatrixView<const fp8_e4m3> b,
                 MatrixView<const float> b_scales, MatrixView<bf16> d, MatrixView<const float> c = {});
void fp8_gemm_nt(MatrixView<const fp8_e4m3> a, MatrixView<const float> a_scales, MatrixView<const fp8_e4m3> b,
                 MatrixView<const float> b_scales, MatrixView<float> d, MatrixView<const float> c = {});

// Weights packed once, still fp8 (one byte per element): panels of 32 rows of B with pairs of K
// interleaved, the layout the micro-kernels widen straight from. Holds a copy of the scales.
class PackedFp8B {
 public:
  PackedFp8B();
  ~PackedFp8B();
  PackedFp8B(PackedFp8B&&) noexcept;
  PackedFp8B& operator=(PackedFp8B&&) noexcept;

  static PackedFp8B pack(MatrixView<const fp8_e4m3> b, MatrixView<const float> b_scales);
  int64_t n() const;
  int64_t k() const;
  bool empty() const;
  size_t bytes() const;  // packed fp8 bytes (scales excluded)

  struct Impl;
  const Impl& impl() const;

 private:
  std::unique_ptr<Impl> impl_;
};

void fp8_gemm_nt(MatrixView<const fp8_e4m3> a, MatrixView<const float> a_scales, const PackedFp8B& b,
                 MatrixView<bf16> d, MatrixView<const float> c = {});
void fp8_gemm_nt(MatrixView<const fp8_e4m3> a, MatrixView<const float> a_scales, const PackedFp8B& b,
                 MatrixView<float> d, MatrixView<const float> c = {});

// ---- grouped along M (MoE) ----
// D bf16 (DeepGEMM's) or fp32, as the dense ones.
// b: [G, n, k]; b_scales: [G, ceil(n/128), ceil(k/128)]; a_scales: [m_sum, ceil(k/128)].
void m_grouped_fp8_gemm_nt_contiguous(MatrixView<const fp8_e4m3> a, MatrixView<const float> a_scales,
                                      TensorView<const fp8_e4m3> b, TensorView<const float> b_scales,
                                      MatrixView<bf16> d, std::span<const int32_t> m_indices);
void m_grouped_fp8_gemm_nt_contiguous(MatrixView<const fp8_e4m3> a, MatrixView<const float> a_scales,
                                      TensorView<const fp8_e4m3> b, TensorView<const float> b_scales,
                                      MatrixView<float> d, std::span<const int32_t> m_indices);
// a: [G, m_max, k]; a_scales: [G, m_max, ceil(k/128)]; d: [G, m_max, n]; masked_m: [G].
void m_grouped_fp8_gemm_nt_masked(TensorView<const fp8_e4m3> a, TensorView<const float> a_scales,
                                  TensorView<const fp8_e4m3> b, TensorView<const float> b_scales,
                                  TensorView<bf16> d, std::span<const int32_t> masked_m, int64_t expected_m);
void m_grouped_fp8_gemm_nt_masked(TensorView<const fp8_e4m3> a, TensorView<const float> a_scales,
                                  TensorView<const fp8_e4m3> b, TensorView<const float> b_scales,
                                  TensorView<float> d, std::span<const int32_t> masked_m, int64_t expected_m);

// ---- grouped along M, each group's B packed once ----
// The same layouts with B as one PackedFp8B per group (b[g]: PackedFp8B::pack of group g's [n, k] and its
// 128x128 scales), as DeepGEMM takes B per group: an MoE model's experts, packed at load, read as the
// dense FP8 linears' packed weights do (the decode kernels widen straight from the panels). Every b[g]
// has the n of b[0] and k = the columns of a. Contiguous: the groups are b's entries (m_indices in
// [-1, b.size())); masked: a's first dimension, which b.size() must equal. A group with no rows is not
// computed and its b[g] not read. The bits are those of a loop of the packed fp8_gemm_nt, one call per
// group, at any thread count (against the raw-B grouped GEMMs above, an fp32 D of 1..4-row groups may
// differ in the last bits: their small-m kernels sum in another order).
void m_grouped_fp8_gemm_nt_contiguous(MatrixView<const fp8_e4m3> a, MatrixView<const float> a_scales,
                                      std::span<const PackedFp8B> b, MatrixView<bf16> d,
                                      std::span<const int32_t> m_indices);
void m_grouped_fp8_gemm_nt_contiguous(MatrixView<const fp8_e4m3> a, MatrixView<const float> a_scales,
                                      std::span<const PackedFp8B> b, MatrixView<float> d,
                                      std::span<const int32_t> m_indices);
void m_grouped_fp8_gemm_nt_masked(TensorView<const fp8_e4m3> a, TensorView<const float> a_scales,
                                  std::span<const PackedFp8B> b, TensorView<bf16> d,
                                  std::span<const int32_t> masked_m, int64_t expected_m);
void m_grouped_fp8_gemm_nt_masked(TensorView<const fp8_e4m3> a, TensorView<const float> a_scales,
                                  std::span<const PackedFp8B> b, TensorView<float> d,
                                  std::span<const int32_t> masked_m, int64_t expected_m);

// ---- quantization ----
// scale = max(amax, 1e-4) / 448 over each block, q = RNE(x / scale) (saturating to +-448).
// per_token: scales [m, ceil(k/128)] (1x128); per_block: scales [ceil(m/128), ceil(k/128)] (128x128).
// The last block along either axis may be shorter than 128.
// Fp8Scales::ue8m0 is DeepGEMM's power-of-two recipe (the scale factors Blackwell's FP8 MMA reads as an
// 8-bit exponent, UE8M0): each scale is rounded up to the least power of two >= amax / 448, and the
// values divided by it exactly. Still stored as fp32 here (a power of two is exact in fp32), so every
// GEMM takes either kind.
inline constexpr float kFp8AmaxFloor = 1e-4f;
enum class Fp8Scales { fp32, ue8m0 };
void per_token_cast_to_fp8(MatrixView<const float> x, MatrixView<fp8_e4m3> q, MatrixView<float> scales,
                           Fp8Scales kind = Fp8Scales::fp32);
void per_block_cast_to_fp8(MatrixView<const float> x, MatrixView<fp8_e4m3> q, MatrixView<float> scales,
                           Fp8Scales kind = Fp8Scales::fp32);

// An owning quantized matrix (values + scales), for callers that do not manage buffers.
struct Fp8Matrix {
  Buffer<fp8_e4m3> values;
  Buffer<float> scales;
  int64_t rows = 0, cols = 0, scale_rows = 0, scale_cols = 0;
  MatrixView<const fp8_e4m3> view() const { return {values.data(), rows, cols, cols}; }
  MatrixView<const float> scale_view() const { return {scales.data(), scale_rows, scale_cols, scale_cols}; }
};
Fp8Matrix per_token_cast_to_fp8(MatrixView<const float> x, Fp8Scales kind = Fp8Scales::fp32);
Fp8Matrix per_block_cast_to_fp8(MatrixView<const float> x, Fp8Scales kind = Fp8Scales::fp32);

// Scalar reference twin: plain loops with the same two-level accumulation, fp32 output before
// any rounding (what every optimized path is tested against).
void fp8_gemm_nt_reference(MatrixView<const fp8_e4m3> a, MatrixView<const float> a_scales,
                           MatrixView<const fp8_e4m3> b, MatrixView<const float> b_scales,
                           MatrixView<float> d, MatrixView<const float> c = {});

}  // namespace ridge::gemm
