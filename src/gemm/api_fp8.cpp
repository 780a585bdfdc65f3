// Public FP8 GEMM entry points (dense and packed B): argument checks (check.hpp), the packed-weights
// type, and the validated problem handed to the one driver (driver.cpp), which takes the FP8 kernels
// the dispatch policy chooses.
#include <cstring>
#include <memory>
#include <type_traits>

#include "gemm/check.hpp"
#include "gemm/driver.hpp"
#include "ridge/gemm_fp8.hpp"

namespace ridge::gemm {

int64_t m_alignment_for_contiguous_layout() {
  return 64;
}

namespace {

using detail::Elem;

// The problem with A, its scales, D and C filled in (checked by the caller).
template <typename Out>
detail::Problem fp8_problem(MatrixView<const fp8_e4m3> a, MatrixView<const float> sa, int64_t n,
                            MatrixView<Out> d, MatrixView<const float> c) {
  detail::Problem p;
  p.m = a.rows;
  p.n = n;
  p.k = a.cols;
  p.a.data = a.data;
  p.a.ld = a.ld;
  p.a.elem = Elem::fp8;
  p.a.rows = a.rows;
  p.a.k = a.cols;
  p.sa = sa.data;
  p.ldsa = sa.ld;
  p.d = d.data;
  p.ldd = d.ld;
  p.d_bf16 = std::is_same_v<Out, bf16>;
  p.c = c.data;
  p.ldc = c.ld;
  return p;
}

void set_b(detail::Problem& p, const fp8_e4m3* b, int64_t ldb, const float* sb, int64_t ldsb) {
  p.b.data = b;
  p.b.ld = ldb;
  p.b.elem = Elem::fp8;
  p.b.rows = p.n;
  p.b.k = p.k;
  p.sb = sb;
  p.ldsb = ldsb;
}

template <typename Out>
void dense(MatrixView<const fp8_e4m3> a, MatrixView<const float> sa, MatrixView<const fp8_e4m3> b,
           MatrixView<const float> sb, MatrixView<Out> d, MatrixView<const float> c) {
  check(b.cols == a.cols, "b: expected {} columns (k, the columns of a), got {}", a.cols, b.cols);
  check_fp8_a_d_c(a, sa, b.rows, a.cols, d, c);
  check_matrix(b, "b", b.rows, a.cols);
  check_matrix(sb, "b_scales", fp8_scale_blocks(b.rows), fp8_scale_blocks(a.cols));
  check(!overlap::overlaps(d, b) && !overlap::overlaps(d, sb), "d: overlaps an input (b or b_scales)");
  detail::Problem p = fp8_problem(a, sa, b.rows, d, c);
  set_b(p, b.data, b.ld, sb.data, sb.ld);
  detail::run(p);
}

}  // namespace

void fp8_gemm_nt(MatrixView<const fp8_e4m3> a, MatrixView<const float> sa, MatrixView<const fp8_e4m3> b,
                 MatrixView<const float> sb, MatrixView<bf16> d, MatrixView<const float> c) {
  dense(a, sa, b, sb, d, c);
}
void fp8_gemm_nt(MatrixView<const fp8_e4m3> a, MatrixView<const float> sa, MatrixView<const fp8_e4m3> b,
                 MatrixView<const float> sb, MatrixView<float> d, MatrixView<const float> c) {
  dense(a, sa, b, sb, d, c);
}

// ---- packed weights ----

struct PackedFp8B::Impl {
  int64_t n = 0, k = 0, pairs = 0, panels = 0;
  bool finite = false;   // no NaN code (magnitude 0x7F): the kernels may widen without the NaN fix
  Buffer<uint8_t> data;  // [panels][pairs][32 rows][2]
  Buffer<float> scales;  // [ceil(n/128), ceil(k/128)]
};

PackedFp8B::PackedFp8B() = default;
PackedFp8B::~PackedFp8B() = default;
PackedFp8B::PackedFp8B(PackedFp8B&&) noexcept = default;
PackedFp8B& PackedFp8B::operator=(PackedFp8B&&) noexcept = default;

PackedFp8B PackedFp8B::pack(MatrixView<const fp8_e4m3> b, MatrixView<const float> sb) {
  check(b.rows >= 1 && b.cols >= 1, "b: expected a non-empty [n, k] matrix, got [{}, {}]", b.rows, b.cols);
  check_matrix(b, "b", b.rows, b.cols);
  check_matrix(sb, "b_scales", fp8_scale_blocks(b.rows), fp8_scale_blocks(b.cols));
  constexpr int64_t rows = detail::kFp8PanelRows, line = detail::kFp8PanelPairBytes;
  PackedFp8B out;
  out.impl_ = std::make_unique<Impl>();
  Impl& im = *out.impl_;
  im.n = b.rows;
  im.k = b.cols;
  im.pairs = (b.cols + 1) / 2;
  im.panels = (b.rows + rows - 1) / rows;
  im.data = Buffer<uint8_t>(static_cast<size_t>(im.panels * im.pairs * line), "gemm.fp8.packed_b");
  std::memset(im.data.data(), 0, im.data.size());
  bool nan = false;
  for (int64_t j = 0; j < im.n; ++j) {
    uint8_t* panel = im.data.data() + (j / rows) * im.pairs * line + (j % rows) * 2;
    const uint8_t* row = reinterpret_cast<const uint8_t*>(b.data + j * b.ld);
    for (int64_t kk = 0; kk < im.k; ++kk) {
      panel[(kk / 2) * line + (kk & 1)] = row[kk];
      nan |= (row[kk] & 0x7F) == 0x7F;
    }
  }
  im.finite = !nan;
  im.scales = Buffer<float>(static_cast<size_t>(sb.rows * sb.cols), "gemm.fp8.packed_b_scales");
  for (int64_t r = 0; r < sb.rows; ++r)
    for (int64_t cc = 0; cc < sb.cols; ++cc) im.scales[r * sb.cols + cc] = sb(r, cc);
  return out;
}

int64_t PackedFp8B::n() const {
  return impl_ ? impl_->n : 0;
}
int64_t PackedFp8B::k() const {
  return impl_ ? impl_->k : 0;
}
bool PackedFp8B::empty() const {
  return !impl_;
}
size_t PackedFp8B::bytes() const {
  return impl_ ? impl_->data.size() : 0;
}
const PackedFp8B::Impl& PackedFp8B::impl() const {
  check(impl_ != nullptr, "b: the PackedFp8B is empty (use PackedFp8B::pack)");
  return *impl_;
}

namespace {

template <typename Out>
void dense_packed(MatrixView<const fp8_e4m3> a, MatrixView<const float> sa, const PackedFp8B& b,
                  MatrixView<Out> d, MatrixView<const float> c) {
  const auto& im = b.impl();
  check(im.k == a.cols, "b: packed with k={} but a has {} columns", im.k, a.cols);
  check_fp8_a_d_c(a, sa, im.n, a.cols, d, c);
  detail::Problem p = fp8_problem(a, sa, im.n, d, c);
  detail::set_packed_fp8_b(p, b);
  detail::run(p);
}

}  // namespace

void detail::set_packed_fp8_b(Problem& p, const PackedFp8B& b) {
  const auto& im = b.impl();
  set_b(p, reinterpret_cast<const fp8_e4m3*>(im.data.data()), im.pairs, im.scales.data(),
        fp8_scale_blocks(im.k));
  p.b.fp8_panels = true;
  p.b.fp8_finite = im.finite;
}

void fp8_gemm_nt(MatrixView<const fp8_e4m3> a, MatrixView<const float> sa, const PackedFp8B& b,
                 MatrixView<bf16> d, MatrixView<const float> c) {
  dense_packed(a, sa, b, d, c);
}
void fp8_gemm_nt(MatrixView<const fp8_e4m3> a, MatrixView<const float> sa, const PackedFp8B& b,
                 MatrixView<float> d, MatrixView<const float> c) {
  dense_packed(a, sa, b, d, c);
}

}  // namespace ridge::gemm
