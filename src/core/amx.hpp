// Intel AMX (Advanced Matrix Extensions) as ridge's kernels see it: the palette-1 tile configuration
// and a plain C++ model of the eight tiles (the emulator), which runs the same kernel source as the
// real instructions (src/core/amx_tiles.inc) on any machine.
//
// The emulator follows Intel's ISA reference, the SDM vol. 2 pseudocode of TILELOADD / TILESTORED /
// TILEZERO / TDPBF16PS / TDPBSSD and LDTILECFG / TILERELEASE: eight tiles of up to 16 rows x 64 bytes,
// each with its configured rows and bytes per row; a load fills the configured rows and bytes and zeroes
// the rest of the tile; TDPBF16PS as dpbf16_element below (two FMA chains, even and odd bf16 of each
// pair, added together and then to C); TDPBSSD adds the four signed byte products of each dword into an
// int32, wrapping. Shape rules the hardware enforces with #UD or #GP (tile not configured, rows or bytes
// that do not match, reserved bytes set) are ridge::Error here. Intel's intrinsics guide describes
// TDPBF16PS with another order (both products added into C in turn); the two differ only in rounding,
// and where the order cannot matter (exact sums) the start-up check holds the instructions to the
// emulator bit for bit.
#pragma once

#include <cstdint>
#include <string>

namespace ridge::amx {

// The 64-byte operand of LDTILECFG, palette 1.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved0[14] = {};
  uint16_t colsb[16] = {};  // bytes per row of tile t (t < 8), at most 64
  uint8_t rows[16] = {};    // rows of tile t, at most 16
};
static_assert(sizeof(TileConfig) == 64);

inline constexpr int kTiles = 8, kMaxRows = 16, kMaxColsb = 64;

// Every tile full, 16 rows x 64 bytes: the configuration of ridge's GEMM, attention and probe tiles
// (C 16 x 16 fp32 or int32, A 16 x 32 bf16 or 64 int8, B 16 rows of dword pairs or quads). constexpr,
// so an object built with the AMX flags that names it runs no code before main (docs/core.md).
constexpr TileConfig full_tiles() {
  TileConfig c;
  for (int t = 0; t < kTiles; ++t) {
    c.rows[t] = kMaxRows;
    c.colsb[t] = kMaxColsb;
  }
  return c;
}

// The emulator: one set of tiles per thread, as the hardware keeps one per logical CPU.
namespace emu {
void ldtilecfg(const TileConfig& cfg);  // checks the palette and every tile's rows and bytes
void tilerelease();                     // back to the initial state (unconfigured)
bool configured();                      // whether this thread has a configuration loaded
void tilezero(int t);
void tileloadd(int t, const void* base, int64_t stride);
void tilestored(int t, void* base, int64_t stride);
void tdpbf16ps(int c, int a, int b);
void tdpbssd(int c, int a, int b);
// One fp32 element of TDPBF16PS, as the SDM's pseudocode computes it (exposed for tests): C plus the
// dot product of a row of A and a column of B, k_pairs bf16 pairs each (a[2p], a[2p + 1] and b[2p],
// b[2p + 1]). Two fp32 sums start at zero, one over the first bf16 of each pair and one over the second,
// each term an FMA in pair order; then the two are added, then C. Every step rounds to nearest even,
// reads denormal inputs (bf16 and C) as zero and writes denormal results as zero.
float dpbf16_element(float c, const uint16_t* a, const uint16_t* b, int k_pairs);
}  // namespace emu

}  // namespace ridge::amx

namespace ridge::amx {

// Whether the AMX kernels run on the emulator (RIDGE_AMX_EMULATE=1) is a switch of the dispatch policy,
// core/dispatch.hpp: while it is on, every module with AMX code takes its emulated twin (an
// `_amxemu.cpp` file) for the work AMX does, on any machine, and its usual path for the rest.

// The configuration this thread's tiles hold (on the instructions or on the emulator), as the kernels
// track it: a kernel loads its configuration (a static object) only when another is in place, and its
// module releases the tiles when its threads are done (amx_tiles.inc: tile_config, tile_release).
const TileConfig*& loaded_config(bool hardware);

// One tile instruction on one tile triple, for tests: C (tile 0, m rows x n_bytes) is loaded from `c`,
// A (tile 4, m x k_bytes) from `a`, B (tile 5, k_bytes / 4 rows x n_bytes) from `b`, each row-major
// and packed; then TDPBF16PS or TDPBSSD, and C is stored to `out`. On the emulator, or on the
// instructions (only where cpu::supported(Isa::amx); tiles_amx.cpp). The tile configuration is released
// after.
enum class Op { dpbf16ps, dpbssd };
void run_one_emulated(Op op, int m, int k_bytes, int n_bytes, const void* c, const void* a, const void* b,
                      void* out);
void run_one_hardware(Op op, int m, int k_bytes, int n_bytes, const void* c, const void* a, const void* b,
                      void* out);
// The instructions without the machine check (tiles_amx.cpp): only where the CPU has AMX and Linux
// granted the tile data (cpu.cpp's read_info, before cpu::supported can answer).
void run_one_on_the_tiles(Op op, int m, int k_bytes, int n_bytes, const void* c, const void* a, const void* b,
                          void* out);

// The check of the instructions at start. cpu::info() runs it once per process where the CPU has AMX
// and the tile data is granted, and offers the amx path only if it passes. Tile programs whose every
// sum is exact (bf16 operands that are small integers, any int8) run on `run` and on the emulator:
// full and partial tiles, both dot products, a C loaded first. "" when every bit agrees, else the first
// difference in one line. Exact sums make the answer independent of the order in which the hardware
// adds; what is checked is what the kernels' correctness rests on (the configuration, the strides, the
// shapes and which elements meet), and the kernels themselves are checked on the emulator by the suite.
using RunOne = void (*)(Op op, int m, int k_bytes, int n_bytes, const void* c, const void* a, const void* b,
                        void* out);
std::string differs_from_emulator(RunOne run);

}  // namespace ridge::amx
