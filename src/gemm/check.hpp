// The argument checks of every GEMM entry point (dense, packed, FP8, grouped, quantization): view
// shapes and strides through core's one view check, overlaps through core/overlap.hpp, messages
// naming the function argument. Not for the per-ISA files: they are compiled with wide-ISA flags
// and must not instantiate shared templates.
#pragma once

#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "core/check.hpp"
#include "core/overlap.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/format.hpp"
#include "ridge/core/tensor.hpp"

namespace ridge::gemm {

// `name` must be a valid view (data unless empty, ld >= cols); with rows/cols given, exactly that shape.
template <typename T>
void check_view(const char* fn, const char* name, const MatrixView<T>& v) {
  check_matrix_view(fn, name, v.data, v.rows, v.cols, v.ld);
}
template <typename T>
void check_matrix(const MatrixView<T>& v, const char* name, int64_t rows, int64_t cols) {
  check_matrix_view(nullptr, name, v.data, v.rows, v.cols, v.ld, rows, cols);
}
template <typename T>
void check_tensor3(const TensorView<T>& v, const char* name, int64_t d0, int64_t d1, int64_t d2) {
  check_tensor_view(nullptr, name, v.data, v.rank, v.shape, v.stride, {d0, d1, d2}, Strides::row_major);
}

// Dense: A, D and C against n and k as B gives them; a_kmajor: A is stored [k, m] (tn, tt),
// b_kmajor: B is stored [k, n]. C may be D itself (same pointer and ld), nothing else may overlap D.
template <typename TA, typename TD>
void check_ad_c(const char* fn, const MatrixView<const TA>& a, const MatrixView<TD>& d,
                const MatrixView<const TD>& c, int64_t n, int64_t k, bool a_kmajor = false,
                bool b_kmajor = false) {
  check_view(fn, "a", a);
  check_view(fn, "d", d);
  const int64_t m = a_kmajor ? a.cols : a.rows, ka = a_kmajor ? a.rows : a.cols;
  check(ka == k, "{}: a has {} {} but b has {} {} (both are K)", fn, ka, a_kmajor ? "rows" : "columns", k,
        b_kmajor ? "rows" : "columns");
  check(d.rows == m && d.cols == n, "{}: d is [{}, {}], expected [m, n] = [{}, {}]", fn, d.rows, d.cols, m,
        n);
  check(c.rows >= 0 && c.cols >= 0, "{}: c has negative shape [{}, {}]", fn, c.rows, c.cols);
  if (c.data == nullptr) {
    check(c.rows == 0 && c.cols == 0, "{}: c is null but has shape [{}, {}] (pass an empty view for no C)",
          fn, c.rows, c.cols);
  } else {
    check(c.rows == d.rows && c.cols == d.cols, "{}: c is [{}, {}], expected d's shape [{}, {}]", fn, c.rows,
          c.cols, d.rows, d.cols);
    check(c.ld >= c.cols, "{}: c.ld = {} is smaller than its {} columns (expected ld >= cols)", fn, c.ld,
          c.cols);
    const bool same = static_cast<const void*>(c.data) == static_cast<const void*>(d.data) && c.ld == d.ld;
    check(same || !overlap::overlaps(c, d),
          "{}: c overlaps d without being the same matrix (same pointer and ld)", fn);
  }
  check(!overlap::overlaps(a, d), "{}: d overlaps a", fn);
}

// FP8: A [m, k] with its scales, D [m, n] and an fp32 C (which may be an fp32 D itself).
template <typename Out>
void check_fp8_a_d_c(const MatrixView<const fp8_e4m3>& a, const MatrixView<const float>& sa, int64_t n,
                     int64_t k, const MatrixView<Out>& d, const MatrixView<const float>& c) {
  check(a.rows >= 0 && n >= 0, "fp8 gemm: m and n must be >= 0, got m={}, n={}", a.rows, n);
  check(k >= 1, "fp8 gemm: k (columns of a and b) must be >= 1, got {}", k);
  const int64_t m = a.rows;
  check_matrix(a, "a", m, k);
  check_matrix(sa, "a_scales", m, (k + 127) / 128);
  check_matrix(d, "d", m, n);
  if (c.data) {
    check_matrix(c, "c", m, n);
    const bool same = static_cast<const void*>(c.data) == static_cast<const void*>(d.data) &&
                      (std::is_same_v<Out, float> && c.ld == d.ld);
    check(same || !overlap::overlaps(c, d),
          "c: overlaps d without being the same fp32 matrix (same pointer and ld)");
  }
  check(!overlap::overlaps(d, a) && !overlap::overlaps(d, sa), "d: overlaps an input (a or a_scales)");
}

// Grouped GEMMs: d is written while the inputs are still read (other groups' rows, the same group's
// later K blocks), so it may share memory with none of them.
template <typename D, typename In>
void check_d_apart(const D& d, const In& in, const char* name) {
  check(!overlap::overlaps(d, in), "d: overlaps an input ({})", name);
}
template <typename A, typename SA, typename D>
void check_d_alone(const A& a, const SA& sa, const TensorView<const fp8_e4m3>& b,
                   const TensorView<const float>& sb, const D& d) {
  check_d_apart(d, a, "a");
  check_d_apart(d, sa, "a_scales");
  check_d_apart(d, b, "b");
  check_d_apart(d, sb, "b_scales");
}

// One run of rows of one group in a contiguous grouped layout: rows [begin, end) of group `group`.
struct GroupRun {
  int32_t group = 0;
  int64_t begin = 0, end = 0;
};
// The contiguous layout's rule, shared by every contiguous grouped GEMM (M-grouped: the rows of a and d;
// K-grouped: the rows of a and b): `indices` (the argument `name`) has `rows` entries, each a group in
// [0, groups) or -1 for padding; `rows` (called `rows_name` in the messages, of the argument `rows_arg`)
// is a multiple of m_alignment_for_contiguous_layout(), and each aligned block holds one group plus
// padding. Returns the maximal runs of one group, in row order, padding left out.
std::vector<GroupRun> contiguous_runs(std::span<const int32_t> indices, const char* name,
                                      const char* rows_arg, const char* rows_name, int64_t rows,
                                      int64_t groups);
// The masked layout's rule, shared the same way: one count per group, each in [0, m_max]; expected_m >= 0.
void check_masked_m(std::span<const int32_t> masked_m, int64_t groups, int64_t m_max, int64_t expected_m);

}  // namespace ridge::gemm
