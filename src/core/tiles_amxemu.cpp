// The AMX tile emulator (src/core/amx.hpp): plain C++, compiled without ISA flags and without
// floating-point contraction, so every machine runs the AMX kernels' source and the suite can check
// them anywhere.
#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "core/amx.hpp"
#include "ridge/core/error.hpp"
#include "core/check.hpp"
#include "ridge/core/cpu.hpp"

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
  for (uint8_t r : cfg.reserved0)
    check(r == 0, "amx emulator: a reserved byte of the configuration is not zero");
  // The hardware resumes an interrupted load or store at start_row; ridge's kernels always give 0.
  check(cfg.start_row == 0, "amx emulator: start_row {} (the emulator models 0 only)", cfg.start_row);
  g.cfg = cfg;
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

float dpbf16_element(float c, const uint16_t* a, const uint16_t* b, int k_pairs) {
  // Each term is an FMA with one rounding. A bf16 x bf16 product is exact in double (8 x 8 significand
  // bits), and so is its sum with an fp32 whenever the two are within 29 binades of each other; further
  // apart, the smaller is below 2^-29 of the larger, so the double sum cannot land on a midpoint
  // between two floats and rounding it to float rounds the exact sum. Either way this is fmaf, without
  // the cost of a software fmaf on machines built without FMA.
  auto fma_ftz = [](float x, float y, float acc) {
    return flush(
        static_cast<float>(static_cast<double>(x) * static_cast<double>(y) + static_cast<double>(acc)));
  };
  float even = 0.0f, odd = 0.0f;
  for (int p = 0; p < k_pairs; ++p) {
    even = fma_ftz(bf16_in(a[2 * p]), bf16_in(b[2 * p]), even);
    odd = fma_ftz(bf16_in(a[2 * p + 1]), bf16_in(b[2 * p + 1]), odd);
  }
  return flush(flush(c) + flush(even + odd));
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
  uint16_t bcol[2 * kMaxRows];  // column j of B: the pair of each of its kk rows
  for (int j = 0; j < n; ++j) {
    for (int k = 0; k < kk; ++k) std::memcpy(&bcol[2 * k], &g.data[b][k][4 * j], 4);
    for (int m = 0; m < m_rows; ++m) {
      uint16_t arow[2 * kMaxRows];
      std::memcpy(arow, g.data[a][m], static_cast<size_t>(4 * kk));
      float acc;
      std::memcpy(&acc, &g.data[c][m][4 * j], 4);
      acc = dpbf16_element(acc, arow, bcol, kk);
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
const TileConfig*& loaded_config(bool hardware) {
  thread_local const TileConfig* hw = nullptr;
  thread_local const TileConfig* emu = nullptr;
  return hardware ? hw : emu;
}

namespace {
#include "core/amx_tiles.inc"
#include "core/tile_program.inc"
}  // namespace

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

namespace ridge::amx {

std::string differs_from_emulator(RunOne run) {
  struct Shape {
    Op op;
    int m, k_bytes, n_bytes;
  };
  // Full tiles, partial ones (rows, K and N below the tile's), and the smallest, for both products.
  const Shape shapes[] = {{Op::dpbf16ps, 16, 64, 64}, {Op::dpbf16ps, 7, 40, 36}, {Op::dpbf16ps, 1, 4, 4},
                          {Op::dpbssd, 16, 64, 64},   {Op::dpbssd, 5, 24, 52},   {Op::dpbssd, 1, 4, 4}};
  uint32_t state = 0x2545F491u;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  try {
    for (const Shape& s : shapes) {
      const int k_rows = s.k_bytes / 4;
      std::vector<uint8_t> c(static_cast<size_t>(s.m) * s.n_bytes), a(static_cast<size_t>(s.m) * s.k_bytes),
          b(static_cast<size_t>(k_rows) * s.n_bytes), hw(c.size()), em(c.size());
      if (s.op == Op::dpbf16ps) {
        // Integers in [-8, 8] as bf16 (exact), C integers in [-64, 64]: every product and sum is an
        // integer far below 2^24, so any order of addition gives the same fp32.
        auto bf16_of = [](int v) {
          const float f = static_cast<float>(v);
          uint32_t u;
          std::memcpy(&u, &f, 4);
          return static_cast<uint16_t>(u >> 16);
        };
        for (size_t i = 0; i + 1 < a.size(); i += 2) {
          const uint16_t h = bf16_of(static_cast<int>(next() % 17) - 8);
          std::memcpy(&a[i], &h, 2);
        }
        for (size_t i = 0; i + 1 < b.size(); i += 2) {
          const uint16_t h = bf16_of(static_cast<int>(next() % 17) - 8);
          std::memcpy(&b[i], &h, 2);
        }
        for (size_t i = 0; i + 3 < c.size(); i += 4) {
          const float f = static_cast<float>(static_cast<int>(next() % 129) - 64);
          std::memcpy(&c[i], &f, 4);
        }
      } else {
        for (auto& x : a) x = static_cast<uint8_t>(next());
        for (auto& x : b) x = static_cast<uint8_t>(next());
        for (auto& x : c) x = static_cast<uint8_t>(next());
      }
      run(s.op, s.m, s.k_bytes, s.n_bytes, c.data(), a.data(), b.data(), hw.data());
      run_one_emulated(s.op, s.m, s.k_bytes, s.n_bytes, c.data(), a.data(), b.data(), em.data());
      for (size_t i = 0; i + 3 < hw.size(); i += 4) {
        uint32_t h, e;
        std::memcpy(&h, &hw[i], 4);
        std::memcpy(&e, &em[i], 4);
        if (h != e)
          return fmt::format(
              "{} on a {}-row tile, {} B of K, {} B of N: row {} column {} is 0x{:08x}, the "
              "emulator's 0x{:08x}",
              s.op == Op::dpbf16ps ? "tdpbf16ps" : "tdpbssd", s.m, s.k_bytes, s.n_bytes, i / s.n_bytes,
              (i % s.n_bytes) / 4, h, e);
      }
    }
  } catch (const std::exception& e) {
    return std::string("the check could not run: ") + e.what();
  }
  return "";
}

}  // namespace ridge::amx
