#include "ridge/core/tensor.hpp"

#include "ridge/core/error.hpp"
#include "core/check.hpp"

namespace ridge {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::bf16: case DType::fp16: return 2;
    case DType::fp8_e4m3: case DType::fp8_e5m2: case DType::i8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f64: return "fp64";
    case DType::f32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
    case DType::fp8_e4m3: return "fp8_e4m3";
    case DType::fp8_e5m2: return "fp8_e5m2";
    case DType::i8: return "int8";
    case DType::i32: return "int32";
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
  fail("dtype: '{}' is not a dtype (accepted: fp64, fp32, bf16, fp16, fp8_e4m3, fp8_e5m2, int8, int32)", s);
}

}  // namespace ridge
