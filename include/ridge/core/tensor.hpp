// Element types and strided views. Kernel APIs take views (pointer, shape, strides, dtype) and
// never assume where the memory lives, so a CUDA backend can sit beside the CPU one.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "ridge/core/error.hpp"
#include "ridge/core/format.hpp"

namespace ridge {

enum class DType { f64, f32, bf16, fp16, fp8_e4m3, fp8_e5m2, i8, i32 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Accepts "f64|fp64", "f32|fp32", "bf16", "f16|fp16", "fp8|e4m3|fp8_e4m3", "e5m2|fp8_e5m2",
// "i8|int8", "i32|int32"; throws ridge::Error listing them otherwise.
DType parse_dtype(const std::string& name);

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;
}
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<bf16>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<fp16>() {
  return DType::fp16;
}
template <>
constexpr DType dtype_of<fp8_e4m3>() {
  return DType::fp8_e4m3;
}
template <>
constexpr DType dtype_of<fp8_e5m2>() {
  return DType::fp8_e5m2;
}
template <>
constexpr DType dtype_of<int8_t>() {
  return DType::i8;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}

// A row-major matrix view with a leading-dimension stride (elements between rows).
template <typename T>
struct MatrixView {
  T* data = nullptr;
  int64_t rows = 0, cols = 0, ld = 0;
  T& operator()(int64_t r, int64_t c) const { return data[r * ld + c]; }
};

// A view of up to 4 dimensions with element strides.
template <typename T>
struct TensorView {
  T* data = nullptr;
  int rank = 0;
  std::array<int64_t, 4> shape{};
  std::array<int64_t, 4> stride{};

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[i];
    return n;
  }
  // Dense row-major view of the given shape (at most 4 dimensions, each >= 0).
  static TensorView contiguous(T* p, std::initializer_list<int64_t> dims) {
    if (dims.size() > 4)
      throw Error("shape: " + std::to_string(dims.size()) +
                  " dimensions given, a TensorView holds at most 4");
    for (int64_t d : dims)
      if (d < 0) throw Error("shape: dimension " + std::to_string(d) + " is negative");
    TensorView v;
    v.data = p;
    v.rank = static_cast<int>(dims.size());
    int i = 0;
    for (int64_t d : dims) v.shape[i++] = d;
    int64_t s = 1;
    for (int k = v.rank - 1; k >= 0; --k) {
      v.stride[k] = s;
      s *= v.shape[k];
    }
    return v;
  }
};

// ---------------------------------------------------------------------------------------------
// The one check of a view argument for every library function, in one message style:
//   "<fn>: <name> <what is wrong> (expected ...)"
// naming the public function (`fn`; nullptr when the caller's messages start with the argument)
// and its argument (`name`). Plain values, not views, so no template is instantiated in a per-ISA
// file; call them as check_matrix_view(fn, "a", a.data, a.rows, a.cols, a.ld).

// A matrix view [rows, cols] with row stride ld: rows, cols >= 0, ld >= cols, data non-null unless
// the matrix is empty; and, when want_rows / want_cols are >= 0, exactly that shape.
void check_matrix_view(const char* fn, const char* name, const void* data, int64_t rows, int64_t cols,
                       int64_t ld, int64_t want_rows = -1, int64_t want_cols = -1);

// How a tensor view may be laid out: any strides (a transposed or broadcast view); positive strides
// along every dimension of size > 1 (a permuted or sliced view, but no broadcast or reversed one);
// or row-major with padding allowed: the last dimension contiguous (stride 1) and each outer stride
// at least the extent of the dimensions inside it, so no two indices share an element.
enum class Strides { any, positive, row_major };
// A tensor view: rank == want.size(), every shape entry == the wanted one (-1 accepts any size),
// no negative size, data non-null unless the tensor is empty, strides as `layout` says.
void check_tensor_view(const char* fn, const char* name, const void* data, int rank,
                       const std::array<int64_t, 4>& shape, const std::array<int64_t, 4>& stride,
                       std::initializer_list<int64_t> want, Strides layout = Strides::any);

}  // namespace ridge
