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

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <> constexpr DType dtype_of<fp16>() { return DType::fp16; }
template <> constexpr DType dtype_of<fp8_e4m3>() { return DType::fp8_e4m3; }
template <> constexpr DType dtype_of<fp8_e5m2>() { return DType::fp8_e5m2; }
template <> constexpr DType dtype_of<int8_t>() { return DType::i8; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }

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
      throw Error("shape: " + std::to_string(dims.size()) + " dimensions given, a TensorView holds at most 4");
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

}  // namespace ridge
