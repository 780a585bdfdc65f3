// The GEMMs of an MoE layer's routed experts, over DeepGEMM's contiguous layout (model::moe's
// ContiguousLayout: each expert's rows one run, padded with -1 rows to row_alignment()), with DeepGEMM's
// names and argument order, the ones ridge's grouped GEMMs take:
//   M-grouped nt   the forward, x_e W_e^T           a [m_sum, k], b [G, n, k], d [m_sum, n]
//   M-grouped nn   the input gradient, dy_e W_e      a [m_sum, k], b [G, k, n], d [m_sum, n]
//   K-grouped tn   the weight gradient, dy_e^T x_e   a [k_sum, m], b [k_sum, n], d [G, m, n] = (c +) ...
// m_indices / k_indices give each row's expert, -1 for padding: an M-grouped GEMM leaves a padding row of
// d as it is, a K-grouped one never reads one; an expert without rows gets d[g] = c[g] (0 without c). c
// may be d itself (dW += ...). Accumulation in fp32 (fp64 for the fp64 reference model).
//
// Today each function is a loop of ridge's dense GEMMs, one call per expert over its rows (the model's
// linear.hpp, which reaches gemm::f32_gemm_* and bf16_gemm_*): the bits are those of the dense GEMMs and
// do not depend on the thread count. The grouped kernels of the gemm module have these signatures, so
// they replace the bodies here and nothing else.
#pragma once

#include <cstdint>
#include <span>

#include "ridge/core/format.hpp"
#include "ridge/core/tensor.hpp"

namespace ridge::model::experts {

// Rows per aligned block of the contiguous layout: gemm::m_alignment_for_contiguous_layout().
int64_t row_alignment();

void m_grouped_f32_gemm_nt_contiguous(MatrixView<const float> a, TensorView<const float> b,
                                      MatrixView<float> d, std::span<const int32_t> m_indices);
void m_grouped_bf16_gemm_nt_contiguous(MatrixView<const bf16> a, TensorView<const bf16> b,
                                       MatrixView<float> d, std::span<const int32_t> m_indices);
void m_grouped_f32_gemm_nn_contiguous(MatrixView<const float> a, TensorView<const float> b,
                                      MatrixView<float> d, std::span<const int32_t> m_indices);
void m_grouped_bf16_gemm_nn_contiguous(MatrixView<const bf16> a, TensorView<const bf16> b,
                                       MatrixView<float> d, std::span<const int32_t> m_indices);
void k_grouped_f32_gemm_tn_contiguous(MatrixView<const float> a, MatrixView<const float> b,
                                      TensorView<float> d, std::span<const int32_t> k_indices,
                                      TensorView<const float> c = {});
void k_grouped_bf16_gemm_tn_contiguous(MatrixView<const bf16> a, MatrixView<const bf16> b,
                                       TensorView<float> d, std::span<const int32_t> k_indices,
                                       TensorView<const float> c = {});

// The three by operand type O, as the MoE block calls them: float and bf16 through the functions above,
// double (the fp64 reference model, accumulator A double) through the same loops in fp64. forward is
// the nt, input_grad the nn, and weight_grad the tn accumulating into d (c = d), as the dense layers'
// weight gradients accumulate.
template <typename O, typename A>
void forward(MatrixView<const O> a, TensorView<const O> b, MatrixView<A> d,
             std::span<const int32_t> m_indices);
template <typename O, typename A>
void input_grad(MatrixView<const O> a, TensorView<const O> b, MatrixView<A> d,
                std::span<const int32_t> m_indices);
template <typename O, typename A>
void weight_grad(MatrixView<const O> a, MatrixView<const O> b, TensorView<A> d,
                 std::span<const int32_t> k_indices);

}  // namespace ridge::model::experts
