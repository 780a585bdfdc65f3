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
// fp32 and bf16 operands run on the gemm module's grouped GEMMs (ridge/gemm_grouped.hpp: one work list
// over all experts, the bits of a loop of dense GEMMs at any thread count); fp64, the reference model's,
// on a loop of fp64 GEMMs here, one per expert.
#pragma once

#include <cstdint>
#include <span>

#include "ridge/core/format.hpp"
#include "ridge/core/tensor.hpp"

namespace ridge::model::experts {

// Rows per aligned block of the contiguous layout: gemm::m_alignment_for_contiguous_layout().
int64_t row_alignment();

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
