// The AMX tile emulator (core/amx.hpp) against references computed here from the ISA reference's
// definitions, and, on a machine with AMX, against the instructions bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/amx.hpp"
#include "ridge/core/cpu.hpp"
#include "ridge/core/error.hpp"

namespace {

using ridge::amx::Op;

uint16_t bf16_bits(float f) {  // values the tests use are exact in bf16
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}
float f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Small integers: every partial sum is exact, so the order of additions cannot matter and the
// reference is the plain sum in double.
TEST(AmxEmulator, Bf16DotProductOfSmallIntegersIsExact) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> d(-8, 8);
  for (const auto& [m, kb, nb] : {std::tuple{16, 64, 64}, {5, 12, 20}, {1, 4, 4}, {16, 32, 8}}) {
    const int kp = kb / 4, n = nb / 4;  // k pairs, output columns
    std::vector<uint16_t> a(m * kp * 2), b(kp * n * 2);
    std::vector<float> c(m * n), out(m * n);
    for (auto& x : a) x = bf16_bits(static_cast<float>(d(rng)));
    for (auto& x : b) x = bf16_bits(static_cast<float>(d(rng)));
    for (auto& x : c) x = static_cast<float>(d(rng));
    ridge::amx::run_one_emulated(Op::dpbf16ps, m, kb, nb, c.data(), a.data(), b.data(), out.data());
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double want = c[i * n + j];
        for (int p = 0; p < kp; ++p)
          for (int e = 0; e < 2; ++e)
            want += static_cast<double>(f32(uint32_t{a[(i * kp + p) * 2 + e]} << 16)) *
                    f32(uint32_t{b[(p * n + j) * 2 + e]} << 16);
        ASSERT_EQ(out[i * n + j], static_cast<float>(want)) << i << "," << j;
      }
  }
}

// One element, k pairs: dpbf16_element with the pairs given as floats (exact in bf16).
float element(float c, std::vector<std::pair<float, float>> a, std::vector<std::pair<float, float>> b) {
  std::vector<uint16_t> av, bv;
  for (const auto& [x, y] : a) av.insert(av.end(), {bf16_bits(x), bf16_bits(y)});
  for (const auto& [x, y] : b) bv.insert(bv.end(), {bf16_bits(x), bf16_bits(y)});
  return ridge::amx::emu::dpbf16_element(c, av.data(), bv.data(), static_cast<int>(a.size()));
}

// The SDM's order: one FMA chain over the first bf16 of each pair and one over the second, each from
// zero, rounded to nearest even at every step; then the two added; then C.
TEST(AmxEmulator, Bf16ElementIsTwoFmaChainsThenTheirSumThenC) {
  const float t = std::ldexp(1.0f, -12);  // t * t = 2^-24, half an ulp of 1
  // C last: 2^-24 + 2^-24 = 2^-23 is exact, and 1 + 2^-23 is a float. Adding each product into C in
  // turn (the intrinsics guide's order) would round 1 + 2^-24 to 1 twice.
  EXPECT_EQ(element(1.0f, {{t, t}}, {{t, t}}), 1.0f + std::ldexp(1.0f, -23));
  // Within a chain every FMA rounds: 1, then 1 + 2^-24 ties to 1, twice; the exact 1 + 2^-23 is lost.
  EXPECT_EQ(element(0.0f, {{1, 0}, {t, 0}, {t, 0}}, {{1, 0}, {t, 0}, {t, 0}}), 1.0f);
  // The same three products split over the two chains: 1 + (2^-24 + 2^-24) keeps them.
  EXPECT_EQ(element(0.0f, {{1, 0}, {0, t}, {0, t}}, {{1, 0}, {0, t}, {0, t}}), 1.0f + std::ldexp(1.0f, -23));
  // Round to nearest even upward: 1 + 3 * 2^-24 goes to 1 + 2^-22.
  EXPECT_EQ(element(0.0f, {{1, 0}, {3 * t, 0}}, {{1, 0}, {t, 0}}), 1.0f + std::ldexp(1.0f, -22));
  EXPECT_EQ(element(2.0f, {{1, 1}}, {{1, 1}}), 4.0f);
}

TEST(AmxEmulator, Bf16DenormalInputsReadAsZeroAndDenormalResultsAreFlushed) {
  const float one = 1.0f, denormal = std::ldexp(1.0f, -133);  // a bf16 denormal (bits 0x0001)
  ASSERT_EQ(bf16_bits(denormal), 0x0001);
  EXPECT_EQ(bits(element(0.0f, {{denormal, 0}}, {{one, 0}})), 0u);
  // A product of normals below FLT_MIN: 2^-70 * 2^-70 = 2^-140, an fp32 denormal, written as +0.
  const float small = std::ldexp(1.0f, -70);
  EXPECT_EQ(bits(element(0.0f, {{small, 0}}, {{small, 0}})), 0u);
  // The FMA keeps that product exact when the sum is normal: 2^-126 + 2^-140 (a multiply rounded
  // and flushed first would lose it).
  EXPECT_EQ(element(0.0f, {{std::ldexp(1.0f, -63), 0}, {small, 0}}, {{std::ldexp(1.0f, -63), 0}, {small, 0}}),
            std::ldexp(1.0f, -126) + std::ldexp(1.0f, -140));
  // A denormal C reads as zero: 2^-127 + 2^-126 gives 2^-126.
  EXPECT_EQ(element(std::ldexp(1.0f, -127), {{std::ldexp(1.0f, -63), 0}}, {{std::ldexp(1.0f, -63), 0}}),
            std::ldexp(1.0f, -126));
  // A normal result is kept.
  EXPECT_EQ(element(0.0f, {{std::ldexp(1.0f, -50), 0}}, {{small, 0}}), std::ldexp(1.0f, -120));
}

TEST(AmxEmulator, Int8DotProductWrapsInInt32) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> d(-128, 127);
  const int m = 16, kb = 64, nb = 64, kq = kb / 4, n = nb / 4;
  std::vector<int8_t> a(m * kb), b(kq * nb);
  std::vector<int32_t> c(m * n), out(m * n);
  for (auto& x : a) x = static_cast<int8_t>(d(rng));
  for (auto& x : b) x = static_cast<int8_t>(d(rng));
  for (auto& x : c) x = 2147483000 - d(rng);  // near the top: the sums wrap
  ridge::amx::run_one_emulated(Op::dpbssd, m, kb, nb, c.data(), a.data(), b.data(), out.data());
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      int64_t want = c[i * n + j];
      for (int q = 0; q < kq; ++q)
        for (int e = 0; e < 4; ++e) want += int64_t{a[i * kb + q * 4 + e]} * b[q * nb + j * 4 + e];
      ASSERT_EQ(out[i * n + j], static_cast<int32_t>(static_cast<uint32_t>(want))) << i << "," << j;
    }
}

TEST(AmxEmulator, LoadsZeroWhatTheConfigurationLeavesOutAndStoresOnlyIt) {
  ridge::amx::TileConfig cfg;
  cfg.rows[3] = 2;
  cfg.colsb[3] = 8;
  ridge::amx::emu::ldtilecfg(cfg);
  std::vector<uint8_t> src(64 * 16, 0xAB), dst(64 * 16, 0xCD);
  ridge::amx::emu::tileloadd(3, src.data(), 64);
  ridge::amx::emu::tilestored(3, dst.data(), 16);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) EXPECT_EQ(dst[r * 16 + c], (r < 2 && c < 8) ? 0xAB : 0xCD) << r << "," << c;
  ridge::amx::emu::tilerelease();
  EXPECT_FALSE(ridge::amx::emu::configured());
}

TEST(AmxEmulator, WhatTheHardwareFaultsOnIsAnError) {
  ridge::amx::emu::tilerelease();
  EXPECT_THROW(ridge::amx::emu::tilezero(0), ridge::Error);  // not configured
  ridge::amx::TileConfig cfg;
  cfg.rows[0] = 17;
  cfg.colsb[0] = 64;
  EXPECT_THROW(ridge::amx::emu::ldtilecfg(cfg), ridge::Error);  // more than 16 rows
  cfg.rows[0] = 16;
  cfg.colsb[0] = 64;
  cfg.rows[1] = 16;
  cfg.colsb[1] = 64;
  cfg.rows[2] = 8;  // B must have A's bytes / 4 = 16 rows
  cfg.colsb[2] = 64;
  ridge::amx::emu::ldtilecfg(cfg);
  EXPECT_THROW(ridge::amx::emu::tdpbf16ps(0, 1, 2), ridge::Error);
  EXPECT_THROW(ridge::amx::emu::tdpbf16ps(0, 0, 1), ridge::Error);  // the same tile twice
  EXPECT_THROW(ridge::amx::emu::tilezero(5), ridge::Error);         // tile 5 not configured
  ridge::amx::emu::tilerelease();
}

// Machines for the start-up check (amx::differs_from_emulator), each a run_one of its own.
// One that sums each dot product in double and rounds once: another order of additions than the
// emulator's, which the check's exact sums must not see.
void sums_in_double(Op op, int m, int kb, int nb, const void* c, const void* a, const void* b, void* out) {
  if (op != Op::dpbf16ps) return ridge::amx::run_one_emulated(op, m, kb, nb, c, a, b, out);
  const int kp = kb / 4, n = nb / 4;
  const auto* a16 = static_cast<const uint16_t*>(a);
  const auto* b16 = static_cast<const uint16_t*>(b);
  const auto* c32 = static_cast<const float*>(c);
  auto* o = static_cast<float*>(out);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double acc = c32[i * n + j];
      for (int k = 0; k < 2 * kp; ++k)
        acc += static_cast<double>(f32(uint32_t{a16[i * 2 * kp + k]} << 16)) *
               f32(uint32_t{b16[(k / 2) * 2 * n + 2 * j + k % 2]} << 16);
      o[i * n + j] = static_cast<float>(acc);
    }
}
// One whose bf16 product is off by one bit in one element of a partial tile.
void one_bit_off(Op op, int m, int kb, int nb, const void* c, const void* a, const void* b, void* out) {
  ridge::amx::run_one_emulated(op, m, kb, nb, c, a, b, out);
  if (op == Op::dpbf16ps && m == 7) static_cast<uint8_t*>(out)[2 * nb + 4 * 3] ^= 1;  // row 2, column 3
}
// One whose int8 product reads B's rows 4 bytes apart, whatever the configured bytes per row.
void wrong_stride(Op op, int m, int kb, int nb, const void* c, const void* a, const void* b, void* out) {
  if (op != Op::dpbssd) return ridge::amx::run_one_emulated(op, m, kb, nb, c, a, b, out);
  const auto* ai = static_cast<const int8_t*>(a);
  const auto* bi = static_cast<const int8_t*>(b);
  const auto* ci = static_cast<const int32_t*>(c);
  auto* o = static_cast<int32_t*>(out);
  const int n = nb / 4;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      int64_t acc = ci[i * n + j];
      for (int k = 0; k < kb; ++k) acc += int64_t{ai[i * kb + k]} * bi[(k / 4) * 4 + 4 * j + k % 4];
      o[i * n + j] = static_cast<int32_t>(acc);
    }
}

// The check cpu::info() runs on the instructions at start: the emulator passes it, so does a machine
// that adds in another order (its sums are exact), and a machine off by one bit or reading B with the
// wrong stride is caught, with the instruction, the tile's shape and the element named.
TEST(AmxEmulator, StartUpCheckCatchesAMachineThatDiffers) {
  EXPECT_EQ(ridge::amx::differs_from_emulator(ridge::amx::run_one_emulated), "");
  EXPECT_EQ(ridge::amx::differs_from_emulator(sums_in_double), "");
  const std::string bit = ridge::amx::differs_from_emulator(one_bit_off);
  EXPECT_EQ(bit.rfind("tdpbf16ps on a 7-row tile, 40 B of K, 36 B of N: row 2 column 3 is 0x", 0), 0u) << bit;
  const std::string stride = ridge::amx::differs_from_emulator(wrong_stride);
  EXPECT_EQ(stride.rfind("tdpbssd on a 16-row tile, 64 B of K, 64 B of N: row 0 column ", 0), 0u) << stride;
  // Where the instructions exist, cpu::info() ran it on them and the path is on only if they agreed.
  if (ridge::cpu::supported(ridge::cpu::Isa::amx)) {
    EXPECT_EQ(ridge::amx::differs_from_emulator(ridge::amx::run_one_hardware), "");
  }
}

// On a machine with AMX: the emulator and the instructions agree bit for bit on random tiles of
// every shape class, with values over many binades (rounding, cancellation, denormals).
TEST(AmxEmulator, MatchesTheInstructionsBitForBitOnThisMachine) {
  if (!ridge::cpu::supported(ridge::cpu::Isa::amx))
    GTEST_SKIP() << "no AMX here: " << ridge::cpu::amx_off_reason()
                 << "; the emulator is checked against the reference only";
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> any;
  std::uniform_real_distribution<float> mant(-2.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-140, 40);
  for (const auto& [m, kb, nb] :
       {std::tuple{16, 64, 64}, {7, 12, 20}, {16, 32, 64}, {1, 4, 4}, {3, 64, 16}}) {
    const int kp = kb / 4, n = nb / 4;
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<uint16_t> a(m * kp * 2), b(kp * n * 2);
      std::vector<float> c(m * n), emu(m * n), hw(m * n);
      for (auto& x : a) x = bf16_bits(std::ldexp(mant(rng), expo(rng) / 2));
      for (auto& x : b) x = bf16_bits(std::ldexp(mant(rng), expo(rng) / 2));
      for (auto& x : c) x = trial % 2 ? std::ldexp(mant(rng), expo(rng)) : f32(any(rng) & 0xBFFFFFFFu);
      ridge::amx::run_one_emulated(Op::dpbf16ps, m, kb, nb, c.data(), a.data(), b.data(), emu.data());
      ridge::amx::run_one_hardware(Op::dpbf16ps, m, kb, nb, c.data(), a.data(), b.data(), hw.data());
      for (int e = 0; e < m * n; ++e) {
        if (bits(emu[e]) == bits(hw[e])) continue;
        // Which order the instructions took instead: the intrinsics guide's (each product added into
        // C in turn, rounded, denormals flushed), if that reproduces them.
        const int i = e / n, j = e % n;
        float acc = c[e];
        for (int k = 0; k < 2 * kp; ++k) {
          const float x = f32(uint32_t{a[i * 2 * kp + k]} << 16),
                      y = f32(uint32_t{b[(k / 2) * 2 * n + 2 * j + k % 2]} << 16);
          acc = acc + x * y;
        }
        FAIL() << "tdpbf16ps " << m << "x" << kb << "Bx" << nb << "B, row " << i << " column " << j
               << ": instructions " << std::hexfloat << hw[e] << ", emulator " << emu[e]
               << (bits(acc) == bits(hw[e]) ? " (the instructions add each product into C in turn)" : "");
      }
      std::vector<int8_t> ai(m * kb), bi(kp * nb);
      std::vector<int32_t> ci(m * n), ei(m * n), hi(m * n);
      for (auto& x : ai) x = static_cast<int8_t>(any(rng));
      for (auto& x : bi) x = static_cast<int8_t>(any(rng));
      for (auto& x : ci) x = static_cast<int32_t>(any(rng));
      ridge::amx::run_one_emulated(Op::dpbssd, m, kb, nb, ci.data(), ai.data(), bi.data(), ei.data());
      ridge::amx::run_one_hardware(Op::dpbssd, m, kb, nb, ci.data(), ai.data(), bi.data(), hi.data());
      ASSERT_EQ(ei, hi) << m << "x" << kb << "x" << nb;
    }
  }
}

}  // namespace
