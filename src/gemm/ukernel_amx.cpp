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
#include "gemm/amx_body.inc"
}  // namespace

KernelInfo kernel_bf16_amx() {
  const KernelInfo small = kernel_bf16_avx512bf16();
  return KernelInfo{.name = "bf16_amx_32x32",
                    .mr = kAmxMR,
                    .nr = kAmxNR,
                    .panel = Panel::amx,
                    .k_granule = kAmxChunk,
                    .ukernel = &amx_ukernel_bf16<HwTiles>,
                    .pack_a = &amx_pack_a,
                    .pack_b = &amx_pack_b,
                    .small_m = small.small_m,
                    .small_m_jit = small.small_m_jit,
                    .small_m_elem = small.small_m_elem,
                    .small_m_cols = small.small_m_cols,
                    .thread_done = &amx_thread_done<HwTiles>};
}

KernelInfo kernel_fp8_amx() {
  const KernelInfo small = fp8::uses_vbmi() ? kernel_fp8_avx512bf16vbmi() : kernel_fp8_avx512bf16();
  return KernelInfo{.name = "fp8_amx_32x32",
                    .mr = kAmxMR,
                    .nr = kAmxNR,
                    .panel = Panel::amx,
                    .k_granule = 128,
                    .ukernel = &amx_ukernel_fp8<HwTiles>,
                    .pack_a = &amx_pack_a,
                    .pack_b = &amx_pack_b,
                    .small_m = small.small_m,
                    .small_m_elem = small.small_m_elem,
                    .small_m_cols = small.small_m_cols,
                    .small_m_fp8_panels = small.small_m_fp8_panels,
                    .thread_done = &amx_thread_done<HwTiles>};
}

}  // namespace ridge::gemm::detail
