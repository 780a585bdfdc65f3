// CPU facts and ISA selection: features consistent with the paths, parsing, overrides.
#include <gtest/gtest.h>

#include <string>

#include "ridge/core.hpp"

namespace {

using namespace ridge;
using cpu::Isa;

TEST(Cpu, FeaturesAreConsistentWithTheSupportedPaths) {
  const auto& f = cpu::info().features;
  // A feature the OS does not save registers for is reported absent.
  if (!f.os_avx) {
    EXPECT_FALSE(f.avx2 || f.fma || f.avx512f);
  }
  if (!f.os_avx512) {
    EXPECT_FALSE(f.avx512f || f.avx512_bf16 || f.avx512_vnni);
  }
  if (!f.os_amx) {
    EXPECT_FALSE(f.amx_tile || f.amx_bf16 || f.amx_int8);
  }
  EXPECT_EQ(cpu::supported(Isa::avx2), f.avx2 && f.fma && f.f16c && f.bmi2);
  EXPECT_EQ(cpu::supported(Isa::avx512bf16), cpu::supported(Isa::avx512) && f.avx512_bf16);
  // amx_refused is set, the facts left as they are, where RIDGE_ISA asks for a path below amx.
  EXPECT_EQ(cpu::supported(Isa::amx), cpu::supported(Isa::avx512bf16) && f.amx_tile && f.amx_bf16 &&
                                          f.amx_int8 && f.os_amx && cpu::info().amx_refused.empty());
  // The amx path is refused for a reason only on a CPU whose cpuid has AMX.
  if (!cpu::info().amx_refused.empty()) {
    EXPECT_FALSE(cpu::supported(Isa::amx));
  }
  if (cpu::supported(Isa::amx)) {
    EXPECT_TRUE(cpu::supported(Isa::avx512bf16));
  }
  // Each path needs every path below it.
  if (cpu::supported(Isa::avx512bf16)) {
    EXPECT_TRUE(cpu::supported(Isa::avx512));
  }
  if (cpu::supported(Isa::avx512)) {
    EXPECT_TRUE(cpu::supported(Isa::avx2));
  }
  EXPECT_TRUE(cpu::supported(Isa::scalar));
  if (f.avx512f) {
    EXPECT_TRUE(f.avx2);  // no AVX-512 machine lacks AVX2
  }
}

TEST(Cpu, SupportedIsasAreSortedAndEndAtTheBest) {
  const auto isas = cpu::supported_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::scalar);
  EXPECT_EQ(isas.back(), cpu::best_isa());
  for (size_t i = 1; i < isas.size(); ++i)
    EXPECT_LT(static_cast<int>(isas[i - 1]), static_cast<int>(isas[i]));
  for (Isa i : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::avx512bf16, Isa::amx})
    EXPECT_EQ(cpu::supported(i), std::find(isas.begin(), isas.end(), i) != isas.end()) << cpu::isa_name(i);
}

TEST(Cpu, InfoIsPlausible) {
  const auto& in = cpu::info();
  EXPECT_FALSE(in.vendor.empty());
  EXPECT_GE(in.logical_cpus, 1);
  EXPECT_GE(in.cores, 1);
  EXPECT_LE(in.cores, in.logical_cpus);
  EXPECT_GT(in.caches.line, 0);
  // Cache sizes are unknown (0) or at least a few KiB, and grow outwards when all are known.
  for (int64_t s : {in.caches.l1d, in.caches.l2, in.caches.l3}) EXPECT_TRUE(s == 0 || s >= 4096) << s;
  if (in.caches.l1d && in.caches.l2) {
    EXPECT_LT(in.caches.l1d, in.caches.l2);
  }
  if (in.caches.l2 && in.caches.l3) {
    EXPECT_LE(in.caches.l2, in.caches.l3);
  }
  EXPECT_EQ(&cpu::info(), &cpu::info());  // read once
}

TEST(Cpu, ParseIsaAcceptsEveryNameAndRejectsOthers) {
  for (Isa i : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::avx512bf16, Isa::amx})
    EXPECT_EQ(cpu::parse_isa(cpu::isa_name(i)), i);
  for (const char* bad : {"", "AVX2", "avx", "sse", "avx512 ", "native"}) {
    try {
      cpu::parse_isa(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("RIDGE_ISA"), std::string::npos) << msg;
      EXPECT_NE(msg.find("scalar, avx2, avx512, avx512bf16, amx"), std::string::npos) << msg;
    }
  }
  try {
    cpu::parse_isa("bogus", "--isa");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--isa:", 0), 0u) << e.what();
  }
}

TEST(Cpu, ResolveIsaRequestFollowsRidgeIsaSemantics) {
  EXPECT_EQ(cpu::resolve_isa_request(""), cpu::best_isa());
  for (Isa i : cpu::supported_isas()) EXPECT_EQ(cpu::resolve_isa_request(cpu::isa_name(i)), i);
  EXPECT_THROW(cpu::resolve_isa_request("bogus"), Error);
  for (Isa i : {Isa::avx2, Isa::avx512, Isa::avx512bf16, Isa::amx})
    if (!cpu::supported(i)) {
      EXPECT_THROW(cpu::resolve_isa_request(cpu::isa_name(i)), Error);
    }
}

TEST(Cpu, SetIsaOverridesAndScopedIsaRestores) {
  const Isa before = cpu::active_isa();
  for (Isa i : cpu::supported_isas()) {
    {
      cpu::ScopedIsa outer(i);
      EXPECT_EQ(cpu::active_isa(), i);
      {
        cpu::ScopedIsa inner(Isa::scalar);
        EXPECT_EQ(cpu::active_isa(), Isa::scalar);
      }
      EXPECT_EQ(cpu::active_isa(), i);  // nested scopes restore the enclosing override
    }
    EXPECT_EQ(cpu::active_isa(), before);
  }
  cpu::set_isa(Isa::scalar);
  EXPECT_EQ(cpu::active_isa(), Isa::scalar);
  cpu::reset_isa();
  EXPECT_EQ(cpu::active_isa(), before);
}

TEST(Cpu, SetIsaAboveTheMachineThrowsAndChangesNothing) {
  const Isa before = cpu::active_isa();
  for (Isa i : {Isa::avx2, Isa::avx512, Isa::avx512bf16, Isa::amx}) {
    if (cpu::supported(i)) continue;
    EXPECT_THROW(cpu::set_isa(i), Error);
    EXPECT_THROW(cpu::ScopedIsa guard(i), Error);
    EXPECT_EQ(cpu::active_isa(), before);
  }
  if (cpu::best_isa() == Isa::amx) GTEST_SKIP() << "this machine runs every path; nothing is above it";
}

}  // namespace
