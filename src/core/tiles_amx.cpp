// The AMX instructions behind amx::run_one_hardware (core/amx.hpp), for the suite's check of the
// emulator against the machine. Built with the amx flags; called only where cpu::supported(Isa::amx).
#include <immintrin.h>

#include <cstdint>

#include "core/amx.hpp"
#include "core/check.hpp"
#include "ridge/core/cpu.hpp"

namespace ridge::amx {
namespace {
#include "core/amx_tiles.inc"
#include "core/tile_program.inc"
}  // namespace

void run_one_hardware(Op op, int m, int k_bytes, int n_bytes, const void* c, const void* a, const void* b,
                      void* out) {
  check(cpu::supported(cpu::Isa::amx), "amx: this machine cannot run AMX instructions (ridge info says why)");
  run_one<HwTiles>(op, m, k_bytes, n_bytes, c, a, b, out);
}

}  // namespace ridge::amx
