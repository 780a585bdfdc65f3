// Bulk conversions: dispatch to the widest path the active ISA allows. The per-ISA files
// (format_avx2.cpp, format_avx512.cpp) must agree bit for bit with the scalar loops here.
#include "ridge/core/format.hpp"

#include "core/format_kernels.hpp"
#include "ridge/core/cpu.hpp"

namespace ridge {

namespace detail {
template <typename To, typename Enc>
void encode_loop(const float* src, To* dst, size_t n, Saturation sat, Enc enc) {
  for (size_t i = 0; i < n; ++i) dst[i] = enc(src[i], sat);
}
template <typename From>
void decode_loop(const From* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}
}  // namespace detail

void convert(const float* src, bf16* dst, size_t n, Saturation sat) {
  if (format_kernels::f32_to_bf16(cpu::active_isa(), src, dst, n, sat)) return;
  detail::encode_loop(src, dst, n, sat, [](float x, Saturation s) { return to_bf16(x, s); });
}
void convert(const float* src, fp16* dst, size_t n, Saturation sat) {
  if (format_kernels::f32_to_fp16(cpu::active_isa(), src, dst, n, sat)) return;
  detail::encode_loop(src, dst, n, sat, [](float x, Saturation s) { return to_fp16(x, s); });
}
void convert(const float* src, fp8_e4m3* dst, size_t n, Saturation sat) {
  if (format_kernels::f32_to_e4m3(cpu::active_isa(), src, dst, n, sat)) return;
  detail::encode_loop(src, dst, n, sat, [](float x, Saturation s) { return to_fp8_e4m3(x, s); });
}
void convert(const float* src, fp8_e5m2* dst, size_t n, Saturation sat) {
  if (format_kernels::f32_to_e5m2(cpu::active_isa(), src, dst, n, sat)) return;
  detail::encode_loop(src, dst, n, sat, [](float x, Saturation s) { return to_fp8_e5m2(x, s); });
}
void convert(const bf16* src, float* dst, size_t n) {
  if (format_kernels::bf16_to_f32(cpu::active_isa(), src, dst, n)) return;
  detail::decode_loop(src, dst, n);
}
void convert(const fp16* src, float* dst, size_t n) {
  if (format_kernels::fp16_to_f32(cpu::active_isa(), src, dst, n)) return;
  detail::decode_loop(src, dst, n);
}
void convert(const fp8_e4m3* src, float* dst, size_t n) {
  if (format_kernels::e4m3_to_f32(cpu::active_isa(), src, dst, n)) return;
  detail::decode_loop(src, dst, n);
}
void convert(const fp8_e5m2* src, float* dst, size_t n) {
  if (format_kernels::e5m2_to_f32(cpu::active_isa(), src, dst, n)) return;
  detail::decode_loop(src, dst, n);
}

}  // namespace ridge
