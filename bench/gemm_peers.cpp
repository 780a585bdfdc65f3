// OpenBLAS and oneDNN peers for the GEMM benchmarks (see gemm_peers.hpp).
#include "gemm_peers.hpp"

#include <omp.h>

#include "core/check.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/threads.hpp"

#if RIDGE_HAVE_OPENBLAS
#include <cblas.h>
#endif
#if RIDGE_HAVE_DNNL
#include <dnnl.hpp>
#endif

#if RIDGE_HAVE_OPENBLAS
extern "C" char* openblas_get_corename(void);
#endif

namespace ridge::gemm_peers {

bool openblas_available() {
#if RIDGE_HAVE_OPENBLAS
  return true;
#else
  return false;
#endif
}

std::string openblas_corename() {
#if RIDGE_HAVE_OPENBLAS
  const char* s = openblas_get_corename();
  return s ? s : "";
#else
  return "";
#endif
}

void openblas_set_threads(int n) {
#if RIDGE_HAVE_OPENBLAS
  openblas_set_num_threads(n);
#else
  (void)n;
#endif
}

void openblas_sgemm_nt(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                       int64_t ldb, float* d, int64_t ldd, bool accumulate) {
  openblas_sgemm(false, false, m, n, k, a, lda, b, ldb, d, ldd, accumulate);
}

void openblas_sgemm(bool a_kmajor, bool b_kmajor, int64_t m, int64_t n, int64_t k, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float* d, int64_t ldd, bool accumulate) {
#if RIDGE_HAVE_OPENBLAS
  cblas_sgemm(CblasRowMajor, a_kmajor ? CblasTrans : CblasNoTrans, b_kmajor ? CblasNoTrans : CblasTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), accumulate ? 1.0f : 0.0f, d,
              static_cast<blasint>(ldd));
#else
  (void)a_kmajor, (void)b_kmajor, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)d,
      (void)ldd, (void)accumulate;
  fail("OpenBLAS is not in this build (install libopenblas-dev and reconfigure)");
#endif
}

bool onednn_available() {
#if RIDGE_HAVE_DNNL
  return true;
#else
  return false;
#endif
}

std::string onednn_version() {
#if RIDGE_HAVE_DNNL
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
#else
  return "";
#endif
}

#if RIDGE_HAVE_DNNL
struct OnednnBf16Matmul::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::memory::desc a_md, b_md, d_md;
  dnnl::matmul prim;
  std::string impl;
};

OnednnBf16Matmul::OnednnBf16Matmul(int64_t m, int64_t n, int64_t k, DType out, int64_t lda, int64_t ldb,
                                   int64_t ldd, bool a_kmajor, bool b_kmajor)
    : impl_(std::make_unique<Impl>()) {
  check(out == DType::f32 || out == DType::bf16, "oneDNN matmul: output {} (expected f32 or bf16)",
        dtype_name(out));
  check(m > 0 && n > 0 && k > 0, "oneDNN matmul: shape m={} n={} k={} (expected all > 0)", m, n, k);
  using dt = dnnl::memory::data_type;
  lda = lda ? lda : (a_kmajor ? m : k);
  ldb = ldb ? ldb : (b_kmajor ? n : k);
  ldd = ldd ? ldd : n;
  // B[n,k] row-major is the [k,n] operand with strides {1, ldb}: oneDNN reads it transposed (and
  // likewise A[k,m] as the [m,k] operand with strides {1, lda}).
  using dims = dnnl::memory::dims;
  impl_->a_md = dnnl::memory::desc({m, k}, dt::bf16, a_kmajor ? dims{1, lda} : dims{lda, 1});
  impl_->b_md = dnnl::memory::desc({k, n}, dt::bf16, b_kmajor ? dims{ldb, 1} : dims{1, ldb});
  impl_->d_md =
      dnnl::memory::desc({m, n}, out == DType::f32 ? dt::f32 : dt::bf16, dnnl::memory::dims{ldd, 1});
  // oneDNN has no bf16 matmul for CPUs without AVX512_BF16/AMX/AVX-512 (an AVX2 machine): its
  // dnnl::error becomes a ridge::Error the benchmarks turn into a note, not an internal error.
  try {
#if DNNL_VERSION_MAJOR >= 3
    auto pd = dnnl::matmul::primitive_desc(impl_->engine, impl_->a_md, impl_->b_md, impl_->d_md);
#else
    auto pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(impl_->a_md, impl_->b_md, impl_->d_md),
                                           impl_->engine);
#endif
    impl_->impl = pd.impl_info_str();
    impl_->prim = dnnl::matmul(pd);
  } catch (const dnnl::error& e) {
    fail("oneDNN {} has no bf16 matmul for this CPU ({})", onednn_version(), e.what());
  }
}

OnednnBf16Matmul::~OnednnBf16Matmul() = default;

void OnednnBf16Matmul::run(const bf16* a, const bf16* b, void* d) {
  omp_set_num_threads(get_num_threads());
  dnnl::memory am(impl_->a_md, impl_->engine, const_cast<bf16*>(a));
  dnnl::memory bm(impl_->b_md, impl_->engine, const_cast<bf16*>(b));
  dnnl::memory dm(impl_->d_md, impl_->engine, d);
  impl_->prim.execute(impl_->stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, dm}});
  impl_->stream.wait();
}

std::string OnednnBf16Matmul::impl_name() const {
  return impl_->impl;
}
#else
struct OnednnBf16Matmul::Impl {};
OnednnBf16Matmul::OnednnBf16Matmul(int64_t, int64_t, int64_t, DType, int64_t, int64_t, int64_t, bool, bool) {
  fail("oneDNN is not in this build (install libdnnl-dev and reconfigure)");
}
OnednnBf16Matmul::~OnednnBf16Matmul() = default;
void OnednnBf16Matmul::run(const bf16*, const bf16*, void*) {}
std::string OnednnBf16Matmul::impl_name() const {
  return "";
}
#endif

}  // namespace ridge::gemm_peers
