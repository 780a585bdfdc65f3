// Grouped GEMMs for MoE layers with fp32 and bf16 inputs (include/ridge/gemm_grouped.hpp): the argument
// checks, one driver Problem per group, all handed to the driver's grouped entry at once
// (detail::run_grouped); and the layout rules every grouped GEMM checks, FP8's included
// (check.hpp: contiguous_runs, check_masked_m).
#include <type_traits>
#include <vector>

#include "gemm/check.hpp"
#include "gemm/driver.hpp"
#include "ridge/gemm_grouped.hpp"

namespace ridge::gemm {

std::vector<GroupRun> contiguous_runs(std::span<const int32_t> indices, const char* name,
                                      const char* rows_arg, const char* rows_name, int64_t rows,
                                      int64_t groups) {
  check(static_cast<int64_t>(indices.size()) == rows, "{}: expected {} entries (rows of {}), got {}", name,
        rows, rows_arg, indices.size());
  check(indices.empty() || indices.data() != nullptr, "{}: null data", name);
  const int64_t align = m_alignment_for_contiguous_layout();
  check(rows % align == 0, "{}: {}={} is not a multiple of the contiguous-layout alignment {}", rows_arg,
        rows_name, rows, align);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t g = indices[r];
    check(g >= -1 && g < groups, "{}[{}] = {}: expected a group in [0, {}) or -1 for padding", name, r, g,
          groups);
  }
  for (int64_t r0 = 0; r0 < rows; r0 += align) {
    int32_t seen = -1;
    for (int64_t r = r0; r < r0 + align; ++r) {
      const int32_t g = indices[r];
      if (g < 0) continue;
      check(seen < 0 || g == seen,
            "{}: rows {}..{} (one aligned block of {}) mix groups {} and {}; each group's segment must be "
            "padded with -1 to a multiple of m_alignment_for_contiguous_layout()",
            name, r0, r0 + align - 1, align, seen, g);
      seen = g;
    }
  }
  std::vector<GroupRun> runs;
  for (int64_t r = 0; r < rows;) {
    const int32_t g = indices[r];
    int64_t e = r + 1;
    while (e < rows && indices[e] == g) ++e;
    if (g >= 0) runs.push_back({g, r, e});
    r = e;
  }
  return runs;
}

void check_masked_m(std::span<const int32_t> masked_m, int64_t groups, int64_t m_max, int64_t expected_m) {
  check(static_cast<int64_t>(masked_m.size()) == groups,
        "masked_m: expected {} entries (one per group), got {}", groups, masked_m.size());
  check(masked_m.empty() || masked_m.data() != nullptr, "masked_m: null data");
  for (int64_t g = 0; g < groups; ++g)
    check(masked_m[g] >= 0 && masked_m[g] <= m_max, "masked_m[{}] = {}: expected 0 <= masked_m <= m_max = {}",
          g, masked_m[g], m_max);
  check(expected_m >= 0, "expected_m: must be >= 0, got {}", expected_m);
}

namespace {

using detail::Elem;
using detail::Problem;

template <typename T>
constexpr Elem elem_of() {
  return std::is_same_v<T, bf16> ? Elem::bf16 : Elem::f32;
}

// Group g's problem with its B (n columns of D, depth k; b_kmajor: stored [k, n]) and the output dtype;
// the caller fills in m, A and D.
template <typename T, typename TD>
Problem group_problem(const TensorView<const T>& b, int64_t g, int64_t n, int64_t k, bool b_kmajor) {
  Problem p;
  p.n = n;
  p.k = k;
  p.b = {b.data + g * b.stride[0], b.stride[1], elem_of<T>(), n, k, b_kmajor};
  p.a.elem = elem_of<T>();
  p.a.k = k;
  p.d_bf16 = std::is_same_v<TD, bf16>;
  return p;
}

// M-grouped, contiguous: a [m_sum, k], b [G, n, k] (nt) or [G, k, n] (nn), d [m_sum, n].
template <typename T, typename TD>
void m_contiguous(bool nn, MatrixView<const T> a, TensorView<const T> b, MatrixView<TD> d,
                  std::span<const int32_t> m_indices) {
  check(b.rank == 3, "b: expected a rank-3 tensor [groups, {}], got rank {}", nn ? "k, n" : "n, k", b.rank);
  check_view(nullptr, "a", a);
  const int64_t groups = b.shape[0], k = a.cols, m_sum = a.rows, n = nn ? b.shape[2] : b.shape[1];
  const int64_t kb = nn ? b.shape[1] : b.shape[2];
  check(groups >= 1, "b: expected at least one group, got {}", groups);
  check(kb == k, "b: expected k = {} (the columns of a) as its {} dimension, got {}", k,
        nn ? "second" : "third", kb);
  if (nn)
    check_tensor3(b, "b", groups, k, n);
  else
    check_tensor3(b, "b", groups, n, k);
  check_matrix(d, "d", m_sum, n);
  check_d_apart(d, a, "a");
  check_d_apart(d, b, "b");
  const std::vector<GroupRun> runs = contiguous_runs(m_indices, "m_indices", "a", "m_sum", m_sum, groups);
  std::vector<Problem> problems;
  problems.reserve(runs.size());
  for (const GroupRun& r : runs) {
    Problem p = group_problem<T, TD>(b, r.group, n, k, nn);
    detail::set_group_rows(p, a.data, a.ld, d.data, d.ld, r.begin, r.end - r.begin);
    problems.push_back(p);
  }
  detail::run_grouped(problems);
}

// M-grouped, masked: a [G, m_max, k], b [G, n, k], d [G, m_max, n].
template <typename T, typename TD>
void m_masked(TensorView<const T> a, TensorView<const T> b, TensorView<TD> d,
              std::span<const int32_t> masked_m, int64_t expected_m) {
  check(a.rank == 3 && b.rank == 3, "a, b: expected rank-3 tensors [groups, m_max, k] and [groups, n, k]");
  const int64_t groups = a.shape[0], m_max = a.shape[1], k = a.shape[2], n = b.shape[1];
  check(groups >= 1, "a: expected at least one group, got {}", groups);
  check_tensor3(a, "a", groups, m_max, k);
  check_tensor3(b, "b", groups, n, k);
  check_tensor3(d, "d", groups, m_max, n);
  check_d_apart(d, a, "a");
  check_d_apart(d, b, "b");
  check_masked_m(masked_m, groups, m_max, expected_m);
  std::vector<Problem> problems;
  for (int64_t g = 0; g < groups; ++g) {
    if (masked_m[g] == 0) continue;
    Problem p = group_problem<T, TD>(b, g, n, k, false);
    detail::set_group_rows(p, a.data + g * a.stride[0], a.stride[1], d.data + g * d.stride[0], d.stride[1], 0,
                           masked_m[g]);
    problems.push_back(p);
  }
  detail::run_grouped(problems);
}

// K-grouped, contiguous: a [k_sum, m], b [k_sum, n], d and c [G, m, n].
template <typename T>
void k_contiguous(MatrixView<const T> a, MatrixView<const T> b, TensorView<float> d,
                  std::span<const int32_t> k_indices, TensorView<const float> c) {
  check(d.rank == 3, "d: expected a rank-3 tensor [groups, m, n], got rank {}", d.rank);
  check_view(nullptr, "a", a);
  check_view(nullptr, "b", b);
  const int64_t groups = d.shape[0], k_sum = a.rows, m = a.cols, n = b.cols;
  check(groups >= 1, "d: expected at least one group, got {}", groups);
  check(b.rows == k_sum, "b: expected {} rows (k_sum, the rows of a), got {}", k_sum, b.rows);
  check_tensor3(d, "d", groups, m, n);
  const bool with_c = c.data != nullptr || c.rank != 0;
  if (with_c) {
    check_tensor3(c, "c", groups, m, n);
    const bool same =
        static_cast<const void*>(c.data) == static_cast<const void*>(d.data) && c.stride == d.stride;
    check(same || !overlap::overlaps(c, d),
          "c: overlaps d without being the same tensor (same pointer and strides)");
  }
  check_d_apart(d, a, "a");
  check_d_apart(d, b, "b");
  const std::vector<GroupRun> runs = contiguous_runs(k_indices, "k_indices", "a", "k_sum", k_sum, groups);
  // Each group's rows as one block of K: a group seen twice is refused (its sum would need two passes).
  std::vector<GroupRun> of_group(static_cast<size_t>(groups), GroupRun{-1, 0, 0});
  for (const GroupRun& r : runs) {
    GroupRun& first = of_group[r.group];
    check(first.group < 0,
          "k_indices: group {} has rows {}..{} and {}..{}; the K-grouped GEMM takes each group's rows as one "
          "run (padding only after it)",
          r.group, first.begin, first.end - 1, r.begin, r.end - 1);
    first = r;
  }
  std::vector<Problem> problems;
  problems.reserve(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) {
    const GroupRun& r = of_group[g];
    const int64_t k = r.group < 0 ? 0 : r.end - r.begin;  // no rows: D[g] = C[g] or 0
    Problem p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.a = {a.data + r.begin * a.ld, a.ld, elem_of<T>(), m, k, true};
    p.b = {b.data + r.begin * b.ld, b.ld, elem_of<T>(), n, k, true};
    p.d = d.data + g * d.stride[0];
    p.ldd = d.stride[1];
    if (with_c) {
      p.c = c.data + g * c.stride[0];
      p.ldc = c.stride[1];
    }
    problems.push_back(p);
  }
  detail::run_grouped(problems);
}

}  // namespace

// Each name with its fp32 and its bf16 output.
#define RIDGE_M_GROUPED(FN, NN, TA)                                            \
  void FN(MatrixView<const TA> a, TensorView<const TA> b, MatrixView<float> d, \
          std::span<const int32_t> idx) {                                      \
    m_contiguous(NN, a, b, d, idx);                                            \
  }                                                                            \
  void FN(MatrixView<const TA> a, TensorView<const TA> b, MatrixView<bf16> d,  \
          std::span<const int32_t> idx) {                                      \
    m_contiguous(NN, a, b, d, idx);                                            \
  }
RIDGE_M_GROUPED(m_grouped_f32_gemm_nt_contiguous, false, float)
RIDGE_M_GROUPED(m_grouped_bf16_gemm_nt_contiguous, false, bf16)
RIDGE_M_GROUPED(m_grouped_f32_gemm_nn_contiguous, true, float)
RIDGE_M_GROUPED(m_grouped_bf16_gemm_nn_contiguous, true, bf16)
#undef RIDGE_M_GROUPED

#define RIDGE_M_MASKED(FN, TA)                                                                              \
  void FN(TensorView<const TA> a, TensorView<const TA> b, TensorView<float> d, std::span<const int32_t> mm, \
          int64_t expected_m) {                                                                             \
    m_masked(a, b, d, mm, expected_m);                                                                      \
  }                                                                                                         \
  void FN(TensorView<const TA> a, TensorView<const TA> b, TensorView<bf16> d, std::span<const int32_t> mm,  \
          int64_t expected_m) {                                                                             \
    m_masked(a, b, d, mm, expected_m);                                                                      \
  }
RIDGE_M_MASKED(m_grouped_f32_gemm_nt_masked, float)
RIDGE_M_MASKED(m_grouped_bf16_gemm_nt_masked, bf16)
#undef RIDGE_M_MASKED

void k_grouped_f32_gemm_tn_contiguous(MatrixView<const float> a, MatrixView<const float> b,
                                      TensorView<float> d, std::span<const int32_t> k_indices,
                                      TensorView<const float> c) {
  k_contiguous(a, b, d, k_indices, c);
}
void k_grouped_bf16_gemm_tn_contiguous(MatrixView<const bf16> a, MatrixView<const bf16> b,
                                       TensorView<float> d, std::span<const int32_t> k_indices,
                                       TensorView<const float> c) {
  k_contiguous(a, b, d, k_indices, c);
}

}  // namespace ridge::gemm
