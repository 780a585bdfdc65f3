// The AMX tile emulator (core/amx.hpp) against references computed here from the ISA reference's
// definitions, and, on a machine with AMX, against the instructions bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <tuple>
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

// The reference's order: acc + a0*b0, rounded, then + a1*b1, rounded (RNE). 1 + 2^-24 ties to 1 twice,
// where the exact sum 1 + 2^-23 is representable: a fused or reordered sum would give it.
TEST(AmxEmulator, Bf16StepAddsEachProductInOrderRoundingToNearestEven) {
  const uint16_t one = bf16_bits(1.0f), tiny = bf16_bits(std::ldexp(1.0f, -12));
  EXPECT_EQ(ridge::amx::emu::dpbf16_step(1.0f, tiny, tiny, tiny, tiny), 1.0f);
  // Ordered: (2^-24 + 2^-24) first would be exact; the reference adds acc first.
  EXPECT_EQ(ridge::amx::emu::dpbf16_step(0.0f, tiny, tiny, tiny, tiny), std::ldexp(1.0f, -23));
  // Round to nearest even upward: 1 + 3*2^-24 -> 1 + 2^-22 (tie between 1+2^-23 and 1+2^-22 goes even).
  const uint16_t three = bf16_bits(3.0f * std::ldexp(1.0f, -12));
  EXPECT_EQ(ridge::amx::emu::dpbf16_step(1.0f, three, 0, tiny, 0), 1.0f + std::ldexp(1.0f, -22));
  EXPECT_EQ(ridge::amx::emu::dpbf16_step(2.0f, one, one, one, one), 4.0f);
}

TEST(AmxEmulator, Bf16DenormalInputsReadAsZeroAndDenormalResultsAreFlushed) {
  const uint16_t denormal = 0x0001;  // the smallest positive bf16 denormal
  const uint16_t one = bf16_bits(1.0f);
  EXPECT_EQ(bits(ridge::amx::emu::dpbf16_step(0.0f, denormal, 0, one, 0)), 0u);
  // A product of normals below FLT_MIN: 2^-70 * 2^-70 = 2^-140, an fp32 denormal, written as +0.
  const uint16_t small = bf16_bits(std::ldexp(1.0f, -70));
  EXPECT_EQ(bits(ridge::amx::emu::dpbf16_step(0.0f, small, 0, small, 0)), 0u);
  const uint16_t neg_small = bf16_bits(-std::ldexp(1.0f, -70));
  EXPECT_EQ(bits(ridge::amx::emu::dpbf16_step(-0.0f, neg_small, 0x8000, small, 0)),
            0x80000000u);  // -0 + -0 + -0
  // A normal result is kept.
  EXPECT_EQ(ridge::amx::emu::dpbf16_step(0.0f, bf16_bits(std::ldexp(1.0f, -50)), 0, small, 0),
            std::ldexp(1.0f, -120));
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

// On a machine with AMX: the emulator and the instructions agree bit for bit on random tiles of
// every shape class, with values over many binades (rounding, cancellation, denormals).
TEST(AmxEmulator, MatchesTheInstructionsBitForBitOnThisMachine) {
  if (!ridge::cpu::supported(ridge::cpu::Isa::amx))
    GTEST_SKIP() << "no AMX here (ridge info says why); the emulator is checked against the reference only";
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
      ASSERT_EQ(std::memcmp(emu.data(), hw.data(), emu.size() * 4), 0) << m << "x" << kb << "x" << nb;
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
