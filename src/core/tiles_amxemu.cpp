// The AMX tile emulator (src/core/amx.hpp): plain C++, compiled without ISA flags and without
// floating-point contraction, so every machine runs the AMX kernels' source and the suite can check
// them anywhere.
#include <atomic>
#include <cstdint>
#include <cstring>

#include "core/amx.hpp"
#include "ridge/core/error.hpp"
#include "core/check.hpp"
#include "ridge/core/cpu.hpp"
#include "ridge/core/env.hpp"

namespace ridge::amx::emu {
namespace {

struct State {
  bool configured = false;
  TileConfig cfg;
  alignas(64) uint8_t data[kTiles][kMaxRows][kMaxColsb] = {};
};
thread_local State g;

void need(int t) {
  check(g.configured, "amx emulator: tile instruction without a tile configuration (ldtilecfg)");
  check(t >= 0 && t < kTiles, "amx emulator: tile {} does not exist (0..7)", t);
  check(g.cfg.rows[t] > 0 && g.cfg.colsb[t] > 0, "amx emulator: tile {} is not configured", t);
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// A denormal fp32 becomes a zero of the same sign.
float flush(float f) {
  const uint32_t u = bits(f);
  return (u & 0x7F800000u) == 0 ? from_bits(u & 0x80000000u) : f;
}
float bf16_in(uint16_t h) {
  return flush(from_bits(static_cast<uint32_t>(h) << 16));  // DAZ
}

}  // namespace

void ldtilecfg(const TileConfig& cfg) {
  check(cfg.palette == 1 || cfg.palette == 0, "amx emulator: palette {} (accepted: 0, 1)", cfg.palette);
  if (cfg.palette == 0) {  // palette 0 is the initial state
    tilerelease();
    return;
  }
  for (int t = 0; t < kTiles; ++t) {
    check(cfg.rows[t] <= kMaxRows && cfg.colsb[t] <= kMaxColsb,
          "amx emulator: tile {} configured {} rows x {} bytes (at most 16 x 64)", t, cfg.rows[t],
          cfg.colsb[t]);
    check((cfg.rows[t] == 0) == (cfg.colsb[t] == 0), "amx emulator: tile {} has rows or bytes but not both",
          t);
  }
  for (int t = kTiles; t < 16; ++t)
    check(cfg.rows[t] == 0 && cfg.colsb[t] == 0, "amx emulator: tile {} configured (palette 1 has 8)", t);
  g.cfg = cfg;
  g.cfg.start_row = 0;
  g.configured = true;
  std::memset(g.data, 0, sizeof(g.data));
}

void tilerelease() {
  g.configured = false;
  g.cfg = TileConfig{};
  std::memset(g.data, 0, sizeof(g.data));
}

bool configured() {
  return g.configured;
}

void tilezero(int t) {
  need(t);
  std::memset(g.data[t], 0, sizeof(g.data[t]));
}

void tileloadd(int t, const void* base, int64_t stride) {
  need(t);
  const auto* p = static_cast<const uint8_t*>(base);
  std::memset(g.data[t], 0, sizeof(g.data[t]));
  for (int r = 0; r < g.cfg.rows[t]; ++r) std::memcpy(g.data[t][r], p + r * stride, g.cfg.colsb[t]);
}

void tilestored(int t, void* base, int64_t stride) {
  need(t);
  auto* p = static_cast<uint8_t*>(base);
  for (int r = 0; r < g.cfg.rows[t]; ++r) std::memcpy(p + r * stride, g.data[t][r], g.cfg.colsb[t]);
}

float dpbf16_step(float acc, uint16_t a0, uint16_t a1, uint16_t b0, uint16_t b1) {
  // Each bf16 x bf16 product is exact in fp32 (8 x 8 significand bits) unless it under- or overflows.
  acc = flush(acc + flush(bf16_in(a0) * bf16_in(b0)));
  acc = flush(acc + flush(bf16_in(a1) * bf16_in(b1)));
  return acc;
}

namespace {
// The shape rules shared by both dot products: C is M x N dwords, A is M x K dwords, B is K x N dwords.
void check_shapes(int c, int a, int b, const char* what) {
  need(c);
  need(a);
  need(b);
  const TileConfig& f = g.cfg;
  check(c != a && c != b && a != b, "amx emulator: {} with tiles {}, {}, {} (must differ)", what, c, a, b);
  check(f.rows[c] == f.rows[a] && f.colsb[c] == f.colsb[b] && f.colsb[a] / 4 == f.rows[b] &&
            f.colsb[a] % 4 == 0 && f.colsb[c] % 4 == 0,
        "amx emulator: {} shapes do not match: C {}x{}B, A {}x{}B, B {}x{}B", what, f.rows[c], f.colsb[c],
        f.rows[a], f.colsb[a], f.rows[b], f.colsb[b]);
}
}  // namespace

void tdpbf16ps(int c, int a, int b) {
  check_shapes(c, a, b, "tdpbf16ps");
  const int m_rows = g.cfg.rows[c], n = g.cfg.colsb[c] / 4, kk = g.cfg.colsb[a] / 4;
  for (int m = 0; m < m_rows; ++m) {
    for (int j = 0; j < n; ++j) {
      float acc;
      std::memcpy(&acc, &g.data[c][m][4 * j], 4);
      for (int k = 0; k < kk; ++k) {
        uint16_t av[2], bv[2];
        std::memcpy(av, &g.data[a][m][4 * k], 4);
        std::memcpy(bv, &g.data[b][k][4 * j], 4);
        acc = dpbf16_step(acc, av[0], av[1], bv[0], bv[1]);
      }
      std::memcpy(&g.data[c][m][4 * j], &acc, 4);
    }
  }
}

void tdpbssd(int c, int a, int b) {
  check_shapes(c, a, b, "tdpbssd");
  const int m_rows = g.cfg.rows[c], n = g.cfg.colsb[c] / 4, kk = g.cfg.colsb[a] / 4;
  for (int m = 0; m < m_rows; ++m) {
    for (int j = 0; j < n; ++j) {
      uint32_t acc;
      std::memcpy(&acc, &g.data[c][m][4 * j], 4);
      for (int k = 0; k < kk; ++k)
        for (int e = 0; e < 4; ++e) {
          const auto x = static_cast<int8_t>(g.data[a][m][4 * k + e]);
          const auto y = static_cast<int8_t>(g.data[b][k][4 * j + e]);
          acc += static_cast<uint32_t>(static_cast<int32_t>(x) * static_cast<int32_t>(y));  // wraps
        }
      std::memcpy(&g.data[c][m][4 * j], &acc, 4);
    }
  }
}

}  // namespace ridge::amx::emu

namespace ridge::amx {
namespace {
std::atomic<int> g_emulation{-1};  // -1: RIDGE_AMX_EMULATE decides
}  // namespace

bool emulated() {
  const int o = g_emulation.load(std::memory_order_relaxed);
  return o >= 0 ? o == 1 : env::knobs().amx_emulate;
}
ScopedEmulation::ScopedEmulation(bool on) : previous_(g_emulation.load()) {
  g_emulation.store(on ? 1 : 0);
}
ScopedEmulation::~ScopedEmulation() {
  g_emulation.store(previous_);
}

const TileConfig*& loaded_config(bool hardware) {
  thread_local const TileConfig* hw = nullptr;
  thread_local const TileConfig* emu = nullptr;
  return hardware ? hw : emu;
}

namespace {
#include "core/amx_tiles.inc"
#include "core/tile_program.inc"
}  // namespace

void run_one_on_the_tiles(Op op, int m, int k_bytes, int n_bytes, const void* c, const void* a, const void* b,
                          void* out);  // tiles_amx.cpp

void run_one_hardware(Op op, int m, int k_bytes, int n_bytes, const void* c, const void* a, const void* b,
                      void* out) {
  check(cpu::supported(cpu::Isa::amx), "amx: this machine cannot run AMX instructions (ridge info says why)");
  run_one_on_the_tiles(op, m, k_bytes, n_bytes, c, a, b, out);
}

void run_one_emulated(Op op, int m, int k_bytes, int n_bytes, const void* c, const void* a, const void* b,
                      void* out) {
  run_one<EmuTiles>(op, m, k_bytes, n_bytes, c, a, b, out);
}

}  // namespace ridge::amx
