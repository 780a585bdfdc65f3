// Routes each bulk conversion to the widest per-ISA implementation the active path allows.
// avx512bf16 takes the avx512 code: vcvtneps2bf16 flushes subnormal inputs and outputs to zero,
// so it cannot match the scalar rounding, and the integer path is already memory-bound.
#include "core/format_isa.hpp"
#include "core/format_kernels.hpp"

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

}  // namespace

#define RIDGE_ENCODE(fn, T, U)                                                        \
  bool fn(cpu::Isa isa, const float* src, T* dst, size_t n, Saturation sat) {         \
    const bool fin = sat == Saturation::finite;                                       \
    if (isa >= cpu::Isa::avx512) {                                                    \
      format_isa::avx512::fn(src, units<U>(dst), n, fin);                             \
      return true;                                                                    \
    }                                                                                 \
    if (isa == cpu::Isa::avx2) {                                                      \
      format_isa::avx2::fn(src, units<U>(dst), n, fin);                               \
      return true;                                                                    \
    }                                                                                 \
    return false;                                                                     \
  }

#define RIDGE_DECODE(fn, T, U)                                                        \
  bool fn(cpu::Isa isa, const T* src, float* dst, size_t n) {                         \
    if (isa >= cpu::Isa::avx512) {                                                    \
      format_isa::avx512::fn(units<U>(src), dst, n);                                  \
      return true;                                                                    \
    }                                                                                 \
    if (isa == cpu::Isa::avx2) {                                                      \
      format_isa::avx2::fn(units<U>(src), dst, n);                                    \
      return true;                                                                    \
    }                                                                                 \
    return false;                                                                     \
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
