// M-grouped FP8 GEMMs for MoE layers (DeepGEMM's contiguous and masked layouts). Groups share n and
// k, so each group (or each run of rows of one group) is an ordinary dense problem on its own B: the
// grouped entry points check their arguments once, then loop over the groups calling the one driver.
#include <string>

#include "gemm/check.hpp"
#include "gemm/driver.hpp"
#include "ridge/gemm_fp8.hpp"

namespace ridge::gemm {

namespace {

// Group g's problem with B and its scales filled in: rows of A, D come from the layout.
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
  p.d_bf16 = true;
  return p;
}

}  // namespace

void m_grouped_fp8_gemm_nt_contiguous(MatrixView<const fp8_e4m3> a, MatrixView<const float> sa,
                                      TensorView<const fp8_e4m3> b, TensorView<const float> sb,
                                      MatrixView<bf16> d, std::span<const int32_t> m_indices) {
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
  check(static_cast<int64_t>(m_indices.size()) == m_sum, "m_indices: expected {} entries (rows of a), got {}",
        m_sum, m_indices.size());
  check(m_indices.empty() || m_indices.data() != nullptr, "m_indices: null data");
  const int64_t align = m_alignment_for_contiguous_layout();
  check(m_sum % align == 0, "a: m_sum={} is not a multiple of the contiguous-layout alignment {}", m_sum,
        align);
  for (int64_t r = 0; r < m_sum; ++r) {
    const int32_t g = m_indices[r];
    check(g >= -1 && g < groups, "m_indices[{}] = {}: expected a group in [0, {}) or -1 for padding", r, g,
          groups);
  }
  for (int64_t r0 = 0; r0 < m_sum; r0 += align) {
    int32_t seen = -1;
    for (int64_t r = r0; r < r0 + align; ++r) {
      const int32_t g = m_indices[r];
      if (g < 0) continue;
      check(seen < 0 || g == seen,
            "m_indices: rows {}..{} (one aligned block of {}) mix groups {} and {}; each group's segment "
            "must be "
            "padded with -1 to a multiple of m_alignment_for_contiguous_layout()",
            r0, r0 + align - 1, align, seen, g);
      seen = g;
    }
  }
  for (int64_t r = 0; r < m_sum;) {
    const int32_t g = m_indices[r];
    int64_t e = r + 1;
    while (e < m_sum && m_indices[e] == g) ++e;
    if (g >= 0) {
      detail::Problem p = group_problem(n, k, b, sb, g);
      p.m = e - r;
      p.a.data = a.data + r * a.ld;
      p.a.ld = a.ld;
      p.a.rows = p.m;
      p.sa = sa.data + r * sa.ld;
      p.ldsa = sa.ld;
      p.d = d.data + r * d.ld;
      p.ldd = d.ld;
      detail::run(p);
    }
    r = e;
  }
}

void m_grouped_fp8_gemm_nt_masked(TensorView<const fp8_e4m3> a, TensorView<const float> sa,
                                  TensorView<const fp8_e4m3> b, TensorView<const float> sb,
                                  TensorView<bf16> d, std::span<const int32_t> masked_m, int64_t expected_m) {
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
  check(static_cast<int64_t>(masked_m.size()) == groups,
        "masked_m: expected {} entries (one per group), got {}", groups, masked_m.size());
  check(masked_m.empty() || masked_m.data() != nullptr, "masked_m: null data");
  for (int64_t g = 0; g < groups; ++g)
    check(masked_m[g] >= 0 && masked_m[g] <= m_max, "masked_m[{}] = {}: expected 0 <= masked_m <= m_max = {}",
          g, masked_m[g], m_max);
  check(expected_m >= 0, "expected_m: must be >= 0, got {}", expected_m);
  for (int64_t g = 0; g < groups; ++g) {
    if (masked_m[g] == 0) continue;
    detail::Problem p = group_problem(n, k, b, sb, g);
    p.m = masked_m[g];
    p.a.data = a.data + g * a.stride[0];
    p.a.ld = a.stride[1];
    p.a.rows = p.m;
    p.sa = sa.data + g * sa.stride[0];
    p.ldsa = sa.stride[1];
    p.d = d.data + g * d.stride[0];
    p.ldd = d.stride[1];
    detail::run(p);
  }
}

}  // namespace ridge::gemm
