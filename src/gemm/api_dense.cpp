// Public dense GEMM entry points (fp32 and bf16 inputs, every layout, PackedB): argument checks
// (check.hpp), the packed-weights type, the scalar reference twins, and the validated problem handed
// to the one driver (driver.cpp).
#include <algorithm>
#include <string>
#include <type_traits>

#include "gemm/check.hpp"
#include "gemm/driver.hpp"
#include "ridge/core/memory.hpp"
#include "ridge/core/threads.hpp"
#include "ridge/gemm.hpp"

namespace ridge::gemm {

using detail::Elem;
using detail::KernelInfo;
using detail::Problem;

struct PackedB::Impl {
  Buffer<std::byte> data;
  int64_t n = 0, k = 0, kp = 0;
  DType dtype = DType::f32;
  cpu::Isa isa = cpu::Isa::scalar;
  KernelInfo ki;
};

namespace {

int64_t ceil_div(int64_t x, int64_t m) {
  return (x + m - 1) / m;
}

bool a_kmajor(Layout l) {
  return l == Layout::tn || l == Layout::tt;
}
bool b_kmajor(Layout l) {
  return l == Layout::nn || l == Layout::tn;
}

template <typename TA, typename TD>
Problem make_problem(const char* fn, Layout layout, MatrixView<const TA> a, MatrixView<const TA> b,
                     MatrixView<TD> d, MatrixView<const TD> c) {
  const bool akm = a_kmajor(layout), bkm = b_kmajor(layout);
  check_view(fn, "b", b);
  check_ad_c(fn, a, d, c, bkm ? b.cols : b.rows, bkm ? b.rows : b.cols, akm, bkm);
  check(!overlap::overlaps(b, d), "{}: d overlaps b", fn);
  Problem p;
  p.m = d.rows;
  p.n = d.cols;
  p.k = akm ? a.rows : a.cols;
  const Elem in = std::is_same_v<TA, bf16> ? Elem::bf16 : Elem::f32;
  p.a = {a.data, a.ld, in, p.m, p.k, akm};
  p.b = {b.data, b.ld, in, p.n, p.k, bkm};
  p.d = d.data;
  p.ldd = d.ld;
  p.d_bf16 = std::is_same_v<TD, bf16>;
  p.c = c.data;
  p.ldc = c.ld;
  p.c_bf16 = p.d_bf16;
  return p;
}

template <typename TA, typename TD>
Problem make_problem(const char* fn, MatrixView<const TA> a, const PackedB& b, MatrixView<TD> d,
                     MatrixView<const TD> c) {
  check(!b.empty(), "{}: b is an empty PackedB (use PackedB::pack)", fn);
  const auto& impl = b.impl();
  check(impl.dtype == dtype_of<TA>(), "{}: b was packed from {} but a is {}", fn, dtype_name(impl.dtype),
        dtype_name(dtype_of<TA>()));
  check(impl.isa == cpu::active_isa(),
        "{}: b was packed for the {} path but the active path is {} (pack again)", fn,
        cpu::isa_name(impl.isa), cpu::isa_name(cpu::active_isa()));
  check_ad_c(fn, a, d, c, impl.n, impl.k);
  Problem p;
  p.m = a.rows;
  p.n = impl.n;
  p.k = impl.k;
  p.a = {a.data, a.ld, std::is_same_v<TA, bf16> ? Elem::bf16 : Elem::f32, p.m, p.k};
  p.d = d.data;
  p.ldd = d.ld;
  p.d_bf16 = std::is_same_v<TD, bf16>;
  p.c = c.data;
  p.ldc = c.ld;
  p.c_bf16 = p.d_bf16;
  p.b_panels = impl.data.data();
  p.packed_ki = &impl.ki;
  return p;
}

template <typename TB>
PackedB::Impl* pack_impl(MatrixView<const TB> b) {
  check_view("PackedB::pack", "b", b);
  auto* impl = new PackedB::Impl;
  impl->n = b.rows;
  impl->k = b.cols;
  impl->dtype = dtype_of<TB>();
  impl->isa = cpu::active_isa();
  impl->ki = detail::select_kernel(std::is_same_v<TB, bf16> ? Elem::bf16 : Elem::f32, dispatch::Work::blocked,
                                   impl->isa);
  impl->kp = detail::panel_k(impl->ki.panel, b.cols);
  const int64_t npanels = ceil_div(b.rows, impl->ki.nr);
  const size_t panel_bytes = static_cast<size_t>(impl->ki.nr * impl->kp) * detail::panel_elt(impl->ki.panel);
  impl->data = Buffer<std::byte>(static_cast<size_t>(npanels) * panel_bytes + 64, "gemm.packed_b");
  const KernelInfo ki = impl->ki;
#pragma omp parallel for num_threads(get_num_threads()) schedule(static)
  for (int64_t q = 0; q < npanels; ++q) {
    const int64_t cnt = std::min<int64_t>(ki.nr, b.rows - q * ki.nr);
    const detail::Operand src{b.data, b.ld, std::is_same_v<TB, bf16> ? Elem::bf16 : Elem::f32, b.rows,
                              b.cols};
    ki.pack_b(ki, src, q * ki.nr, cnt, 0, b.cols, ki.nr, impl->data.data() + q * panel_bytes, true);
  }
  return impl;
}

template <typename TA, typename TB, typename TD>
void reference(const char* fn, Layout layout, MatrixView<const TA> a, MatrixView<const TB> b,
               MatrixView<TD> d, MatrixView<const TD> c) {
  const bool akm = a_kmajor(layout), bkm = b_kmajor(layout);
  check_view(fn, "b", b);
  check_ad_c(fn, a, d, c, bkm ? b.cols : b.rows, bkm ? b.rows : b.cols, akm, bkm);
  auto f = [](auto x) {
    if constexpr (std::is_same_v<decltype(x), bf16>)
      return to_float(x);
    else
      return static_cast<float>(x);
  };
  const int64_t k = akm ? a.rows : a.cols;
  for (int64_t i = 0; i < d.rows; ++i) {
    for (int64_t j = 0; j < d.cols; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < k; ++p) acc += f(akm ? a(p, i) : a(i, p)) * f(bkm ? b(p, j) : b(j, p));
      if (c.data) acc += f(c(i, j));
      d(i, j) = acc;
    }
  }
}

}  // namespace

PackedB::PackedB() = default;
PackedB::~PackedB() = default;
PackedB::PackedB(PackedB&&) noexcept = default;
PackedB& PackedB::operator=(PackedB&&) noexcept = default;
PackedB PackedB::pack(MatrixView<const float> b) {
  PackedB p;
  p.impl_.reset(pack_impl(b));
  return p;
}
PackedB PackedB::pack(MatrixView<const bf16> b) {
  PackedB p;
  p.impl_.reset(pack_impl(b));
  return p;
}
int64_t PackedB::n() const {
  return impl_ ? impl_->n : 0;
}
int64_t PackedB::k() const {
  return impl_ ? impl_->k : 0;
}
DType PackedB::dtype() const {
  return impl_ ? impl_->dtype : DType::f32;
}
cpu::Isa PackedB::isa() const {
  return impl_ ? impl_->isa : cpu::Isa::scalar;
}
bool PackedB::empty() const {
  return !impl_;
}
const PackedB::Impl& PackedB::impl() const {
  check(impl_ != nullptr, "PackedB: empty (use PackedB::pack)");
  return *impl_;
}

namespace {

// Names for error messages, by input dtype and layout (static: the nt decode path is too short to
// pay for building a string per call).
const char* gemm_name(bool bf16_in, Layout layout, bool ref) {
  static const char* const names[2][2][4] = {
      {{"f32_gemm_nt", "f32_gemm_nn", "f32_gemm_tn", "f32_gemm_tt"},
       {"f32_gemm_nt_reference", "f32_gemm_nn_reference", "f32_gemm_tn_reference", "f32_gemm_tt_reference"}},
      {{"bf16_gemm_nt", "bf16_gemm_nn", "bf16_gemm_tn", "bf16_gemm_tt"},
       {"bf16_gemm_nt_reference", "bf16_gemm_nn_reference", "bf16_gemm_tn_reference",
        "bf16_gemm_tt_reference"}}};
  const auto l = static_cast<unsigned>(layout);
  check(l < 4, "{}_gemm: layout {} (expected Layout::nt, nn, tn or tt)", bf16_in ? "bf16" : "f32", l);
  return names[bf16_in][ref][l];
}

template <typename TA, typename TD>
void gemm_any(Layout layout, MatrixView<const TA> a, MatrixView<const TA> b, MatrixView<TD> d,
              MatrixView<const TD> c) {
  detail::run(make_problem(gemm_name(std::is_same_v<TA, bf16>, layout, false), layout, a, b, d, c));
}

}  // namespace

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::nt:
      return "nt";
    case Layout::nn:
      return "nn";
    case Layout::tn:
      return "tn";
    case Layout::tt:
      return "tt";
  }
  return "?";
}

Layout parse_layout(const std::string& text, const char* what) {
  for (Layout l : {Layout::nt, Layout::nn, Layout::tn, Layout::tt})
    if (text == layout_name(l)) return l;
  fail("{}: '{}' is not a GEMM layout (expected nt, nn, tn or tt)", what, text);
}

void f32_gemm(Layout layout, MatrixView<const float> a, MatrixView<const float> b, MatrixView<float> d,
              MatrixView<const float> c) {
  gemm_any(layout, a, b, d, c);
}
void f32_gemm(Layout layout, MatrixView<const float> a, MatrixView<const float> b, MatrixView<bf16> d,
              MatrixView<const bf16> c) {
  gemm_any(layout, a, b, d, c);
}
void bf16_gemm(Layout layout, MatrixView<const bf16> a, MatrixView<const bf16> b, MatrixView<float> d,
               MatrixView<const float> c) {
  gemm_any(layout, a, b, d, c);
}
void bf16_gemm(Layout layout, MatrixView<const bf16> a, MatrixView<const bf16> b, MatrixView<bf16> d,
               MatrixView<const bf16> c) {
  gemm_any(layout, a, b, d, c);
}

// The named entry points, one per input dtype, output dtype and layout.
#define RIDGE_GEMM_NAMED(FN, LAYOUT, TA, TD)                                                          \
  void FN(MatrixView<const TA> a, MatrixView<const TA> b, MatrixView<TD> d, MatrixView<const TD> c) { \
    detail::run(make_problem(#FN, Layout::LAYOUT, a, b, d, c));                                       \
  }
RIDGE_GEMM_NAMED(f32_gemm_nt, nt, float, float)
RIDGE_GEMM_NAMED(f32_gemm_nt, nt, float, bf16)
RIDGE_GEMM_NAMED(f32_gemm_nn, nn, float, float)
RIDGE_GEMM_NAMED(f32_gemm_nn, nn, float, bf16)
RIDGE_GEMM_NAMED(f32_gemm_tn, tn, float, float)
RIDGE_GEMM_NAMED(f32_gemm_tn, tn, float, bf16)
RIDGE_GEMM_NAMED(f32_gemm_tt, tt, float, float)
RIDGE_GEMM_NAMED(f32_gemm_tt, tt, float, bf16)
RIDGE_GEMM_NAMED(bf16_gemm_nt, nt, bf16, float)
RIDGE_GEMM_NAMED(bf16_gemm_nt, nt, bf16, bf16)
RIDGE_GEMM_NAMED(bf16_gemm_nn, nn, bf16, float)
RIDGE_GEMM_NAMED(bf16_gemm_nn, nn, bf16, bf16)
RIDGE_GEMM_NAMED(bf16_gemm_tn, tn, bf16, float)
RIDGE_GEMM_NAMED(bf16_gemm_tn, tn, bf16, bf16)
RIDGE_GEMM_NAMED(bf16_gemm_tt, tt, bf16, float)
RIDGE_GEMM_NAMED(bf16_gemm_tt, tt, bf16, bf16)
#undef RIDGE_GEMM_NAMED

void f32_gemm_nt(MatrixView<const float> a, const PackedB& b, MatrixView<float> d,
                 MatrixView<const float> c) {
  detail::run(make_problem("f32_gemm_nt", a, b, d, c));
}
void f32_gemm_nt(MatrixView<const float> a, const PackedB& b, MatrixView<bf16> d, MatrixView<const bf16> c) {
  detail::run(make_problem("f32_gemm_nt", a, b, d, c));
}
void bf16_gemm_nt(MatrixView<const bf16> a, const PackedB& b, MatrixView<float> d,
                  MatrixView<const float> c) {
  detail::run(make_problem("bf16_gemm_nt", a, b, d, c));
}
void bf16_gemm_nt(MatrixView<const bf16> a, const PackedB& b, MatrixView<bf16> d, MatrixView<const bf16> c) {
  detail::run(make_problem("bf16_gemm_nt", a, b, d, c));
}

void f32_gemm_reference(Layout layout, MatrixView<const float> a, MatrixView<const float> b,
                        MatrixView<float> d, MatrixView<const float> c) {
  reference(gemm_name(false, layout, true), layout, a, b, d, c);
}
void bf16_gemm_reference(Layout layout, MatrixView<const bf16> a, MatrixView<const bf16> b,
                         MatrixView<float> d, MatrixView<const float> c) {
  reference(gemm_name(true, layout, true), layout, a, b, d, c);
}
#define RIDGE_GEMM_REFERENCE(DT, LAYOUT, TA)                                                               \
  void DT##_gemm_##LAYOUT##_reference(MatrixView<const TA> a, MatrixView<const TA> b, MatrixView<float> d, \
                                      MatrixView<const float> c) {                                         \
    DT##_gemm_reference(Layout::LAYOUT, a, b, d, c);                                                       \
  }
RIDGE_GEMM_REFERENCE(f32, nt, float)
RIDGE_GEMM_REFERENCE(f32, nn, float)
RIDGE_GEMM_REFERENCE(f32, tn, float)
RIDGE_GEMM_REFERENCE(f32, tt, float)
RIDGE_GEMM_REFERENCE(bf16, nt, bf16)
RIDGE_GEMM_REFERENCE(bf16, nn, bf16)
RIDGE_GEMM_REFERENCE(bf16, tn, bf16)
RIDGE_GEMM_REFERENCE(bf16, tt, bf16)
#undef RIDGE_GEMM_REFERENCE

Blocking blocking(DType input, cpu::Isa isa, int64_t k) {
  check(input == DType::f32 || input == DType::bf16 || input == DType::fp8_e4m3,
        "gemm::blocking: input dtype {} (expected f32, bf16 or fp8_e4m3)", dtype_name(input));
  check(k >= 0, "gemm::blocking: k = {} (expected >= 0)", k);
  const Elem in = input == DType::bf16 ? Elem::bf16 : input == DType::fp8_e4m3 ? Elem::fp8 : Elem::f32;
  return detail::derive_blocking(detail::select_kernel(in, dispatch::Work::blocked, isa),
                                 std::max<int64_t>(k, 1));
}

int get_num_threads() {
  return ridge::get_num_threads();
}
void set_num_threads(int n) {
  ridge::set_num_threads(n);
}

}  // namespace ridge::gemm
