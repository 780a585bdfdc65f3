// FlashAttention-2 on AMX tiles, the instructions: the amx path's attention. bf16 operands run the
// one body (flash_body.inc) with its softmax on the AVX-512 vector traits and every product on the
// tiles (blocks_amx.inc with HwTiles); fp32 operands have nothing for the tiles to do and take the
// avx512bf16 path's kernels (BlocksFp32), bit for bit.
//
// GCC 12 reports its own _mm512_undefined_ps() inside the intrinsics headers as maybe-uninitialized
// (GCC PR 105593), a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

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
#include "simd/avx512.inc"
#include "attention/vec_avx512.inc"
#include "attention/flash_body.inc"
#include "core/amx_tiles.inc"
#include "core/amx_micro.inc"
#include "attention/blocks_amx.inc"

}  // namespace

void forward_amx(const Problem& p) {
  if (p.bf16)
    forward<BlocksAmx<HwTiles>>(p);
  else
    forward_avx512bf16(p);
}
void backward_amx(const Problem& p) {
  if (p.bf16)
    backward<BlocksAmx<HwTiles>>(p);
  else
    backward_avx512bf16(p);
}

Kernels kernels_amx() {
  return {forward_amx, backward_amx};
}

}  // namespace ridge::attention::detail
