// FlashAttention-2 on AMX tiles, on the tile emulator (no ISA flags: any machine): the kernels of
// flash_amx.cpp's bf16 path with EmuTiles, and the scalar vector traits for the softmax (so this
// file's fp32 code is the scalar path's). flash.cpp takes them for bf16 operands while the dispatch
// policy's amx_emulated switch is on (RIDGE_AMX_EMULATE=1, dispatch::ScopedPath in tests); fp32 keeps
// its path.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "attention/internal.hpp"
#include "core/amx.hpp"
#include "ridge/core/format.hpp"
#include "ridge/core/memory.hpp"

namespace ridge::attention::detail {
namespace {

#include "simd/scalar.inc"
#include "attention/vec_scalar.inc"
#include "attention/flash_body.inc"
#include "core/amx_tiles.inc"
#include "core/amx_micro.inc"
#include "attention/blocks_amx.inc"

}  // namespace

// flash.cpp sends fp32 operands elsewhere; should one come here, the scalar path serves it.
void forward_amxemu(const Problem& p) {
  if (p.bf16)
    forward<BlocksAmx<EmuTiles>>(p);
  else
    forward_scalar(p);
}
void backward_amxemu(const Problem& p) {
  if (p.bf16)
    backward<BlocksAmx<EmuTiles>>(p);
  else
    backward_scalar(p);
}

Kernels kernels_amxemu() {
  return {forward_amxemu, backward_amxemu};
}

}  // namespace ridge::attention::detail
