// Routes each bulk conversion to the per-ISA implementation. Until a path exists for an ISA it
// returns false and the scalar loop runs.
#include "core/format_kernels.hpp"

namespace ridge::format_kernels {

bool f32_to_bf16(cpu::Isa, const float*, bf16*, size_t, Saturation) { return false; }
bool f32_to_fp16(cpu::Isa, const float*, fp16*, size_t, Saturation) { return false; }
bool f32_to_e4m3(cpu::Isa, const float*, fp8_e4m3*, size_t, Saturation) { return false; }
bool f32_to_e5m2(cpu::Isa, const float*, fp8_e5m2*, size_t, Saturation) { return false; }
bool bf16_to_f32(cpu::Isa, const bf16*, float*, size_t) { return false; }
bool fp16_to_f32(cpu::Isa, const fp16*, float*, size_t) { return false; }
bool e4m3_to_f32(cpu::Isa, const fp8_e4m3*, float*, size_t) { return false; }
bool e5m2_to_f32(cpu::Isa, const fp8_e5m2*, float*, size_t) { return false; }

}  // namespace ridge::format_kernels
