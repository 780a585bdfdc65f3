// Grouped GEMMs for Mixture-of-Experts layers, fp32 and bf16 inputs, with DeepGEMM's names and argument
// order (the FP8 ones are in gemm_fp8.hpp). One group per expert; every group has its own B.
//
// M-grouped (the experts' forward and dX): groups split the rows of A and D, and share n and k.
//   contiguous: A [m_sum, k] holds the rows of all groups end to end; m_indices[row] is the row's group,
//               or -1 for padding (skipped: its row of D is left untouched). m_sum is a multiple of
//               m_alignment_for_contiguous_layout() and each aligned block of that many rows holds one
//               group plus padding (the layout model::moe::contiguous_layout plans).
//     nt: B [G, n, k]  D[r] = A[r] B[g]^T   (the forward: tokens times an expert's weight as stored)
//     nn: B [G, k, n]  D[r] = A[r] B[g]     (dX = dY W: the forward's weight read as it is stored)
//   masked:     A [G, m_max, k], D [G, m_max, n]; group g computes its first masked_m[g] rows, the rest
//               of D is left untouched (decode: a fixed buffer, per-expert counts). expected_m, the
//               typical count, is checked (>= 0) but not needed: blocking follows each group's rows.
// D is fp32 or bf16 (rounded once, at the end); accumulation is fp32.
//
// K-grouped (the experts' dW = dY^T X): groups split the rows of A and B, the depth K of the product.
//   tn contiguous: A [k_sum, m], B [k_sum, n], D [G, m, n] fp32: D[g] = (C[g] +) A_g^T B_g, A_g and B_g
//               the rows r with k_indices[r] == g. k_indices follows the contiguous layout's rule above
//               (pass the forward's m_indices) and each group's rows are one run; padding rows (-1) are
//               never read, so they may hold anything. A group with no rows gets D[g] = C[g], or 0
//               without C. C is [G, m, n] fp32 and may be D itself (same pointer and strides: dW += ...).
//
// The groups run as one piece of work: one list of rectangles of D over all groups, which the threads
// take as they free up (docs/gemm.md, "Grouped GEMMs"). Each element of D is computed by one thread in
// the order the dense driver uses for its group alone, so the bits do not depend on the thread count and
// equal a loop of the dense GEMMs, one per group. The path follows ridge::cpu::active_isa() (and the
// dispatch policy), threads ridge::get_num_threads(). Bad shapes, strides, group indices, masks or an
// output overlapping an input throw ridge::Error naming the argument.
#pragma once

#include <cstdint>
#include <span>

#include "ridge/core/format.hpp"
#include "ridge/core/tensor.hpp"

namespace ridge::gemm {

// Rows per aligned block of the contiguous grouped layout.
int64_t m_alignment_for_contiguous_layout();

// ---- M-grouped, contiguous: a [m_sum, k], b [G, n, k] (nt) or [G, k, n] (nn), d [m_sum, n] ----
void m_grouped_f32_gemm_nt_contiguous(MatrixView<const float> a, TensorView<const float> b,
                                      MatrixView<float> d, std::span<const int32_t> m_indices);
void m_grouped_f32_gemm_nt_contiguous(MatrixView<const float> a, TensorView<const float> b,
                                      MatrixView<bf16> d, std::span<const int32_t> m_indices);
void m_grouped_bf16_gemm_nt_contiguous(MatrixView<const bf16> a, TensorView<const bf16> b,
                                       MatrixView<float> d, std::span<const int32_t> m_indices);
void m_grouped_bf16_gemm_nt_contiguous(MatrixView<const bf16> a, TensorView<const bf16> b, MatrixView<bf16> d,
                                       std::span<const int32_t> m_indices);
void m_grouped_f32_gemm_nn_contiguous(MatrixView<const float> a, TensorView<const float> b,
                                      MatrixView<float> d, std::span<const int32_t> m_indices);
void m_grouped_f32_gemm_nn_contiguous(MatrixView<const float> a, TensorView<const float> b,
                                      MatrixView<bf16> d, std::span<const int32_t> m_indices);
void m_grouped_bf16_gemm_nn_contiguous(MatrixView<const bf16> a, TensorView<const bf16> b,
                                       MatrixView<float> d, std::span<const int32_t> m_indices);
void m_grouped_bf16_gemm_nn_contiguous(MatrixView<const bf16> a, TensorView<const bf16> b, MatrixView<bf16> d,
                                       std::span<const int32_t> m_indices);

// ---- M-grouped, masked: a [G, m_max, k], b [G, n, k], d [G, m_max, n], masked_m [G] ----
void m_grouped_f32_gemm_nt_masked(TensorView<const float> a, TensorView<const float> b, TensorView<float> d,
                                  std::span<const int32_t> masked_m, int64_t expected_m);
void m_grouped_f32_gemm_nt_masked(TensorView<const float> a, TensorView<const float> b, TensorView<bf16> d,
                                  std::span<const int32_t> masked_m, int64_t expected_m);
void m_grouped_bf16_gemm_nt_masked(TensorView<const bf16> a, TensorView<const bf16> b, TensorView<float> d,
                                   std::span<const int32_t> masked_m, int64_t expected_m);
void m_grouped_bf16_gemm_nt_masked(TensorView<const bf16> a, TensorView<const bf16> b, TensorView<bf16> d,
                                   std::span<const int32_t> masked_m, int64_t expected_m);

// ---- K-grouped, contiguous: a [k_sum, m], b [k_sum, n], d (and c) [G, m, n] fp32, k_indices [k_sum] ----
void k_grouped_f32_gemm_tn_contiguous(MatrixView<const float> a, MatrixView<const float> b,
                                      TensorView<float> d, std::span<const int32_t> k_indices,
                                      TensorView<const float> c = {});
void k_grouped_bf16_gemm_tn_contiguous(MatrixView<const bf16> a, MatrixView<const bf16> b,
                                       TensorView<float> d, std::span<const int32_t> k_indices,
                                       TensorView<const float> c = {});

}  // namespace ridge::gemm
