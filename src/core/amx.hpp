// Intel AMX (Advanced Matrix Extensions) as ridge's kernels see it: the palette-1 tile configuration
// and a plain C++ model of the eight tiles (the emulator), which runs the same kernel source as the
// real instructions (src/core/amx_tiles.inc) on any machine.
//
// The emulator follows Intel's ISA reference (SDM vol. 2, TILELOADD / TILESTORED / TILEZERO /
// TDPBF16PS / TDPBSSD; LDTILECFG / TILERELEASE): eight tiles of up to 16 rows x 64 bytes, each with
// its configured rows and bytes per row; a load fills the configured rows and bytes and zeroes the
// rest of the tile; TDPBF16PS accumulates, per fp32 element, the two bf16 products of each dword pair
// in order (pair element 0, then 1), each addition rounded to nearest even, bf16 inputs that are
// denormal read as zero and fp32 results that are denormal written as zero; TDPBSSD adds the four
// signed byte products of each dword into an int32, wrapping. Shape rules the hardware enforces with
// #UD (tile not configured, rows or bytes that do not match) are ridge::Error here.
#pragma once

#include <cstdint>

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
// One bf16 x bf16 dot-product step as TDPBF16PS performs it: acc + a0 * b0 + a1 * b1, in that order,
// with the denormal and rounding rules above (exposed for tests).
float dpbf16_step(float acc, uint16_t a0, uint16_t a1, uint16_t b0, uint16_t b1);
}  // namespace emu

}  // namespace ridge::amx

namespace ridge::amx {

// Whether the AMX kernels run on the emulator: RIDGE_AMX_EMULATE=1, or a ScopedEmulation (tests). While
// on, every module with AMX code takes its emulated twin (an `_amxemu.cpp` file) for the work AMX does,
// on any machine, and its usual path for the rest.
bool emulated();
class ScopedEmulation {
 public:
  explicit ScopedEmulation(bool on = true);
  ~ScopedEmulation();
  ScopedEmulation(const ScopedEmulation&) = delete;
  ScopedEmulation& operator=(const ScopedEmulation&) = delete;

 private:
  int previous_;
};

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

}  // namespace ridge::amx
