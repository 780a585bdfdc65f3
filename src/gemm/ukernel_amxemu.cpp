// GEMM on AMX tiles, on the tile emulator (amx_body.inc with EmuTiles; no ISA flags): the same
// kernels as ukernel_amx.cpp, on any machine, taken for bf16 and FP8 while amx::emulated() is on
// (RIDGE_AMX_EMULATE=1, tests). No small-m kernel: every shape, decode included, runs on the tiles.
#include <algorithm>
#include <cstring>

#include "core/amx.hpp"
#include "gemm/kernel.hpp"

namespace ridge::gemm::detail {
namespace {
#include "core/amx_tiles.inc"
#include "gemm/amx_body.inc"
}  // namespace

KernelInfo kernel_bf16_amxemu() {
  return KernelInfo{.name = "bf16_amx_32x32_emulated",
                    .mr = kAmxMR,
                    .nr = kAmxNR,
                    .panel = Panel::amx,
                    .k_granule = kAmxChunk,
                    .ukernel = &amx_ukernel_bf16<EmuTiles>,
                    .pack_a = &amx_pack_a,
                    .pack_b = &amx_pack_b,
                    .small_m_elem = Elem::bf16,
                    .thread_done = &amx_thread_done<EmuTiles>};
}

KernelInfo kernel_fp8_amxemu() {
  return KernelInfo{.name = "fp8_amx_32x32_emulated",
                    .mr = kAmxMR,
                    .nr = kAmxNR,
                    .panel = Panel::amx,
                    .k_granule = 128,
                    .ukernel = &amx_ukernel_fp8<EmuTiles>,
                    .pack_a = &amx_pack_a,
                    .pack_b = &amx_pack_b,
                    .small_m_elem = Elem::fp8,
                    .thread_done = &amx_thread_done<EmuTiles>};
}

}  // namespace ridge::gemm::detail
