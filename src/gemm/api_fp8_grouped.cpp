// M-grouped FP8 GEMMs for MoE layers (DeepGEMM's contiguous and masked layouts). Groups share n and
// k, so each group (or each run of rows of one group) is an ordinary dense problem on its own B (a slice
// of a raw [G, n, k] stack, or the group's PackedFp8B): the grouped entry points check their arguments
// once (the layout rules shared with the fp32 and bf16 grouped GEMMs, check.hpp), then hand every group's
// problem to the driver's grouped entry at once.
// D is bf16 (DeepGEMM's) or fp32 (as the dense fp8_gemm_nt has both: generation keeps its activations
// in fp32 between the GEMMs).
#include <span>
#include <type_traits>
#include <vector>

#include "gemm/check.hpp"
#include "gemm/driver.hpp"
#include "ridge/gemm_fp8.hpp"

namespace ridge::gemm {

namespace {

// A group's problem with n, k and the dtypes set: B (raw or packed), rows of A and D come from the caller.
template <typename TD>
detail::Problem group_problem(int64_t n, int64_t k) {
  detail::Problem p;
  p.n = n;
  p.k = k;
  p.a.elem = detail::Elem::fp8;
  p.a.k = k;
  p.d_bf16 = std::is_same_v<TD, bf16>;
  return p;
}

// Group g's raw B [n, k] and its scales, slices of the stacks b [G, n, k] and sb [G, ceil(n/128),
// ceil(k/128)].
struct RawB {
  TensorView<const fp8_e4m3> b;
  TensorView<const float> sb;
  void operator()(detail::Problem& p, int64_t g) const {
    p.b.data = b.data + g * b.stride[0];
    p.b.ld = b.stride[1];
    p.b.elem = detail::Elem::fp8;
    p.b.rows = p.n;
    p.b.k = p.k;
    p.sb = sb.data + g * sb.stride[0];
    p.ldsb = sb.stride[1];
  }
};

// Group g's PackedFp8B.
struct PackedB {
  std::span<const PackedFp8B> b;
  void operator()(detail::Problem& p, int64_t g) const {
    detail::set_packed_fp8_b(p, b[static_cast<size_t>(g)]);
  }
};

// The packed weights against the call: one per group, each packed, with k = the columns of a and the n of
// b[0] (returned).
int64_t check_packed(std::span<const PackedFp8B> b, int64_t groups, int64_t k) {
  check(static_cast<int64_t>(b.size()) == groups, "b: expected {} packed weights (one per group), got {}",
        groups, b.size());
  for (size_t g = 0; g < b.size(); ++g) {
    check(!b[g].empty(), "b[{}]: the PackedFp8B is empty (use PackedFp8B::pack)", g);
    check(b[g].k() == k, "b[{}]: packed with k={} but a has {} columns", g, b[g].k(), k);
    check(b[g].n() == b[0].n(), "b[{}]: packed with n={} but b[0] has n={} (every group shares n)", g,
          b[g].n(), b[0].n());
  }
  return b[0].n();
}

// Contiguous: every run of one group's rows a problem of its own, on that group's B (set_b).
template <typename TD, typename SetB>
void run_contiguous(MatrixView<const fp8_e4m3> a, MatrixView<const float> sa, MatrixView<TD> d,
                    std::span<const int32_t> m_indices, int64_t groups, int64_t n, const SetB& set_b) {
  std::vector<detail::Problem> problems;
  for (const GroupRun& r : contiguous_runs(m_indices, "m_indices", "a", "m_sum", a.rows, groups)) {
    detail::Problem p = group_problem<TD>(n, a.cols);
    set_b(p, r.group);
    detail::set_group_rows(p, a.data, a.ld, d.data, d.ld, r.begin, r.end - r.begin);
    p.sa = sa.data + r.begin * sa.ld;
    p.ldsa = sa.ld;
    problems.push_back(p);
  }
  detail::run_grouped(problems);
}

// Masked: each group with rows a problem of its own; a group masked to 0 rows is not handed to the driver.
template <typename TD, typename SetB>
void run_masked(TensorView<const fp8_e4m3> a, TensorView<const float> sa, TensorView<TD> d,
                std::span<const int32_t> masked_m, int64_t n, const SetB& set_b) {
  std::vector<detail::Problem> problems;
  for (int64_t g = 0; g < a.shape[0]; ++g) {
    if (masked_m[g] == 0) continue;
    detail::Problem p = group_problem<TD>(n, a.shape[2]);
    set_b(p, g);
    detail::set_group_rows(p, a.data + g * a.stride[0], a.stride[1], d.data + g * d.stride[0], d.stride[1], 0,
                           masked_m[g]);
    p.sa = sa.data + g * sa.stride[0];
    p.ldsa = sa.stride[1];
    problems.push_back(p);
  }
  detail::run_grouped(problems);
}

// The contiguous layout's A and its scales, for n columns of D.
void check_contiguous_a(MatrixView<const fp8_e4m3> a, MatrixView<const float> sa, int64_t n) {
  const int64_t k = a.cols, m_sum = a.rows;
  check(k >= 1 && n >= 0 && m_sum >= 0, "a, b: bad dimensions m_sum={}, n={}, k={}", m_sum, n, k);
  check_matrix(a, "a", m_sum, k);
  check_matrix(sa, "a_scales", m_sum, fp8_scale_blocks(k));
}

// The masked layout's A and its scales, for n columns of D.
void check_masked_a(TensorView<const fp8_e4m3> a, TensorView<const float> sa, int64_t n) {
  const int64_t groups = a.shape[0], m_max = a.shape[1], k = a.shape[2];
  check(groups >= 1 && m_max >= 0 && k >= 1 && n >= 0, "a, b: bad dimensions groups={}, m_max={}, n={}, k={}",
        groups, m_max, n, k);
  check_tensor3(a, "a", groups, m_max, k);
  check_tensor3(sa, "a_scales", groups, m_max, fp8_scale_blocks(k));
}

template <typename TD>
void contiguous(MatrixView<const fp8_e4m3> a, MatrixView<const float> sa, TensorView<const fp8_e4m3> b,
                TensorView<const float> sb, MatrixView<TD> d, std::span<const int32_t> m_indices) {
  check(b.rank == 3, "b: expected a rank-3 tensor [groups, n, k], got rank {}", b.rank);
  const int64_t groups = b.shape[0], n = b.shape[1], k = a.cols;
  check(groups >= 1, "b: expected at least one group, got {}", groups);
  check_contiguous_a(a, sa, n);
  check_tensor3(b, "b", groups, n, k);
  check_tensor3(sb, "b_scales", groups, fp8_scale_blocks(n), fp8_scale_blocks(k));
  check_matrix(d, "d", a.rows, n);
  check_d_alone(a, sa, b, sb, d);
  run_contiguous(a, sa, d, m_indices, groups, n, RawB{b, sb});
}

template <typename TD>
void contiguous(MatrixView<const fp8_e4m3> a, MatrixView<const float> sa, std::span<const PackedFp8B> b,
                MatrixView<TD> d, std::span<const int32_t> m_indices) {
  const auto groups = static_cast<int64_t>(b.size());
  check(groups >= 1, "b: expected at least one packed weight (one per group), got 0");
  const int64_t n = check_packed(b, groups, a.cols);
  check_contiguous_a(a, sa, n);
  check_matrix(d, "d", a.rows, n);
  check_d_apart(d, a, "a");
  check_d_apart(d, sa, "a_scales");
  run_contiguous(a, sa, d, m_indices, groups, n, PackedB{b});
}

template <typename TD>
void masked(TensorView<const fp8_e4m3> a, TensorView<const float> sa, TensorView<const fp8_e4m3> b,
            TensorView<const float> sb, TensorView<TD> d, std::span<const int32_t> masked_m,
            int64_t expected_m) {
  check(a.rank == 3 && b.rank == 3, "a, b: expected rank-3 tensors [groups, m_max, k] and [groups, n, k]");
  const int64_t groups = a.shape[0], k = a.shape[2], n = b.shape[1];
  check_masked_a(a, sa, n);
  check_tensor3(b, "b", groups, n, k);
  check_tensor3(sb, "b_scales", groups, fp8_scale_blocks(n), fp8_scale_blocks(k));
  check_tensor3(d, "d", groups, a.shape[1], n);
  check_d_alone(a, sa, b, sb, d);
  check_masked_m(masked_m, groups, a.shape[1], expected_m);
  run_masked(a, sa, d, masked_m, n, RawB{b, sb});
}

template <typename TD>
void masked(TensorView<const fp8_e4m3> a, TensorView<const float> sa, std::span<const PackedFp8B> b,
            TensorView<TD> d, std::span<const int32_t> masked_m, int64_t expected_m) {
  check(a.rank == 3, "a: expected a rank-3 tensor [groups, m_max, k], got rank {}", a.rank);
  check(a.shape[0] >= 1 && a.shape[2] >= 1, "a: bad dimensions groups={}, k={}", a.shape[0], a.shape[2]);
  const int64_t n = check_packed(b, a.shape[0], a.shape[2]);
  check_masked_a(a, sa, n);
  check_tensor3(d, "d", a.shape[0], a.shape[1], n);
  check_d_apart(d, a, "a");
  check_d_apart(d, sa, "a_scales");
  check_masked_m(masked_m, a.shape[0], a.shape[1], expected_m);
  run_masked(a, sa, d, masked_m, n, PackedB{b});
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

void m_grouped_fp8_gemm_nt_contiguous(MatrixView<const fp8_e4m3> a, MatrixView<const float> a_scales,
                                      std::span<const PackedFp8B> b, MatrixView<bf16> d,
                                      std::span<const int32_t> m_indices) {
  contiguous(a, a_scales, b, d, m_indices);
}
void m_grouped_fp8_gemm_nt_contiguous(MatrixView<const fp8_e4m3> a, MatrixView<const float> a_scales,
                                      std::span<const PackedFp8B> b, MatrixView<float> d,
                                      std::span<const int32_t> m_indices) {
  contiguous(a, a_scales, b, d, m_indices);
}
void m_grouped_fp8_gemm_nt_masked(TensorView<const fp8_e4m3> a, TensorView<const float> a_scales,
                                  std::span<const PackedFp8B> b, TensorView<bf16> d,
                                  std::span<const int32_t> masked_m, int64_t expected_m) {
  masked(a, a_scales, b, d, masked_m, expected_m);
}
void m_grouped_fp8_gemm_nt_masked(TensorView<const fp8_e4m3> a, TensorView<const float> a_scales,
                                  std::span<const PackedFp8B> b, TensorView<float> d,
                                  std::span<const int32_t> masked_m, int64_t expected_m) {
  masked(a, a_scales, b, d, masked_m, expected_m);
}

}  // namespace ridge::gemm
