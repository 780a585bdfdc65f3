// Peers the GEMM benchmarks measure ridge against in the same run: OpenBLAS sgemm (fp32) and a
// oneDNN bf16 matmul (also the fp8 benchmark's peer, on dequantized operands). Both compile to
// stubs that report "not available" when the library is absent from the build.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ridge/core/tensor.hpp"

namespace ridge::gemm_peers {

// ---- OpenBLAS ----
bool openblas_available();
// The kernel family OpenBLAS picked at load time (e.g. "SkylakeX", "Zen"); "" when absent.
std::string openblas_corename();
void openblas_set_threads(int n);
// D[m,n] = A[m,k] * B[n,k]^T (+ D when accumulate), row-major with leading dimensions.
// ridge::Error when OpenBLAS is not in the build.
void openblas_sgemm_nt(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                       int64_t ldb, float* d, int64_t ldd, bool accumulate = false);
// The same with ridge's layouts: a_kmajor reads A stored [k,m] (tn, tt), b_kmajor B stored [k,n]
// (nn, tn), through OpenBLAS's own transposition flags.
void openblas_sgemm(bool a_kmajor, bool b_kmajor, int64_t m, int64_t n, int64_t k, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float* d, int64_t ldd, bool accumulate = false);

// ---- oneDNN ----
bool onednn_available();
// oneDNN's version string ("3.0.0"), "" when absent.
std::string onednn_version();

// A bf16 x bf16 -> (fp32 | bf16) matmul D[m,n] = A[m,k] * B[n,k]^T (or another layout, below). The primitive
// is created once in the constructor (what a framework does per shape) so run() is only the execution.
// Threads: oneDNN's OpenMP runtime uses omp_get_max_threads() at run time; run() sets it from
// ridge::get_num_threads().
class OnednnBf16Matmul {
 public:
  // out must be DType::f32 or DType::bf16; lda/ldb/ldd are row strides (0: dense). a_kmajor: A is
  // stored [k,m]; b_kmajor: B is stored [k,n] (ridge's tn/tt and nn/tn layouts, as memory strides).
  OnednnBf16Matmul(int64_t m, int64_t n, int64_t k, DType out, int64_t lda = 0, int64_t ldb = 0,
                   int64_t ldd = 0, bool a_kmajor = false, bool b_kmajor = false);
  ~OnednnBf16Matmul();
  OnednnBf16Matmul(const OnednnBf16Matmul&) = delete;
  OnednnBf16Matmul& operator=(const OnednnBf16Matmul&) = delete;

  // d points to fp32 or bf16 elements according to `out`.
  void run(const bf16* a, const bf16* b, void* d);
  // The implementation oneDNN chose (e.g. "brg:avx512_core_bf16").
  std::string impl_name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ridge::gemm_peers
