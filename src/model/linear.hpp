// The model's GEMMs in the three layouts a linear layer needs, for each operand type:
//   forward      y[n, out]  = x[n, in] w[out, in]^T        (nt)
//   input grad   dx[n, in]  = dy[n, out] w[out, in]        (nn)
//   weight grad  dw[out, in] += dy[n, out]^T x[n, in]      (tn, accumulating into the fp32 gradient)
// float and bf16 operands run on ridge's GEMM (fp32 accumulation, whatever the ISA path); double
// operands (the fp64 reference model of the gradient checks) on plain loops.
#pragma once

#include <cstdint>

#include "ridge/core/format.hpp"

namespace ridge::model::linear {

// Row-major operands with leading dimensions; `accumulate` adds into d instead of overwriting it.
void nt(const float* a, const float* b, float* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd, bool accumulate);
void nt(const bf16* a, const bf16* b, float* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd, bool accumulate);
void nt(const double* a, const double* b, double* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd, bool accumulate);
// d = c + a b^T with c a separate [m, n] array (ld ldd): the residual add fused into the GEMM's
// epilogue instead of a pass of its own.
void nt_add(const float* a, const float* b, float* d, const float* c, int64_t m, int64_t n, int64_t k, int64_t lda,
            int64_t ldb, int64_t ldd);
void nt_add(const bf16* a, const bf16* b, float* d, const float* c, int64_t m, int64_t n, int64_t k, int64_t lda,
            int64_t ldb, int64_t ldd);
void nt_add(const double* a, const double* b, double* d, const double* c, int64_t m, int64_t n, int64_t k,
            int64_t lda, int64_t ldb, int64_t ldd);
// d[m, n] = a[m, k] b[k, n]
void nn(const float* a, const float* b, float* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd, bool accumulate);
void nn(const bf16* a, const bf16* b, float* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd, bool accumulate);
void nn(const double* a, const double* b, double* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd, bool accumulate);
// The bf16 output rounded once at the end (nearest even), the same values as an fp32 output cast
// afterwards, without the fp32 array or the pass.
void nn(const bf16* a, const bf16* b, bf16* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd);
// d[m, n] = a^T b with a stored [k, m] and b stored [k, n]
void tn(const float* a, const float* b, float* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd, bool accumulate);
void tn(const bf16* a, const bf16* b, float* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd, bool accumulate);
void tn(const double* a, const double* b, double* d, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
        int64_t ldd, bool accumulate);

}  // namespace ridge::model::linear
