// The model's GEMMs in the three layouts a linear layer needs, for each operand type:
//   forward      y[n, out]  = x[n, in] w[out, in]^T        (nt)
//   input grad   dx[n, in]  = dy[n, out] w[out, in]        (nn)
//   weight grad  dw[out, in] += dy[n, out]^T x[n, in]      (tn, accumulating into the fp32 gradient)
// float and bf16 operands run on ridge's GEMM (fp32 accumulation, whatever the ISA path); double
// operands (the fp64 reference model of the gradient checks) on plain loops.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ridge/core/format.hpp"
#include "core/check.hpp"

namespace ridge::model::linear {

// Row-major operands with leading dimensions; `accumulate` adds into d instead of overwriting it.
void nt(const float* a, const float* b, float* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd, bool accumulate);
void nt(const bf16* a, const bf16* b, float* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd, bool accumulate);
void nt(const double* a, const double* b, double* d, int64_t m, int64_t n, int64_t k, int64_t lda,
        int64_t ldb, int64_t ldd, bool accumulate);
// d = c + a b^T with c a separate [m, n] array (ld ldd): the residual add fused into the GEMM's
// epilogue instead of a pass of its own.
void nt_add(const float* a, const float* b, float* d, const float* c, int64_t m, int64_t n, int64_t k,
            int64_t lda, int64_t ldb, int64_t ldd);
void nt_add(const bf16* a, const bf16* b, float* d, const float* c, int64_t m, int64_t n, int64_t k,
            int64_t lda, int64_t ldb, int64_t ldd);
void nt_add(const double* a, const double* b, double* d, const double* c, int64_t m, int64_t n, int64_t k,
            int64_t lda, int64_t ldb, int64_t ldd);
// d[m, n] = a[m, k] b[k, n]
void nn(const float* a, const float* b, float* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd, bool accumulate);
void nn(const bf16* a, const bf16* b, float* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd, bool accumulate);
void nn(const double* a, const double* b, double* d, int64_t m, int64_t n, int64_t k, int64_t lda,
        int64_t ldb, int64_t ldd, bool accumulate);
// The bf16 output rounded once at the end (nearest even), the same values as an fp32 output cast
// afterwards, without the fp32 array or the pass.
void nn(const bf16* a, const bf16* b, bf16* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd);
// d[m, n] = a^T b with a stored [k, m] and b stored [k, n]
void tn(const float* a, const float* b, float* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd, bool accumulate);
void tn(const bf16* a, const bf16* b, float* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd, bool accumulate);
void tn(const double* a, const double* b, double* d, int64_t m, int64_t n, int64_t k, int64_t lda,
        int64_t ldb, int64_t ldd, bool accumulate);

// ---- The same products with each operand as one named view, as the model calls them.

// A row-major matrix operand: rows x cols elements, rows ld elements apart.
template <typename T>
struct Mat {
  T* data;
  int64_t rows, cols, ld;
};
template <typename T>
Mat<T> mat(T* data, int64_t rows, int64_t cols, int64_t ld) {
  return {data, rows, cols, ld};
}
template <typename T>
Mat<T> mat(T* data, int64_t rows, int64_t cols) {
  return {data, rows, cols, cols};
}

// A linear layer y = x w^T with its weight stored [out, in], and its two gradients:
//   forward(x, w, y)               y[n, out]  = x[n, in] w^T
//   forward(x, w, y, residual)     y[n, out]  = residual[n, out] + x[n, in] w^T (residual laid out as y)
//   input_grad(dy, w, dx)          dx[n, in]  = dy[n, out] w
//   weight_grad(dy, x, dw)         dw[out, in] += dy[n, out]^T x[n, in]
template <typename X, typename W, typename Y>
void forward(Mat<X> x, Mat<W> w, Mat<Y> y) {
  check(x.cols == w.cols && y.rows == x.rows && y.cols == w.rows,
        "linear::forward: the operands' shapes disagree");
  nt(x.data, w.data, y.data, x.rows, w.rows, x.cols, x.ld, w.ld, y.ld, false);
}
template <typename X, typename W, typename Y, typename R>
void forward(Mat<X> x, Mat<W> w, Mat<Y> y, const R* residual) {
  check(x.cols == w.cols && y.rows == x.rows && y.cols == w.rows,
        "linear::forward: the operands' shapes disagree");
  nt_add(x.data, w.data, y.data, residual, x.rows, w.rows, x.cols, x.ld, w.ld, y.ld);
}
template <typename DY, typename W, typename DX>
void input_grad(Mat<DY> dy, Mat<W> w, Mat<DX> dx) {
  check(dy.cols == w.rows && dx.rows == dy.rows && dx.cols == w.cols,
        "linear::input_grad: the operands' shapes disagree");
  if constexpr (std::is_same_v<std::remove_const_t<DX>, bf16>)
    nn(dy.data, w.data, dx.data, dy.rows, w.cols, dy.cols, dy.ld, w.ld, dx.ld);
  else
    nn(dy.data, w.data, dx.data, dy.rows, w.cols, dy.cols, dy.ld, w.ld, dx.ld, false);
}
template <typename DY, typename X, typename DW>
void weight_grad(Mat<DY> dy, Mat<X> x, Mat<DW> dw) {
  check(dy.rows == x.rows && dw.rows == dy.cols && dw.cols == x.cols,
        "linear::weight_grad: the operands' shapes disagree");
  tn(dy.data, x.data, dw.data, dy.cols, x.cols, dy.rows, dy.ld, x.ld, dw.ld, true);
}

}  // namespace ridge::model::linear
