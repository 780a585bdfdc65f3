// Peak bf16 and int8 rates of Intel AMX's tile unit: TDPBF16PS (16 x 16 fp32 += 16 x 32 bf16 times
// 32 x 16 bf16, 16 x 16 x 32 x 2 = 16384 FLOP) and TDPBSSD (16 x 16 int32 += 16 x 64 s8 times 64 x 16
// s8, 32768 OP), four independent accumulator tiles, no loads in the timed loop (probe/amx_peak.inc).
// Built with the amx flags; called only where cpu::supported(Isa::amx) (measure.cpp checks).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/amx.hpp"
#include "probe/kernels.hpp"

namespace ridge::probe::detail {
namespace {
#include "core/amx_tiles.inc"
#include "probe/amx_peak.inc"
}  // namespace

double peak_bf16_amx(int, int64_t iters) {
  return amx_peak<HwTiles, true>(iters);
}

double peak_int8_amx(int, int64_t iters) {
  return amx_peak<HwTiles, false>(iters);
}

}  // namespace ridge::probe::detail
