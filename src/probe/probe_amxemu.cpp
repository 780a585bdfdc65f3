// The AMX peak kernels of probe_amx.cpp on the tile emulator (core/amx.hpp): the same source, on any
// machine. Never timed (an emulated rate means nothing); the suite runs them to check the kernels'
// tile configuration and sums where the machine has no AMX.
#include <cstdint>
#include <cstring>

#include "core/amx.hpp"
#include "probe/kernels.hpp"

namespace ridge::probe::detail {
namespace {
#include "core/amx_tiles.inc"
#include "probe/amx_peak.inc"
}  // namespace

double peak_bf16_amxemu(int, int64_t iters) {
  return amx_peak<EmuTiles, true>(iters);
}

double peak_int8_amxemu(int, int64_t iters) {
  return amx_peak<EmuTiles, false>(iters);
}

}  // namespace ridge::probe::detail
