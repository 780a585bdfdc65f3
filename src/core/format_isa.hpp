// Internal: the per-ISA bulk conversions (format_avx2.cpp, format_avx512.cpp), one table per path
// (the per-ISA convention in core/isa_paths.hpp). Plain functions on raw code units, so the ISA
// files need not include format.hpp: an inline function from a public header instantiated under
// -mavx512f could be the copy the linker keeps for every caller. Each agrees bit for bit with the
// scalar functions in ridge/core/format.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ridge::format_isa {

struct Kernels {
  void (*f32_to_bf16)(const float* src, uint16_t* dst, size_t n, bool satfinite) = nullptr;
  void (*f32_to_fp16)(const float* src, uint16_t* dst, size_t n, bool satfinite) = nullptr;
  void (*f32_to_e4m3)(const float* src, uint8_t* dst, size_t n, bool satfinite) = nullptr;
  void (*f32_to_e5m2)(const float* src, uint8_t* dst, size_t n, bool satfinite) = nullptr;
  void (*bf16_to_f32)(const uint16_t* src, float* dst, size_t n) = nullptr;
  void (*fp16_to_f32)(const uint16_t* src, float* dst, size_t n) = nullptr;
  void (*e4m3_to_f32)(const uint8_t* src, float* dst, size_t n) = nullptr;
  void (*e5m2_to_f32)(const uint8_t* src, float* dst, size_t n) = nullptr;
};

Kernels kernels_avx2();
Kernels
kernels_avx512();  // also the avx512bf16 path's: vcvtneps2bf16 flushes subnormals, see format_dispatch.cpp

}  // namespace ridge::format_isa
