#include "model/linear.hpp"

#include "ridge/core/threads.hpp"
#include "ridge/gemm.hpp"

namespace ridge::model::linear {
namespace {

template <typename T>
MatrixView<const T> in(const T* p, int64_t rows, int64_t cols, int64_t ld) {
  return {p, rows, cols, ld};
}
MatrixView<float> out(float* p, int64_t rows, int64_t cols, int64_t ld) {
  return {p, rows, cols, ld};
}
MatrixView<const float> acc(float* p, int64_t rows, int64_t cols, int64_t ld, bool on) {
  return on ? MatrixView<const float>{p, rows, cols, ld} : MatrixView<const float>{};
}

// fp64 reference loops: element (i, j) of a row-major matrix with leading dimension ld, read through
// a transposed flag.
inline double at(const double* p, int64_t ld, bool trans, int64_t i, int64_t j) {
  return trans ? p[j * ld + i] : p[i * ld + j];
}
void loops(bool ta, bool tb, const double* a, const double* b, double* d, int64_t m, int64_t n, int64_t k,
           int64_t lda, int64_t ldb, int64_t ldd, bool accumulate) {
  const int nt = get_num_threads();
#pragma omp parallel for num_threads(nt) schedule(static) if (m * n * k >= (1 << 16))
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += at(a, lda, ta, i, p) * at(b, ldb, tb, p, j);
      d[i * ldd + j] = accumulate ? d[i * ldd + j] + s : s;
    }
}

}  // namespace

void nt(const float* a, const float* b, float* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd, bool accumulate) {
  gemm::f32_gemm_nt(in(a, m, k, lda), in(b, n, k, ldb), out(d, m, n, ldd), acc(d, m, n, ldd, accumulate));
}
void nt(const bf16* a, const bf16* b, float* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd, bool accumulate) {
  gemm::bf16_gemm_nt(in(a, m, k, lda), in(b, n, k, ldb), out(d, m, n, ldd), acc(d, m, n, ldd, accumulate));
}
void nt(const double* a, const double* b, double* d, int64_t m, int64_t n, int64_t k, int64_t lda,
        int64_t ldb, int64_t ldd, bool accumulate) {
  loops(false, true, a, b, d, m, n, k, lda, ldb, ldd, accumulate);
}

void nt_add(const float* a, const float* b, float* d, const float* c, int64_t m, int64_t n, int64_t k,
            int64_t lda, int64_t ldb, int64_t ldd) {
  gemm::f32_gemm_nt(in(a, m, k, lda), in(b, n, k, ldb), out(d, m, n, ldd), in(c, m, n, ldd));
}
void nt_add(const bf16* a, const bf16* b, float* d, const float* c, int64_t m, int64_t n, int64_t k,
            int64_t lda, int64_t ldb, int64_t ldd) {
  gemm::bf16_gemm_nt(in(a, m, k, lda), in(b, n, k, ldb), out(d, m, n, ldd), in(c, m, n, ldd));
}
void nt_add(const double* a, const double* b, double* d, const double* c, int64_t m, int64_t n, int64_t k,
            int64_t lda, int64_t ldb, int64_t ldd) {
  loops(false, true, a, b, d, m, n, k, lda, ldb, ldd, false);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) d[i * ldd + j] += c[i * ldd + j];
}

void nn(const float* a, const float* b, float* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd, bool accumulate) {
  gemm::f32_gemm_nn(in(a, m, k, lda), in(b, k, n, ldb), out(d, m, n, ldd), acc(d, m, n, ldd, accumulate));
}
void nn(const bf16* a, const bf16* b, float* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd, bool accumulate) {
  gemm::bf16_gemm_nn(in(a, m, k, lda), in(b, k, n, ldb), out(d, m, n, ldd), acc(d, m, n, ldd, accumulate));
}
void nn(const double* a, const double* b, double* d, int64_t m, int64_t n, int64_t k, int64_t lda,
        int64_t ldb, int64_t ldd, bool accumulate) {
  loops(false, false, a, b, d, m, n, k, lda, ldb, ldd, accumulate);
}

void nn(const bf16* a, const bf16* b, bf16* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd) {
  gemm::bf16_gemm_nn(in(a, m, k, lda), in(b, k, n, ldb), MatrixView<bf16>{d, m, n, ldd});
}

void tn(const float* a, const float* b, float* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd, bool accumulate) {
  gemm::f32_gemm_tn(in(a, k, m, lda), in(b, k, n, ldb), out(d, m, n, ldd), acc(d, m, n, ldd, accumulate));
}
void tn(const bf16* a, const bf16* b, float* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd, bool accumulate) {
  gemm::bf16_gemm_tn(in(a, k, m, lda), in(b, k, n, ldb), out(d, m, n, ldd), acc(d, m, n, ldd, accumulate));
}
void tn(const double* a, const double* b, double* d, int64_t m, int64_t n, int64_t k, int64_t lda,
        int64_t ldb, int64_t ldd, bool accumulate) {
  loops(true, false, a, b, d, m, n, k, lda, ldb, ldd, accumulate);
}

}  // namespace ridge::model::linear
