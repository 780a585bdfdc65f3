// The paths the GEMM tests run: every ISA path this machine has, then "amx-emulated": the best path
// with bf16 and FP8 on the AMX tile kernels over the tile emulator (core/amx.hpp), on any machine. On
// a machine with AMX the amx path itself (the instructions) is among the first.
#pragma once

#include <string>
#include <vector>

#include "core/amx.hpp"
#include "core/bf16_fma.hpp"
#include "ridge/core/cpu.hpp"

namespace ridge::test {

struct TestPath {
  cpu::Isa isa = cpu::Isa::scalar;
  bool amx_emulated = false;
  // avx512bf16's blocked bf16 kernel: the bf16-pair one (vdpbf16ps) or the fp32 one on widened operands
  // (cpu::bf16_on_fma); the suite runs both, whichever this CPU takes.
  bool bf16_on_fma = false;
};

inline std::vector<TestPath> test_paths() {
  std::vector<TestPath> out;
  for (cpu::Isa i : cpu::supported_isas()) {
    out.push_back({i, false, false});
    if (i == cpu::Isa::avx512bf16) out.push_back({i, false, true});
  }
  out.push_back({cpu::best_isa(), true, false});
  return out;
}

inline std::string path_name(const TestPath& p) {
  if (p.amx_emulated) return std::string("amx-emulated(") + cpu::isa_name(p.isa) + ")";
  if (p.isa == cpu::Isa::avx512bf16)
    return p.bf16_on_fma ? "avx512bf16(bf16 on fma)" : "avx512bf16(vdpbf16ps)";
  return cpu::isa_name(p.isa);
}

// Selects a test path for a scope (and turns the emulation off for the others).
class ScopedPath {
 public:
  explicit ScopedPath(const TestPath& p)
      : isa_(p.isa), emulation_(p.amx_emulated), bf16_on_fma_(p.bf16_on_fma) {}

 private:
  cpu::ScopedIsa isa_;
  amx::ScopedEmulation emulation_;
  cpu::ScopedBf16OnFma bf16_on_fma_;
};

}  // namespace ridge::test
