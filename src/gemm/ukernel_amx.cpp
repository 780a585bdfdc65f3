// GEMM on AMX tiles, the instructions (amx_body.inc with HwTiles): the amx path's bf16 and FP8
// kernels. Decode shapes (m <= 16 rows, row-major) keep the avx512bf16 small-m kernels, which read B
// once at the memory roof; the tiles take everything the blocked driver runs.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/amx.hpp"
#include "gemm/kernel.hpp"

namespace ridge::gemm::detail {
namespace {
#include "core/amx_tiles.inc"
#include "core/amx_micro.inc"
#include "gemm/amx_body.inc"
}  // namespace

KernelInfo kernel_bf16_amx() {
  KernelInfo ki = amx_kernel_info<HwTiles>(Elem::bf16);
  const KernelInfo small = kernel_bf16_avx512bf16();
  ki.small_m = small.small_m;
  ki.small_m_jit = small.small_m_jit;
  ki.small_m_cols = small.small_m_cols;
  ki.small_m_rows = small.small_m_rows;
  return ki;
}

KernelInfo kernel_fp8_amx() {
  KernelInfo ki = amx_kernel_info<HwTiles>(Elem::fp8);
  const KernelInfo small = fp8::uses_vbmi() ? kernel_fp8_avx512bf16vbmi() : kernel_fp8_avx512bf16();
  ki.small_m = small.small_m;
  ki.small_m_cols = small.small_m_cols;
  ki.small_m_rows = small.small_m_rows;
  ki.small_m_fp8_panels = small.small_m_fp8_panels;
  return ki;
}

}  // namespace ridge::gemm::detail
