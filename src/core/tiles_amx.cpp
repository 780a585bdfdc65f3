// The AMX instructions behind amx::run_one_hardware (core/amx.hpp), for the suite's check of the
// emulator against the machine. Built with the amx flags; called only where cpu::supported(Isa::amx).
#include <immintrin.h>

#include <cstdint>

#include "core/amx.hpp"

namespace ridge::amx {
namespace {
#include "core/amx_tiles.inc"
#include "core/tile_program.inc"
}  // namespace

// Unchecked: run_one_hardware (tiles_amxemu.cpp, no ISA flags) checks the machine first, so nothing
// that can throw is compiled here (an exception's type would be a mergeable symbol of this unit).
void run_one_on_the_tiles(Op op, int m, int k_bytes, int n_bytes, const void* c, const void* a, const void* b,
                          void* out) {
  run_one<HwTiles>(op, m, k_bytes, n_bytes, c, a, b, out);
}

}  // namespace ridge::amx
