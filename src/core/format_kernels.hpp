// Internal: per-ISA bulk conversion entry points. Each returns false when it has no path for
// `isa`, and the caller falls back to the scalar loop.
#pragma once

#include <cstddef>

#include "ridge/core/cpu.hpp"
#include "ridge/core/format.hpp"

namespace ridge::format_kernels {

bool f32_to_bf16(cpu::Isa isa, const float* src, bf16* dst, size_t n, Saturation sat);
bool f32_to_fp16(cpu::Isa isa, const float* src, fp16* dst, size_t n, Saturation sat);
bool f32_to_e4m3(cpu::Isa isa, const float* src, fp8_e4m3* dst, size_t n, Saturation sat);
bool f32_to_e5m2(cpu::Isa isa, const float* src, fp8_e5m2* dst, size_t n, Saturation sat);
bool bf16_to_f32(cpu::Isa isa, const bf16* src, float* dst, size_t n);
bool fp16_to_f32(cpu::Isa isa, const fp16* src, float* dst, size_t n);
bool e4m3_to_f32(cpu::Isa isa, const fp8_e4m3* src, float* dst, size_t n);
bool e5m2_to_f32(cpu::Isa isa, const fp8_e5m2* src, float* dst, size_t n);

}  // namespace ridge::format_kernels
