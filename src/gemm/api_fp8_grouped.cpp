// M-grouped FP8 GEMMs for MoE layers (DeepGEMM's contiguous and masked layouts). Groups share n and
// k, so each group (or each run of rows of one group) is an ordinary dense problem on its own B: the
// grouped entry points check their arguments once (the layout rules shared with the fp32 and bf16
// grouped GEMMs, check.hpp), then hand every group's problem to the driver's grouped entry at once.
// D is bf16 (DeepGEMM's) or fp32 (as the dense fp8_gemm_nt has both: generation keeps its activations
// in fp32 between the GEMMs).
#include <type_traits>
#include <vector>

#include "gemm/check.hpp"
#include "gemm/driver.hpp"
#include "ridge/gemm_fp8.hpp"

namespace ridge::gemm {

namespace {

// Group g's problem with B and its scales filled in: rows of A, D come from the layout.
template <typename TD>
detail::Problem group_problem(int64_t n, int64_t k, const TensorView<const fp8_e4m3>& b,
                              const TensorView<const float>& sb, int64_t g) {
  detail::Problem p;
  p.n = n;
  p.k = k;
  p.b.data = b.data + g * b.stride[0];
  p.b.ld = b.stride[1];
  p.b.elem = detail::Elem::fp8;
  p.b.rows = n;
  p.b.k = k;
  p.sb = sb.data + g * sb.stride[0];
  p.ldsb = sb.stride[1];
  p.a.elem = detail::Elem::fp8;
  p.a.k = k;
  p.d_bf16 = std::is_same_v<TD, bf16>;
  return p;
}

template <typename TD>
void contiguous(MatrixView<const fp8_e4m3> a, MatrixView<const float> sa, TensorView<const fp8_e4m3> b,
                TensorView<const float> sb, MatrixView<TD> d, std::span<const int32_t> m_indices) {
  check(b.rank == 3, "b: expected a rank-3 tensor [groups, n, k], got rank {}", b.rank);
  const int64_t groups = b.shape[0], n = b.shape[1], k = a.cols, m_sum = a.rows;
  check(groups >= 1, "b: expected at least one group, got {}", groups);
  check(k >= 1 && n >= 0 && m_sum >= 0, "a, b: bad dimensions m_sum={}, n={}, k={}", m_sum, n, k);
  check_matrix(a, "a", m_sum, k);
  check_matrix(sa, "a_scales", m_sum, fp8_scale_blocks(k));
  check_tensor3(b, "b", groups, n, k);
  check_tensor3(sb, "b_scales", groups, fp8_scale_blocks(n), fp8_scale_blocks(k));
  check_matrix(d, "d", m_sum, n);
  check_d_alone(a, sa, b, sb, d);
  std::vector<detail::Problem> problems;
  for (const GroupRun& r : contiguous_runs(m_indices, "m_indices", "a", "m_sum", m_sum, groups)) {
    detail::Problem p = group_problem<TD>(n, k, b, sb, r.group);
    detail::set_group_rows(p, a.data, a.ld, d.data, d.ld, r.begin, r.end - r.begin);
    p.sa = sa.data + r.begin * sa.ld;
    p.ldsa = sa.ld;
    problems.push_back(p);
  }
  detail::run_grouped(problems);
}

template <typename TD>
void masked(TensorView<const fp8_e4m3> a, TensorView<const float> sa, TensorView<const fp8_e4m3> b,
            TensorView<const float> sb, TensorView<TD> d, std::span<const int32_t> masked_m,
            int64_t expected_m) {
  check(a.rank == 3 && b.rank == 3, "a, b: expected rank-3 tensors [groups, m_max, k] and [groups, n, k]");
  const int64_t groups = a.shape[0], m_max = a.shape[1], k = a.shape[2], n = b.shape[1];
  check(groups >= 1 && m_max >= 0 && k >= 1 && n >= 0, "a, b: bad dimensions groups={}, m_max={}, n={}, k={}",
        groups, m_max, n, k);
  check_tensor3(a, "a", groups, m_max, k);
  check_tensor3(sa, "a_scales", groups, m_max, fp8_scale_blocks(k));
  check_tensor3(b, "b", groups, n, k);
  check_tensor3(sb, "b_scales", groups, fp8_scale_blocks(n), fp8_scale_blocks(k));
  check_tensor3(d, "d", groups, m_max, n);
  check_d_alone(a, sa, b, sb, d);
  check_masked_m(masked_m, groups, m_max, expected_m);
  std::vector<detail::Problem> problems;
  for (int64_t g = 0; g < groups; ++g) {
    if (masked_m[g] == 0) continue;
    detail::Problem p = group_problem<TD>(n, k, b, sb, g);
    detail::set_group_rows(p, a.data + g * a.stride[0], a.stride[1], d.data + g * d.stride[0], d.stride[1], 0,
                           masked_m[g]);
    p.sa = sa.data + g * sa.stride[0];
    p.ldsa = sa.stride[1];
    problems.push_back(p);
  }
  detail::run_grouped(problems);
}

}  // namespace

void m_grouped_fp8_gemm_nt_contiguous(MatrixView<const fp8_e4m3> a, MatrixView<const float> a_scales,
                                      TensorView<const fp8_e4m3> b, TensorView<const float> b_scales,
                                      MatrixView<bf16> d, std::span<const int32_t> m_indices) {
  contiguous(a, a_scales, b, b_scales, d, m_indices);
}
void m_grouped_fp8_gemm_nt_contiguous(MatrixView<const fp8_e4m3> a, MatrixView<const float> a_scales,
                                      TensorView<const fp8_e4m3> b, TensorView<const float> b_scales,
                                      MatrixView<float> d, std::span<const int32_t> m_indices) {
  contiguous(a, a_scales, b, b_scales, d, m_indices);
}
void m_grouped_fp8_gemm_nt_masked(TensorView<const fp8_e4m3> a, TensorView<const float> a_scales,
                                  TensorView<const fp8_e4m3> b, TensorView<const float> b_scales,
                                  TensorView<bf16> d, std::span<const int32_t> masked_m, int64_t expected_m) {
  masked(a, a_scales, b, b_scales, d, masked_m, expected_m);
}
void m_grouped_fp8_gemm_nt_masked(TensorView<const fp8_e4m3> a, TensorView<const float> a_scales,
                                  TensorView<const fp8_e4m3> b, TensorView<const float> b_scales,
                                  TensorView<float> d, std::span<const int32_t> masked_m,
                                  int64_t expected_m) {
  masked(a, a_scales, b, b_scales, d, masked_m, expected_m);
}

}  // namespace ridge::gemm
