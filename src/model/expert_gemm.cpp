// The experts' grouped GEMMs (src/model/expert_gemm.hpp): the gemm module's for fp32 and bf16, a loop of fp64
// GEMMs, one call per expert, for the reference model.
#include "model/expert_gemm.hpp"

#include <algorithm>
#include <tuple>
#include <type_traits>
#include <vector>

#include "model/linear.hpp"
#include "ridge/core/error.hpp"
#include "ridge/gemm_grouped.hpp"
#include "core/check.hpp"

namespace ridge::model::experts {

int64_t row_alignment() {
  return gemm::m_alignment_for_contiguous_layout();
}

namespace {

// Calls f(g, first row, rows) for each expert's run of rows in `indices` (-1 rows skipped), after
// checking that there are `rows` indices, each below `groups`.
template <typename F>
void each_group(const char* fn, const char* name, std::span<const int32_t> indices, int64_t rows,
                int64_t groups, F&& f) {
  check(static_cast<int64_t>(indices.size()) == rows, "{}: {} has {} entries for {} rows", fn, name,
        indices.size(), rows);
  for (int64_t r = 0; r < rows;) {
    const int32_t g = indices[static_cast<size_t>(r)];
    if (g < 0) {
      ++r;
      continue;
    }
    check(g < groups, "{}: {}[{}] is {}, past the {} groups of b", fn, name, r, g, groups);
    int64_t end = r + 1;
    while (end < rows && indices[static_cast<size_t>(end)] == g) ++end;
    f(g, r, end - r);
    r = end;
  }
}

// b [G, n, k] (nt) or [G, k, n] (nn) with its last dimension contiguous.
template <typename T>
void check_b(const char* fn, const TensorView<const T>& b) {
  check(b.rank == 3 && b.stride[2] == 1 && b.stride[1] >= b.shape[2],
        "{}: b must be a [groups, rows, cols] view with contiguous rows", fn);
}

// d[r] = a[r] b[g]^T (nt) or a[r] b[g] (nn) over each expert's rows.
template <typename T, typename A>
void m_grouped(const char* fn, bool nt, MatrixView<const T> a, TensorView<const T> b, MatrixView<A> d,
               std::span<const int32_t> m_indices) {
  check_b(fn, b);
  const int64_t k = a.cols, n = d.cols;
  check(d.rows == a.rows && (nt ? b.shape[2] == k && b.shape[1] == n : b.shape[1] == k && b.shape[2] == n),
        "{}: a [{}, {}], b [{}, {}, {}] and d [{}, {}] do not fit", fn, a.rows, a.cols, b.shape[0],
        b.shape[1], b.shape[2], d.rows, d.cols);
  each_group(fn, "m_indices", m_indices, a.rows, b.shape[0], [&](int32_t g, int64_t r, int64_t rows) {
    const T* bg = b.data + g * b.stride[0];
    if (nt)
      linear::nt(a.data + r * a.ld, bg, d.data + r * d.ld, rows, n, k, a.ld, b.stride[1], d.ld, false);
    else
      linear::nn(a.data + r * a.ld, bg, d.data + r * d.ld, rows, n, k, a.ld, b.stride[1], d.ld, false);
  });
}

// d[g] = (c[g] +) a_g^T b_g over each expert's rows; an expert without rows gets c[g], or 0.
template <typename T, typename A>
void k_grouped(const char* fn, MatrixView<const T> a, MatrixView<const T> b, TensorView<A> d,
               std::span<const int32_t> k_indices, TensorView<const A> c) {
  check(d.rank == 3 && d.stride[2] == 1 && a.rows == b.rows && d.shape[1] == a.cols && d.shape[2] == b.cols,
        "{}: a [{}, {}], b [{}, {}] and d [groups, {}, {}] do not fit", fn, a.rows, a.cols, b.rows, b.cols,
        a.cols, b.cols);
  check(!c.data || (c.rank == 3 && c.shape == d.shape && c.stride[2] == 1), "{}: c must be shaped as d", fn);
  const int64_t m = a.cols, n = b.cols;
  auto dg = [&](int64_t g) { return d.data + g * d.stride[0]; };
  // c[g] into d[g] where they differ, so that every expert then accumulates into d.
  auto start = [&](int64_t g) {
    for (int64_t i = 0; i < m; ++i) {
      A* row = dg(g) + i * d.stride[1];
      if (!c.data)
        std::fill_n(row, n, A(0));
      else if (c.data != d.data)
        std::copy_n(c.data + g * c.stride[0] + i * c.stride[1], n, row);
    }
  };
  std::vector<bool> seen(static_cast<size_t>(d.shape[0]), false);
  each_group(fn, "k_indices", k_indices, a.rows, d.shape[0], [&](int32_t g, int64_t r, int64_t rows) {
    if (!seen[static_cast<size_t>(g)]) start(g);
    seen[static_cast<size_t>(g)] = true;
    linear::tn(a.data + r * a.ld, b.data + r * b.ld, dg(g), m, n, rows, a.ld, b.ld, d.stride[1], true);
  });
  for (int64_t g = 0; g < d.shape[0]; ++g)
    if (!seen[static_cast<size_t>(g)]) start(g);
}

}  // namespace

namespace {

// The nt, nn and tn GEMMs of operand type O.
template <typename O>
constexpr auto named() {
  if constexpr (std::is_same_v<O, float>)
    return std::tuple{[](auto... v) { gemm::m_grouped_f32_gemm_nt_contiguous(v...); },
                      [](auto... v) { gemm::m_grouped_f32_gemm_nn_contiguous(v...); },
                      [](auto... v) { gemm::k_grouped_f32_gemm_tn_contiguous(v...); }};
  else if constexpr (std::is_same_v<O, bf16>)
    return std::tuple{[](auto... v) { gemm::m_grouped_bf16_gemm_nt_contiguous(v...); },
                      [](auto... v) { gemm::m_grouped_bf16_gemm_nn_contiguous(v...); },
                      [](auto... v) { gemm::k_grouped_bf16_gemm_tn_contiguous(v...); }};
  else
    return std::tuple{[](auto... v) { m_grouped("m_grouped_f64_gemm_nt_contiguous", true, v...); },
                      [](auto... v) { m_grouped("m_grouped_f64_gemm_nn_contiguous", false, v...); },
                      [](auto... v) { k_grouped("k_grouped_f64_gemm_tn_contiguous", v...); }};
}

}  // namespace

template <typename O, typename A>
void forward(MatrixView<const O> a, TensorView<const O> b, MatrixView<A> d,
             std::span<const int32_t> m_indices) {
  std::get<0>(named<O>())(a, b, d, m_indices);
}
template <typename O, typename A>
void input_grad(MatrixView<const O> a, TensorView<const O> b, MatrixView<A> d,
                std::span<const int32_t> m_indices) {
  std::get<1>(named<O>())(a, b, d, m_indices);
}
template <typename O, typename A>
void weight_grad(MatrixView<const O> a, MatrixView<const O> b, TensorView<A> d,
                 std::span<const int32_t> k_indices) {
  std::get<2>(named<O>())(a, b, d, k_indices, TensorView<const A>{d.data, d.rank, d.shape, d.stride});
}

#define RIDGE_EXPERTS(O, A)                                                                \
  template void forward<O, A>(MatrixView<const O>, TensorView<const O>, MatrixView<A>,     \
                              std::span<const int32_t>);                                   \
  template void input_grad<O, A>(MatrixView<const O>, TensorView<const O>, MatrixView<A>,  \
                                 std::span<const int32_t>);                                \
  template void weight_grad<O, A>(MatrixView<const O>, MatrixView<const O>, TensorView<A>, \
                                  std::span<const int32_t>);
RIDGE_EXPERTS(float, float)
RIDGE_EXPERTS(bf16, float)
RIDGE_EXPERTS(double, double)
#undef RIDGE_EXPERTS

}  // namespace ridge::model::experts
