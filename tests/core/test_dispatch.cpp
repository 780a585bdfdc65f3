// The one dispatch policy (core/dispatch.hpp): its table says what the rules it replaced said, one
// scoped override for every switch, and the one list of the machine's paths. (One knob per switch:
// Env.DispatchSwitchesHaveOneKnobEach.)
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ridge/core.hpp"
#include "core/dispatch.hpp"

namespace {

using namespace ridge;
using cpu::Isa;
using dispatch::Choice;
using dispatch::Dtype;
using dispatch::Family;
using dispatch::Jit;
using dispatch::Work;

constexpr Isa kIsas[] = {Isa::scalar, Isa::avx2, Isa::avx512, Isa::avx512bf16, Isa::amx};

// The reference: the rules as GEMM's driver, its AMX kernel file and attention wrote them before the
// policy was one table. Emulated tiles take bf16 and FP8 on any path; on avx512bf16 blocked bf16 runs
// on avx512's fp32 kernels when bf16 is on the FMAs; FP8 on avx512bf16 widens by VBMI when it is on;
// the amx path runs blocked bf16 and FP8 on the tiles and its decode rows on avx512bf16's small-m
// kernels (FP8's with the VBMI widening when on); everything else on the path's own kernels.
Choice rules_before(Dtype d, Work w, const dispatch::Switches& s) {
  const Jit jit = w == Work::small_m ? s.jit : Jit::off;
  const bool blocked = w == Work::blocked;
  if (d != Dtype::f32 && s.amx_emulated) return {Family::amx_emulated, s.isa, jit};
  if (d == Dtype::bf16) {
    if (blocked && s.isa == Isa::avx512bf16 && s.bf16_on_fma) return {Family::bf16_on_fma, Isa::avx512, jit};
    if (s.isa == Isa::amx)
      return blocked ? Choice{Family::amx, Isa::amx, jit} : Choice{Family::isa, Isa::avx512bf16, jit};
  }
  if (d == Dtype::fp8) {
    if (blocked && s.isa == Isa::amx) return {Family::amx, Isa::amx, jit};
    const bool dot = s.isa == Isa::avx512bf16 || s.isa == Isa::amx;
    if (dot) return {s.fp8_vbmi ? Family::vbmi : Family::isa, Isa::avx512bf16, jit};
  }
  return {Family::isa, s.isa, jit};
}

TEST(Dispatch, TheTableSaysWhatTheScatteredRulesSaid) {
  int checked = 0;
  for (Isa isa : kIsas)
    for (int bits = 0; bits < 8; ++bits)
      for (Jit jit : {Jit::off, Jit::on, Jit::every}) {
        const dispatch::Switches s{isa, (bits & 1) != 0, (bits & 2) != 0, (bits & 4) != 0, jit};
        for (Dtype d : {Dtype::f32, Dtype::bf16, Dtype::fp8})
          for (Work w : {Work::blocked, Work::small_m}) {
            const Choice got = dispatch::choose(d, w, s), want = rules_before(d, w, s);
            EXPECT_EQ(static_cast<int>(got.family), static_cast<int>(want.family))
                << cpu::isa_name(isa) << " switches " << bits << " dtype " << static_cast<int>(d) << " work "
                << static_cast<int>(w);
            EXPECT_EQ(got.isa, want.isa) << cpu::isa_name(isa) << " switches " << bits;
            EXPECT_EQ(got.jit, want.jit);
            ++checked;
          }
      }
  EXPECT_EQ(checked, 5 * 8 * 3 * 3 * 2);
}

TEST(Dispatch, ScopedPathForcesEachSwitchNestsAndRestores) {
  const dispatch::Switches before = dispatch::current();
  {
    dispatch::ScopedPath outer(
        {.isa = Isa::scalar, .amx_emulated = true, .bf16_on_fma = true, .jit = Jit::every});
    dispatch::Switches s = dispatch::current();
    EXPECT_EQ(s.isa, Isa::scalar);
    EXPECT_EQ(cpu::active_isa(), Isa::scalar);  // the ISA's override is cpu::set_isa's
    EXPECT_TRUE(s.amx_emulated);
    EXPECT_TRUE(s.bf16_on_fma);
    EXPECT_EQ(s.fp8_vbmi, before.fp8_vbmi);  // not forced: as outside
    EXPECT_EQ(s.jit, Jit::every);
    {
      dispatch::ScopedPath inner({.amx_emulated = false, .jit = Jit::off});
      s = dispatch::current();
      EXPECT_EQ(s.isa, Isa::scalar);
      EXPECT_FALSE(s.amx_emulated);
      EXPECT_TRUE(s.bf16_on_fma);
      EXPECT_EQ(s.jit, Jit::off);
    }
    s = dispatch::current();
    EXPECT_TRUE(s.amx_emulated);
    EXPECT_EQ(s.jit, Jit::every);
  }
  const dispatch::Switches after = dispatch::current();
  EXPECT_EQ(after.isa, before.isa);
  EXPECT_EQ(after.amx_emulated, before.amx_emulated);
  EXPECT_EQ(after.bf16_on_fma, before.bf16_on_fma);
  EXPECT_EQ(after.fp8_vbmi, before.fp8_vbmi);
  EXPECT_EQ(after.jit, before.jit);
}

// Unforced and with the knobs unset, the CPU decides: bf16 on the FMAs on Intel, VBMI where the CPU has it.
TEST(Dispatch, TheCpuDecidesWhatNeitherAKnobNorAScopeForces) {
  const env::Knobs& k = env::knobs();
  const dispatch::Switches s = dispatch::current();
  if (k.bf16_on_fma < 0) {
    EXPECT_EQ(s.bf16_on_fma, cpu::info().vendor == "GenuineIntel");
  }
  if (k.fp8_vbmi < 0) {
    EXPECT_EQ(s.fp8_vbmi, cpu::info().features.avx512_vbmi);
  }
  if (!k.amx_emulate) {
    EXPECT_FALSE(s.amx_emulated);
  }
  EXPECT_EQ(s.isa, cpu::active_isa());
}

TEST(Dispatch, APathTheMachineCannotRunIsAnErrorAndChangesNothing) {
  const dispatch::Switches before = dispatch::current();
  int refused = 0;
  if (!cpu::supported(Isa::amx)) {
    EXPECT_THROW(dispatch::ScopedPath p({.isa = Isa::amx, .amx_emulated = !before.amx_emulated}), Error);
    ++refused;
  }
  if (!cpu::info().features.avx512_vbmi) {
    EXPECT_THROW(dispatch::ScopedPath p({.amx_emulated = !before.amx_emulated, .fp8_vbmi = true}), Error);
    ++refused;
  }
  EXPECT_EQ(dispatch::current().isa, before.isa);
  EXPECT_EQ(dispatch::current().amx_emulated, before.amx_emulated);
  if (refused == 0) GTEST_SKIP() << "this machine runs every path and has VBMI: nothing to refuse";
}

// The one list: every path of this machine whose kernels for the dtypes differ, each once, as the
// machine's features say they should be.
TEST(Dispatch, PathsListEachDistinctPathOfThisMachineOnce) {
  const bool vbmi = cpu::info().features.avx512_vbmi;
  const std::string best = cpu::isa_name(cpu::best_isa());
  for (const auto& dtypes : std::vector<std::vector<Dtype>>{{Dtype::f32},
                                                            {Dtype::bf16},
                                                            {Dtype::fp8},
                                                            {Dtype::f32, Dtype::bf16},
                                                            {Dtype::f32, Dtype::bf16, Dtype::fp8}}) {
    const bool bf16 = std::count(dtypes.begin(), dtypes.end(), Dtype::bf16) > 0;
    const bool fp8 = std::count(dtypes.begin(), dtypes.end(), Dtype::fp8) > 0;
    std::vector<std::string> want;
    for (Isa i : cpu::supported_isas()) {
      want.push_back(cpu::isa_name(i));
      if (i == Isa::avx512bf16 && bf16) want.push_back("avx512bf16+bf16-on-fma");
      if (i >= Isa::avx512bf16 && fp8 && vbmi) want.push_back(std::string(cpu::isa_name(i)) + "+vbmi");
    }
    if (bf16 || fp8) want.push_back("amx-emulated(" + best + ")");
    std::vector<std::string> got;
    for (const auto& p : dispatch::paths(dtypes)) {
      got.push_back(dispatch::name(p));
      EXPECT_TRUE(p.isa && p.amx_emulated && p.bf16_on_fma && p.fp8_vbmi) << "every switch set but the JIT";
      EXPECT_FALSE(p.jit.has_value());
    }
    EXPECT_EQ(got, want);
  }
}

}  // namespace
