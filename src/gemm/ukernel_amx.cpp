// GEMM on AMX tiles, the instructions (amx_body.inc with HwTiles): the amx path's blocked bf16 and FP8
// kernels. Decode shapes (m <= 16 rows, row-major) are not theirs: the dispatch policy sends them to the
// avx512bf16 small-m kernels, which read B once at the memory roof (core/dispatch.hpp).
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
  return amx_kernel_info<HwTiles>(Elem::bf16);
}

KernelInfo kernel_fp8_amx() {
  return amx_kernel_info<HwTiles>(Elem::fp8);
}

}  // namespace ridge::gemm::detail
