// Public FP8 GEMM entry points: argument checks, the packed-weights type, and dispatch to the
// per-ISA implementation chosen by cpu::active_isa().
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "gemm/check.hpp"
#include "gemm/fp8_internal.hpp"
#include "ridge/core/error.hpp"
#include "ridge/gemm_fp8.hpp"
#include "core/check.hpp"

namespace ridge::gemm {

using fp8::check_matrix;

int64_t m_alignment_for_contiguous_layout() { return 64; }

namespace fp8 {

namespace {
std::atomic<bool> g_allow_vbmi{true};
}

void allow_vbmi(bool allowed) { g_allow_vbmi.store(allowed); }
bool uses_vbmi() { return g_allow_vbmi.load(std::memory_order_relaxed) && cpu::info().features.avx512_vbmi; }

void run(const Problem& p) {
  if (p.m == 0 || p.n == 0) return;
  switch (cpu::active_isa()) {
    case cpu::Isa::avx512bf16: return uses_vbmi() ? run_avx512bf16_vbmi(p) : run_avx512bf16(p);
    case cpu::Isa::avx512: return run_avx512(p);
    case cpu::Isa::avx2: return run_avx2(p);
    case cpu::Isa::scalar: return run_reference(p);
  }
  run_reference(p);
}

}  // namespace fp8

namespace {

template <typename T>
std::pair<const char*, const char*> byte_range(const MatrixView<T>& v) {
  if (v.rows == 0 || v.cols == 0) return {nullptr, nullptr};
  const char* lo = reinterpret_cast<const char*>(v.data);
  return {lo, lo + ((v.rows - 1) * v.ld + v.cols) * sizeof(T)};
}

template <typename T, typename U>
bool overlaps(const MatrixView<T>& x, const MatrixView<U>& y) {
  auto [a0, a1] = byte_range(x);
  auto [b0, b1] = byte_range(y);
  return a0 && b0 && a0 < b1 && b0 < a1;
}

void check_dims(int64_t m, int64_t n, int64_t k) {
  check(m >= 0 && n >= 0, "fp8 gemm: m and n must be >= 0, got m={}, n={}", m, n);
  check(k >= 1, "fp8 gemm: k (columns of a and b) must be >= 1, got {}", k);
}

// Checks everything but B and returns the problem with A, D and C filled in.
template <typename Out>
fp8::Problem make_problem(MatrixView<const fp8_e4m3> a, MatrixView<const float> sa, int64_t n, int64_t k,
                          MatrixView<Out> d, MatrixView<const float> c) {
  check_dims(a.rows, n, k);
  const int64_t m = a.rows;
  check_matrix(a, "a", m, k);
  check_matrix(sa, "a_scales", m, fp8_scale_blocks(k));
  check_matrix(d, "d", m, n);
  if (c.data) {
    check_matrix(c, "c", m, n);
    const bool same = static_cast<const void*>(c.data) == static_cast<const void*>(d.data) &&
                      (std::is_same_v<Out, float> && c.ld == d.ld);
    check(same || !overlaps(c, d), "c: overlaps d without being the same fp32 matrix (same pointer and ld)");
  }
  check(!overlaps(d, a) && !overlaps(d, sa), "d: overlaps an input (a or a_scales)");
  fp8::Problem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = reinterpret_cast<const uint8_t*>(a.data);
  p.lda = a.ld;
  p.sa = sa.data;
  p.ldsa = sa.ld;
  p.d = d.data;
  p.ldd = d.ld;
  p.d_bf16 = std::is_same_v<Out, bf16>;
  p.c = c.data;
  p.ldc = c.ld;
  return p;
}

template <typename Out>
void dense(MatrixView<const fp8_e4m3> a, MatrixView<const float> sa, MatrixView<const fp8_e4m3> b,
           MatrixView<const float> sb, MatrixView<Out> d, MatrixView<const float> c) {
  check(b.cols == a.cols, "b: expected {} columns (k, the columns of a), got {}", a.cols, b.cols);
  auto p = make_problem(a, sa, b.rows, a.cols, d, c);
  check_matrix(b, "b", p.n, p.k);
  check_matrix(sb, "b_scales", fp8_scale_blocks(p.n), fp8_scale_blocks(p.k));
  check(!overlaps(d, b) && !overlaps(d, sb), "d: overlaps an input (b or b_scales)");
  p.b = reinterpret_cast<const uint8_t*>(b.data);
  p.ldb = b.ld;
  p.sb = sb.data;
  p.ldsb = sb.ld;
  fp8::run(p);
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

void fp8_gemm_nt_reference(MatrixView<const fp8_e4m3> a, MatrixView<const float> sa, MatrixView<const fp8_e4m3> b,
                           MatrixView<const float> sb, MatrixView<float> d, MatrixView<const float> c) {
  check(b.cols == a.cols, "b: expected {} columns (k, the columns of a), got {}", a.cols, b.cols);
  auto p = make_problem(a, sa, b.rows, a.cols, d, c);
  check_matrix(b, "b", p.n, p.k);
  check_matrix(sb, "b_scales", fp8_scale_blocks(p.n), fp8_scale_blocks(p.k));
  p.b = reinterpret_cast<const uint8_t*>(b.data);
  p.ldb = b.ld;
  p.sb = sb.data;
  p.ldsb = sb.ld;
  if (p.m && p.n) fp8::run_reference(p);
}

// ---- packed weights ----

struct PackedFp8B::Impl {
  int64_t n = 0, k = 0, pairs = 0, panels = 0;
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
  PackedFp8B out;
  out.impl_ = std::make_unique<Impl>();
  Impl& im = *out.impl_;
  im.n = b.rows;
  im.k = b.cols;
  im.pairs = (b.cols + 1) / 2;
  im.panels = (b.rows + fp8::kPanelRows - 1) / fp8::kPanelRows;
  im.data = Buffer<uint8_t>(static_cast<size_t>(im.panels * im.pairs * fp8::kPanelPairBytes), "gemm.fp8.packed_b");
  std::memset(im.data.data(), 0, im.data.size());
  for (int64_t j = 0; j < im.n; ++j) {
    uint8_t* panel = im.data.data() + (j / fp8::kPanelRows) * im.pairs * fp8::kPanelPairBytes + (j % fp8::kPanelRows) * 2;
    const uint8_t* row = reinterpret_cast<const uint8_t*>(b.data + j * b.ld);
    for (int64_t kk = 0; kk < im.k; ++kk) panel[(kk / 2) * fp8::kPanelPairBytes + (kk & 1)] = row[kk];
  }
  im.scales = Buffer<float>(static_cast<size_t>(sb.rows * sb.cols), "gemm.fp8.packed_b_scales");
  for (int64_t r = 0; r < sb.rows; ++r)
    for (int64_t cc = 0; cc < sb.cols; ++cc) im.scales[r * sb.cols + cc] = sb(r, cc);
  return out;
}

int64_t PackedFp8B::n() const { return impl_ ? impl_->n : 0; }
int64_t PackedFp8B::k() const { return impl_ ? impl_->k : 0; }
bool PackedFp8B::empty() const { return !impl_; }
size_t PackedFp8B::bytes() const { return impl_ ? impl_->data.size() : 0; }
const PackedFp8B::Impl& PackedFp8B::impl() const {
  check(impl_ != nullptr, "b: the PackedFp8B is empty (use PackedFp8B::pack)");
  return *impl_;
}

namespace {

template <typename Out>
void dense_packed(MatrixView<const fp8_e4m3> a, MatrixView<const float> sa, const PackedFp8B& b, MatrixView<Out> d,
                  MatrixView<const float> c) {
  const auto& im = b.impl();
  check(im.k == a.cols, "b: packed with k={} but a has {} columns", im.k, a.cols);
  auto p = make_problem(a, sa, im.n, a.cols, d, c);
  p.b_packed = im.data.data();
  p.packed_pairs = im.pairs;
  p.sb = im.scales.data();
  p.ldsb = fp8_scale_blocks(im.k);
  fp8::run(p);
}

}  // namespace

void fp8_gemm_nt(MatrixView<const fp8_e4m3> a, MatrixView<const float> sa, const PackedFp8B& b, MatrixView<bf16> d,
                 MatrixView<const float> c) {
  dense_packed(a, sa, b, d, c);
}
void fp8_gemm_nt(MatrixView<const fp8_e4m3> a, MatrixView<const float> sa, const PackedFp8B& b, MatrixView<float> d,
                 MatrixView<const float> c) {
  dense_packed(a, sa, b, d, c);
}

}  // namespace ridge::gemm
