// Routes each bulk conversion to the widest per-ISA table the active path allows (core/isa_paths.hpp).
// avx512bf16 takes the avx512 code: vcvtneps2bf16 flushes subnormal inputs and outputs to zero,
// so it cannot match the scalar rounding, and the integer path is already memory-bound.
#include "core/format_isa.hpp"
#include "core/format_kernels.hpp"
#include "core/isa_paths.hpp"

namespace ridge::format_kernels {
namespace {

// Every format struct holds exactly one code unit, so an array of them is an array of code units.
template <typename U, typename T>
U* units(T* p) {
  static_assert(sizeof(T) == sizeof(U));
  return reinterpret_cast<U*>(p);
}
template <typename U, typename T>
const U* units(const T* p) {
  static_assert(sizeof(T) == sizeof(U));
  return reinterpret_cast<const U*>(p);
}

// One table per ISA level, built once; the scalar level has none (format.cpp runs its own loop).
const format_isa::Kernels& kernels(cpu::Isa isa) {
  static const isa::PathTables<format_isa::Kernels> tables(
      {nullptr, format_isa::kernels_avx2, format_isa::kernels_avx512, nullptr});
  return tables(isa);
}

}  // namespace

#define RIDGE_ENCODE(fn, T, U)                                                \
  bool fn(cpu::Isa isa, const float* src, T* dst, size_t n, Saturation sat) { \
    const auto f = kernels(isa).fn;                                           \
    if (f) f(src, units<U>(dst), n, sat == Saturation::finite);               \
    return f != nullptr;                                                      \
  }

#define RIDGE_DECODE(fn, T, U)                                \
  bool fn(cpu::Isa isa, const T* src, float* dst, size_t n) { \
    const auto f = kernels(isa).fn;                           \
    if (f) f(units<U>(src), dst, n);                          \
    return f != nullptr;                                      \
  }

RIDGE_ENCODE(f32_to_bf16, bf16, uint16_t)
RIDGE_ENCODE(f32_to_fp16, fp16, uint16_t)
RIDGE_ENCODE(f32_to_e4m3, fp8_e4m3, uint8_t)
RIDGE_ENCODE(f32_to_e5m2, fp8_e5m2, uint8_t)
RIDGE_DECODE(bf16_to_f32, bf16, uint16_t)
RIDGE_DECODE(fp16_to_f32, fp16, uint16_t)
RIDGE_DECODE(e4m3_to_f32, fp8_e4m3, uint8_t)
RIDGE_DECODE(e5m2_to_f32, fp8_e5m2, uint8_t)

#undef RIDGE_ENCODE
#undef RIDGE_DECODE

}  // namespace ridge::format_kernels
