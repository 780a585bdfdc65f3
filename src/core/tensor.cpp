#include "ridge/core/tensor.hpp"

#include <fmt/format.h>

#include <string>

#include "ridge/core/error.hpp"
#include "core/check.hpp"

namespace ridge {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64:
      return 8;
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::bf16:
    case DType::fp16:
      return 2;
    case DType::fp8_e4m3:
    case DType::fp8_e5m2:
    case DType::i8:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f64:
      return "fp64";
    case DType::f32:
      return "fp32";
    case DType::bf16:
      return "bf16";
    case DType::fp16:
      return "fp16";
    case DType::fp8_e4m3:
      return "fp8_e4m3";
    case DType::fp8_e5m2:
      return "fp8_e5m2";
    case DType::i8:
      return "int8";
    case DType::i32:
      return "int32";
  }
  return "?";
}

DType parse_dtype(const std::string& s) {
  if (s == "f64" || s == "fp64") return DType::f64;
  if (s == "f32" || s == "fp32") return DType::f32;
  if (s == "bf16") return DType::bf16;
  if (s == "f16" || s == "fp16") return DType::fp16;
  if (s == "fp8" || s == "e4m3" || s == "fp8_e4m3") return DType::fp8_e4m3;
  if (s == "e5m2" || s == "fp8_e5m2") return DType::fp8_e5m2;
  if (s == "i8" || s == "int8") return DType::i8;
  if (s == "i32" || s == "int32") return DType::i32;
  fail_arg("dtype", "'{}' is not a dtype (accepted: fp64, fp32, bf16, fp16, fp8_e4m3, fp8_e5m2, int8, int32)",
           s);
}

namespace {

// "fn: name" or "name" when there is no function to name.
std::string who(const char* fn, const char* name) {
  return fn && *fn ? fmt::format("{}: {}", fn, name) : std::string(name);
}

std::string dims(const int64_t* d, int rank) {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + (d[i] < 0 ? std::string("*") : std::to_string(d[i]));
  return s + "]";
}

}  // namespace

void check_matrix_view(const char* fn, const char* name, const void* data, int64_t rows, int64_t cols,
                       int64_t ld, int64_t want_rows, int64_t want_cols) {
  const std::string w = who(fn, name);
  check(rows >= 0 && cols >= 0, "{} has negative shape [{}, {}]", w, rows, cols);
  if (want_rows >= 0 || want_cols >= 0) {
    const bool ok = (want_rows < 0 || rows == want_rows) && (want_cols < 0 || cols == want_cols);
    const int64_t want[2] = {want_rows, want_cols};
    check(ok, "{} is [{}, {}], expected {}", w, rows, cols, dims(want, 2));
  }
  check(ld >= cols, "{}.ld = {} is smaller than its {} columns (expected ld >= cols)", w, ld, cols);
  check(data != nullptr || rows == 0 || cols == 0, "{} is null but has shape [{}, {}]", w, rows, cols);
}

void check_tensor_view(const char* fn, const char* name, const void* data, int rank,
                       const std::array<int64_t, 4>& shape, const std::array<int64_t, 4>& stride,
                       std::initializer_list<int64_t> want, Strides layout) {
  const std::string w = who(fn, name);
  const int want_rank = static_cast<int>(want.size());
  check(rank == want_rank, "{} has rank {}, expected rank {} {}", w, rank, want_rank,
        dims(want.begin(), want_rank));
  bool empty = false;
  for (int i = 0; i < rank; ++i) {
    check(shape[i] >= 0, "{} has negative shape {}", w, dims(shape.data(), rank));
    empty = empty || shape[i] == 0;
  }
  bool same = true;
  int i = 0;
  for (int64_t d : want) {
    same = same && (d < 0 || shape[i] == d);
    ++i;
  }
  check(same, "{} is {}, expected {}", w, dims(shape.data(), rank), dims(want.begin(), want_rank));
  check(data != nullptr || empty, "{} is null but has shape {}", w, dims(shape.data(), rank));
  if (layout == Strides::positive)
    for (int k = 0; k < rank; ++k)
      check(stride[k] > 0 || shape[k] <= 1,
            "{}.stride[{}] = {} is not accepted (expected a positive stride: no broadcast or reversed "
            "dimension)",
            w, k, stride[k]);
  if (layout == Strides::row_major && rank > 0 && !empty) {
    check(stride[rank - 1] == 1 || shape[rank - 1] <= 1,
          "{}.stride[{}] = {}: the last dimension must be contiguous (expected stride 1)", w, rank - 1,
          stride[rank - 1]);
    for (int k = rank - 2; k >= 0; --k) {
      const int64_t need = shape[k + 1] * (k + 1 == rank - 1 ? 1 : stride[k + 1]);
      check(stride[k] >= need || shape[k] <= 1,
            "{}.stride[{}] = {} makes its entries overlap (expected >= {})", w, k, stride[k], need);
    }
  }
}

}  // namespace ridge
