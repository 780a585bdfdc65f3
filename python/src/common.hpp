// Shared by the binding files: turning nanobind ndarrays (NumPy arrays, torch CPU tensors, anything
// with DLPack) into ridge's views without copying, with errors that name the argument.
// A wrong dtype or device raises TypeError; a wrong rank, shape or stride raises ridge::Error,
// which the module turns into ValueError.
#pragma once

#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
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

// A 2-D array as a row-major matrix: unit stride along columns, a row stride >= cols (any
// stride is fine for a single row or column of size 1).
template <typename T, typename A>
MatrixView<T> matrix(const A& a, const char* name) {
  using E = std::remove_const_t<T>;
  E* p = typed_data<E>(a, name, dtype_of<E>());
  check(a.ndim() == 2, "{}: must be a 2-D array, got {} dimensions", name, a.ndim());
  const auto rows = static_cast<int64_t>(a.shape(0)), cols = static_cast<int64_t>(a.shape(1));
  check(cols <= 1 || a.stride(1) == 1,
        "{}: rows must be contiguous (column stride 1), got stride {}; pass a contiguous array or its "
        "transpose "
        "with the other layout",
        name, a.stride(1));
  int64_t ld = cols;
  if (rows > 1) {
    check(a.stride(0) >= cols, "{}: row stride {} is smaller than the {} columns (overlapping rows)", name,
          a.stride(0), cols);
    ld = a.stride(0);
  }
  return {p, rows, cols, std::max<int64_t>(ld, 1)};
}

// An array of rank 1..4 as a strided tensor view; strides must be positive (no broadcast or
// reversed views), except along dimensions of size 1.
template <typename T, typename A>
TensorView<T> tensor(const A& a, const char* name, int rank) {
  using E = std::remove_const_t<T>;
  E* p = typed_data<E>(a, name, dtype_of<E>());
  check(static_cast<int>(a.ndim()) == rank, "{}: must have {} dimensions, got {}", name, rank, a.ndim());
  TensorView<T> v;
  v.data = p;
  v.rank = rank;
  for (int i = 0; i < rank; ++i) {
    v.shape[i] = static_cast<int64_t>(a.shape(i));
    v.stride[i] = a.stride(i);
    check(v.shape[i] <= 1 || v.stride[i] > 0, "{}: stride {} of dimension {} must be positive", name,
          v.stride[i], i);
  }
  return v;
}

// A contiguous 1-D int32 array as a span.
template <typename A>
std::span<const int32_t> int32_vector(const A& a, const char* name) {
  const int32_t* p = typed_data<int32_t>(a, name, DType::i32);
  check(a.ndim() == 1, "{}: must be a 1-D int32 array, got {} dimensions", name, a.ndim());
  check(a.shape(0) <= 1 || a.stride(0) == 1, "{}: must be contiguous", name);
  return {p, a.shape(0)};
}

void bind_core(nb::module_& m);
void bind_gemm(nb::module_& m);
void bind_attention(nb::module_& m);
void bind_roofline(nb::module_& m);
void bind_bench(nb::module_& m);
void bind_model(nb::module_& m);

}  // namespace ridge::py
