// ridge.gemm: dense fp32/bf16 GEMMs in every layout, the grouped (MoE) GEMMs, DeepGEMM's fp8 entry points
// and the quantization helpers. Everything writes into arrays the caller passes (python/ridge/gemm.py
// allocates when asked to); the GIL is released while a kernel runs.
#include <chrono>

#include "common.hpp"
#include "ridge/gemm.hpp"
#include "ridge/gemm_fp8.hpp"
#include "core/check.hpp"

namespace ridge::py {
namespace {

// Calls f(T{}) for the inputs of `in_dtype` ("float32" or "bfloat16").
template <typename F>
void by_input(const std::string& in_dtype, F&& f) {
  if (in_dtype == "float32")
    f(float{});
  else if (in_dtype == "bfloat16")
    f(bf16{});
  else
    fail("in_dtype: '{}' is not float32 or bfloat16", in_dtype);
}

// Calls f(T{}, TD{}) for the inputs of `in_dtype` and d's dtype (float32 or bfloat16).
template <typename F>
void by_types(const std::string& in_dtype, const Out& d, F&& f) {
  const DType out = array_dtype(d, "d");
  by_input(in_dtype, [&](auto t) {
    if (out == DType::f32)
      f(t, float{});
    else if (out == DType::bf16)
      f(t, bf16{});
    else
      throw nb::type_error(
          fmt::format("d: expected a float32 or bfloat16 array, got {}", dtype_name(out)).c_str());
  });
}

// D = (C +) op(A) op(B) for one layout, inputs of `in_dtype`, D (and C) float32 or bfloat16.
void dense(const std::string& layout_name, const std::string& in_dtype, const In& a, const In& b,
           const Out& d, const std::optional<In>& c) {
  const gemm::Layout layout = gemm::parse_layout(layout_name, "layout");
  if (c)
    check(array_dtype(*c, "c") == array_dtype(d, "d"), "c: must have d's dtype ({})",
          dtype_name(array_dtype(d, "d")));
  by_types(in_dtype, d, [&](auto t, auto td) {
    using T = decltype(t);
    using TD = decltype(td);
    auto av = matrix<const T>(a, "a");
    auto bv = matrix<const T>(b, "b");
    auto dv = matrix<TD>(d, "d");
    auto cv = c ? matrix<const TD>(*c, "c") : MatrixView<const TD>{};
    nb::gil_scoped_release release;
    if constexpr (std::is_same_v<T, float>)
      gemm::f32_gemm(layout, av, bv, dv, cv);
    else
      gemm::bf16_gemm(layout, av, bv, dv, cv);
  });
}

// The M-grouped contiguous GEMMs (nt or nn): a [m_sum, k], b [G, n, k] or [G, k, n], d [m_sum, n].
void m_grouped_contiguous(const std::string& layout_name, const std::string& in_dtype, const In& a,
                          const In& b, const Out& d, const In& m_indices) {
  const gemm::Layout layout = gemm::parse_layout(layout_name, "layout");
  check(layout == gemm::Layout::nt || layout == gemm::Layout::nn, "layout: '{}' (expected nt or nn)",
        layout_name);
  by_types(in_dtype, d, [&](auto t, auto td) {
    using T = decltype(t);
    auto av = matrix<const T>(a, "a");
    auto bv = tensor<const T>(b, "b", 3);
    auto dv = matrix<decltype(td)>(d, "d");
    auto idx = int32_vector(m_indices, "m_indices");
    nb::gil_scoped_release release;
    const bool nn = layout == gemm::Layout::nn;
    if constexpr (std::is_same_v<T, float>)
      nn ? gemm::m_grouped_f32_gemm_nn_contiguous(av, bv, dv, idx)
         : gemm::m_grouped_f32_gemm_nt_contiguous(av, bv, dv, idx);
    else
      nn ? gemm::m_grouped_bf16_gemm_nn_contiguous(av, bv, dv, idx)
         : gemm::m_grouped_bf16_gemm_nt_contiguous(av, bv, dv, idx);
  });
}

// The M-grouped masked GEMMs: a [G, m_max, k], b [G, n, k], d [G, m_max, n].
void m_grouped_masked(const std::string& in_dtype, const In& a, const In& b, const Out& d, const In& masked_m,
                      int64_t expected_m) {
  by_types(in_dtype, d, [&](auto t, auto td) {
    using T = decltype(t);
    auto av = tensor<const T>(a, "a", 3);
    auto bv = tensor<const T>(b, "b", 3);
    auto dv = tensor<decltype(td)>(d, "d", 3);
    auto mm = int32_vector(masked_m, "masked_m");
    nb::gil_scoped_release release;
    if constexpr (std::is_same_v<T, float>)
      gemm::m_grouped_f32_gemm_nt_masked(av, bv, dv, mm, expected_m);
    else
      gemm::m_grouped_bf16_gemm_nt_masked(av, bv, dv, mm, expected_m);
  });
}

// The K-grouped GEMMs: a [k_sum, m], b [k_sum, n], d (and c, which may be d) float32 [G, m, n].
void k_grouped_contiguous(const std::string& in_dtype, const In& a, const In& b, const Out& d,
                          const In& k_indices, const std::optional<In>& c) {
  by_input(in_dtype, [&](auto t) {
    using T = decltype(t);
    const auto idx = int32_vector(k_indices, "k_indices");
    const MatrixView<const T> av = matrix<const T>(a, "a"), bv = matrix<const T>(b, "b");
    const TensorView<float> dv = tensor<float>(d, "d", 3);
    const TensorView<const float> cv = c ? tensor<const float>(*c, "c", 3) : TensorView<const float>{};
    nb::gil_scoped_release release;
    if constexpr (std::is_same_v<T, float>)
      gemm::k_grouped_f32_gemm_tn_contiguous(av, bv, dv, idx, cv);
    else
      gemm::k_grouped_bf16_gemm_tn_contiguous(av, bv, dv, idx, cv);
  });
}

void fp8_dense(const In& a, const In& sfa, const In& b, const In& sfb, const Out& d,
               const std::optional<In>& c) {
  auto av = matrix<const fp8_e4m3>(a, "a");
  auto sav = matrix<const float>(sfa, "sfa");
  auto bv = matrix<const fp8_e4m3>(b, "b");
  auto sbv = matrix<const float>(sfb, "sfb");
  auto cv = c ? matrix<const float>(*c, "c") : MatrixView<const float>{};
  const DType out = array_dtype(d, "d");
  if (out == DType::bf16) {
    auto dv = matrix<bf16>(d, "d");
    nb::gil_scoped_release release;
    gemm::fp8_gemm_nt(av, sav, bv, sbv, dv, cv);
  } else if (out == DType::f32) {
    auto dv = matrix<float>(d, "d");
    nb::gil_scoped_release release;
    gemm::fp8_gemm_nt(av, sav, bv, sbv, dv, cv);
  } else {
    throw nb::type_error(
        fmt::format("d: expected a bfloat16 or float32 array, got {}", dtype_name(out)).c_str());
  }
}

void grouped_contiguous(const In& a, const In& sfa, const In& b, const In& sfb, const Out& d,
                        const In& m_indices) {
  auto av = matrix<const fp8_e4m3>(a, "a");
  auto sav = matrix<const float>(sfa, "sfa");
  auto bv = tensor<const fp8_e4m3>(b, "b", 3);
  auto sbv = tensor<const float>(sfb, "sfb", 3);
  auto dv = matrix<bf16>(d, "d");
  auto idx = int32_vector(m_indices, "m_indices");
  nb::gil_scoped_release release;
  gemm::m_grouped_fp8_gemm_nt_contiguous(av, sav, bv, sbv, dv, idx);
}

void grouped_masked(const In& a, const In& sfa, const In& b, const In& sfb, const Out& d, const In& masked_m,
                    int64_t expected_m) {
  auto av = tensor<const fp8_e4m3>(a, "a", 3);
  auto sav = tensor<const float>(sfa, "sfa", 3);
  auto bv = tensor<const fp8_e4m3>(b, "b", 3);
  auto sbv = tensor<const float>(sfb, "sfb", 3);
  auto dv = tensor<bf16>(d, "d", 3);
  auto mm = int32_vector(masked_m, "masked_m");
  nb::gil_scoped_release release;
  gemm::m_grouped_fp8_gemm_nt_masked(av, sav, bv, sbv, dv, mm, expected_m);
}

template <bool PerToken>
void cast_to_fp8(const In& x, const Out& q, const Out& scales) {
  auto xv = matrix<const float>(x, "x");
  auto qv = matrix<fp8_e4m3>(q, "q");
  auto sv = matrix<float>(scales, "scales");
  nb::gil_scoped_release release;
  if constexpr (PerToken)
    gemm::per_token_cast_to_fp8(xv, qv, sv);
  else
    gemm::per_block_cast_to_fp8(xv, qv, sv);
}

// Seconds per call of the fp32 nt kernel, timed in a C++ loop over the same arrays: the baseline
// tools/python_call_overhead.py subtracts to get what the Python layer adds.
double time_fp32_nt(const In& a, const In& b, const Out& d, int iters) {
  check(iters >= 1, "iters: must be >= 1, got {}", iters);
  auto av = matrix<const float>(a, "a");
  auto bv = matrix<const float>(b, "b");
  auto dv = matrix<float>(d, "d");
  nb::gil_scoped_release release;
  gemm::f32_gemm_nt(av, bv, dv);  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) gemm::f32_gemm_nt(av, bv, dv);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

}  // namespace

void bind_gemm(nb::module_& m) {
  m.def("dense", &dense, nb::arg("layout"), nb::arg("in_dtype"), nb::arg("a"), nb::arg("b"), nb::arg("d"),
        nb::arg("c").none() = nb::none());
  m.def("fp8_gemm_nt", &fp8_dense, nb::arg("a"), nb::arg("sfa"), nb::arg("b"), nb::arg("sfb"), nb::arg("d"),
        nb::arg("c").none() = nb::none());
  m.def("m_grouped_fp8_gemm_nt_contiguous", &grouped_contiguous, nb::arg("a"), nb::arg("sfa"), nb::arg("b"),
        nb::arg("sfb"), nb::arg("d"), nb::arg("m_indices"));
  m.def("m_grouped_fp8_gemm_nt_masked", &grouped_masked, nb::arg("a"), nb::arg("sfa"), nb::arg("b"),
        nb::arg("sfb"), nb::arg("d"), nb::arg("masked_m"), nb::arg("expected_m"));
  m.def("m_grouped_contiguous", &m_grouped_contiguous, nb::arg("layout"), nb::arg("in_dtype"), nb::arg("a"),
        nb::arg("b"), nb::arg("d"), nb::arg("m_indices"));
  m.def("m_grouped_masked", &m_grouped_masked, nb::arg("in_dtype"), nb::arg("a"), nb::arg("b"), nb::arg("d"),
        nb::arg("masked_m"), nb::arg("expected_m"));
  m.def("k_grouped_contiguous", &k_grouped_contiguous, nb::arg("in_dtype"), nb::arg("a"), nb::arg("b"),
        nb::arg("d"), nb::arg("k_indices"), nb::arg("c").none() = nb::none());
  m.def("per_token_cast_to_fp8", &cast_to_fp8<true>, nb::arg("x"), nb::arg("q"), nb::arg("scales"));
  m.def("per_block_cast_to_fp8", &cast_to_fp8<false>, nb::arg("x"), nb::arg("q"), nb::arg("scales"));
  m.def("m_alignment_for_contiguous_layout", &gemm::m_alignment_for_contiguous_layout);
  m.attr("FP8_BLOCK") = gemm::kFp8Block;
  m.def("_time_fp32_nt", &time_fp32_nt, nb::arg("a"), nb::arg("b"), nb::arg("d"), nb::arg("iters"));
}

}  // namespace ridge::py
