// GEMM on AMX tiles, on the tile emulator (amx_body.inc with EmuTiles; no ISA flags): the same
// kernels as ukernel_amx.cpp, on any machine, taken for bf16 and FP8 while the dispatch policy's
// amx_emulated switch is on (RIDGE_AMX_EMULATE=1, tests; core/dispatch.hpp), decode rows included:
// every shape runs on the tiles.
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

KernelInfo kernel_bf16_amxemu() {
  return amx_kernel_info<EmuTiles>(Elem::bf16);
}

KernelInfo kernel_fp8_amxemu() {
  return amx_kernel_info<EmuTiles>(Elem::fp8);
}

}  // namespace ridge::gemm::detail
