// Shared by the binding files: turning nanobind ndarrays (NumPy arrays, torch CPU tensors, anything
// with DLPack) into ridge's views without copying, with errors that name the argument.
// A wrong dtype or device raises TypeError; a wrong rank, shape or stride is refused by the library's
// own view check (check_matrix_view / check_tensor_view, the messages the C++ API gives), whose
// ridge::Error the module turns into ValueError.
#pragma once

#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <cstdint>
#include <span>
#include <string>

#include "ridge/core/error.hpp"
#include "ridge/core/tensor.hpp"
#include "core/check.hpp"

namespace nb = nanobind;

namespace ridge::py {

using In = nb::ndarray<nb::ro>;  // read-only operand (read-only NumPy arrays are fine)
using Out = nb::ndarray<>;       // written by the kernel: must be writable

// The ridge dtype of an array; TypeError for dtypes ridge has no name for.
template <typename A>
DType array_dtype(const A& a, const char* name) {
  const auto t = a.dtype();
  using C = nb::dlpack::dtype_code;
  if (t.lanes == 1) {
    const auto code = static_cast<C>(t.code);
    if (code == C::Float && t.bits == 32) return DType::f32;
    if (code == C::Float && t.bits == 64) return DType::f64;
    if (code == C::Float && t.bits == 16) return DType::fp16;
    if (code == C::Bfloat && t.bits == 16) return DType::bf16;
    if (code == C::Float8_E4M3FN && t.bits == 8) return DType::fp8_e4m3;
    if (code == C::Float8_E5M2 && t.bits == 8) return DType::fp8_e5m2;
    if (code == C::Int && t.bits == 32) return DType::i32;
    if (code == C::Int && t.bits == 8) return DType::i8;
  }
  throw nb::type_error(fmt::format("{}: unsupported dtype (DLPack code {}, {} bits); ridge takes float32, "
                                   "bfloat16, float8_e4m3fn and int32 arrays",
                                   name, static_cast<int>(t.code), static_cast<int>(t.bits))
                           .c_str());
}

template <typename A>
void check_cpu(const A& a, const char* name) {
  if (a.device_type() != nb::device::cpu::value)
    throw nb::type_error(fmt::format("{}: must be a CPU array (device type {} given); ridge's kernels run on "
                                     "the CPU",
                                     name, a.device_type())
                             .c_str());
}

template <typename T, typename A>
T* typed_data(const A& a, const char* name, DType want) {
  check_cpu(a, name);
  const DType got = array_dtype(a, name);
  if (got != want)
    throw nb::type_error(
        fmt::format("{}: expected a {} array, got {}", name, dtype_name(want), dtype_name(got)).c_str());
  return static_cast<T*>(const_cast<void*>(static_cast<const void*>(a.data())));
}

// The array's shape and strides (in elements) as a tensor view's, for the library's one view check.
// An array of rank > 4 keeps its true rank, so the check's rank test refuses it before any entry is read.
template <typename A>
void shape_and_strides(const A& a, std::array<int64_t, 4>& shape, std::array<int64_t, 4>& stride) {
  shape.fill(0);
  stride.fill(0);
  for (size_t i = 0; i < std::min<size_t>(a.ndim(), 4); ++i) {
    shape[i] = static_cast<int64_t>(a.shape(i));
    stride[i] = a.stride(i);
  }
}

// A 2-D array as a row-major matrix: unit stride along columns, a row stride >= cols (any stride is
// fine along a dimension of size 1). The rank, shape and layout are checked by the library's
// check_tensor_view, so a bad array gets the same message as a bad view passed to the C++ API.
template <typename T, typename A>
MatrixView<T> matrix(const A& a, const char* name) {
  using E = std::remove_const_t<T>;
  E* p = typed_data<E>(a, name, dtype_of<E>());
  std::array<int64_t, 4> shape, stride;
  shape_and_strides(a, shape, stride);
  check_tensor_view(nullptr, name, p, static_cast<int>(a.ndim()), shape, stride, {-1, -1},
                    Strides::row_major);
  const int64_t rows = shape[0], cols = shape[1];
  const int64_t ld = std::max<int64_t>(rows > 1 ? stride[0] : cols, 1);
  check_matrix_view(nullptr, name, p, rows, cols, ld);
  return {p, rows, cols, ld};
}

// An array of rank `rank` (1..4; the bindings ask for 3 or 4) as a strided tensor view: any positive
// strides (a permuted or sliced array), but no broadcast or reversed dimension of size > 1.
template <typename T, typename A>
TensorView<T> tensor(const A& a, const char* name, int rank) {
  using E = std::remove_const_t<T>;
  E* p = typed_data<E>(a, name, dtype_of<E>());
  TensorView<T> v;
  v.data = p;
  v.rank = static_cast<int>(a.ndim());
  shape_and_strides(a, v.shape, v.stride);
  const auto check_rank = [&](std::initializer_list<int64_t> any_shape) {
    check_tensor_view(nullptr, name, p, v.rank, v.shape, v.stride, any_shape, Strides::positive);
  };
  switch (rank) {
    case 1:
      check_rank({-1});
      break;
    case 2:
      check_rank({-1, -1});
      break;
    case 3:
      check_rank({-1, -1, -1});
      break;
    default:
      check_rank({-1, -1, -1, -1});
      break;
  }
  return v;
}

// A contiguous 1-D int32 array as a span.
template <typename A>
std::span<const int32_t> int32_vector(const A& a, const char* name) {
  const int32_t* p = typed_data<int32_t>(a, name, DType::i32);
  std::array<int64_t, 4> shape, stride;
  shape_and_strides(a, shape, stride);
  check_tensor_view(nullptr, name, p, static_cast<int>(a.ndim()), shape, stride, {-1}, Strides::row_major);
  return {p, static_cast<size_t>(shape[0])};
}

void bind_core(nb::module_& m);
void bind_gemm(nb::module_& m);
void bind_attention(nb::module_& m);
void bind_roofline(nb::module_& m);
void bind_bench(nb::module_& m);
void bind_model(nb::module_& m);
void bind_generate(nb::module_& m);
void bind_data(nb::module_& m);

}  // namespace ridge::py
