// The paths the GEMM tests run: every ISA path this machine has, then "amx-emulated": the best path
// with bf16 and FP8 on the AMX tile kernels over the tile emulator (core/amx.hpp), on any machine. On
// a machine with AMX the amx path itself (the instructions) is among the first.
#pragma once

#include <string>
#include <vector>

#include "core/amx.hpp"
#include "ridge/core/cpu.hpp"

namespace ridge::test {

struct TestPath {
  cpu::Isa isa = cpu::Isa::scalar;
  bool amx_emulated = false;
};

inline std::vector<TestPath> test_paths() {
  std::vector<TestPath> out;
  for (cpu::Isa i : cpu::supported_isas()) out.push_back({i, false});
  out.push_back({cpu::best_isa(), true});
  return out;
}

inline std::string path_name(const TestPath& p) {
  return p.amx_emulated ? std::string("amx-emulated(") + cpu::isa_name(p.isa) + ")" : cpu::isa_name(p.isa);
}

// Selects a test path for a scope (and turns the emulation off for the others).
class ScopedPath {
 public:
  explicit ScopedPath(const TestPath& p) : isa_(p.isa), emulation_(p.amx_emulated) {}

 private:
  cpu::ScopedIsa isa_;
  amx::ScopedEmulation emulation_;
};

}  // namespace ridge::test
