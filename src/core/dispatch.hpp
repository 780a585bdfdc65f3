// The one dispatch policy: which kernel family runs a piece of work, decided here for GEMM and attention
// alike (docs/core.md, "One dispatch policy"). A module asks `choose(dtype, work)` and maps the answer
// onto its own per-ISA tables (core/isa_paths.hpp); it never reads a switch itself.
//
// The switches are read in one place, `current()`: each has one environment knob (parsed by env.cpp) and
// one field of the one scoped override, `ScopedPath`, which tests and benchmarks use; `paths()` is the one
// list of the paths a machine runs, which the GEMM and attention tests enumerate.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ridge/core/cpu.hpp"

namespace ridge::dispatch {

// The decode GEMMs compiled at run time (gemm/jit_decode.hpp): off, on where the JIT's decision table
// serves the call, or on for every template (the benchmark measures the ones the table did not keep).
enum class Jit { off, on, every };

// The switches a choice reads, resolved: an override of ScopedPath, else the knob, else the CPU.
struct Switches {
  cpu::Isa isa = cpu::Isa::scalar;  // RIDGE_ISA (cpu::active_isa)
  // RIDGE_AMX_EMULATE=1: the AMX kernels run on the tile emulator (core/amx.hpp) on any path of any
  // machine, for the work AMX does (bf16 and FP8); slow, for checking. Off by default.
  bool amx_emulated = false;
  // RIDGE_BF16_ON_FMA=0|1: blocked bf16 on the avx512bf16 path runs on the fp32 FMAs, operands widened
  // (1), or on vdpbf16ps (0). Unset: by vendor, on the FMAs on Intel, whose cores issue vdpbf16ps zmm at
  // half the rate of vfmadd231ps zmm (the probe on Emerald Rapids: 233 against 460 GFLOP/s), where AMD's
  // Zen 4 issues it at twice the rate (458 against 229; docs/gemm.md, "bf16 on Intel without AMX").
  bool bf16_on_fma = false;
  // RIDGE_FP8_VBMI=0|1: FP8 on avx512bf16 widens fp8 with byte permutes (AVX512_VBMI) or with arithmetic.
  // Unset: byte permutes where the CPU has VBMI; 1 on a CPU without it is an error.
  bool fp8_vbmi = false;
  Jit jit = Jit::off;  // RIDGE_JIT=1: on
};
Switches current();

enum class Dtype { f32, bf16, fp8 };

// The shape class of the work: the blocked kernels (packed panels, the micro-kernel), or the small-m
// kernels (decode rows, m <= 64, row-major: B read once, unpacked). The two are chosen independently.
enum class Work { blocked, small_m };

enum class Family {
  isa,           // the path's own kernels (the table at `isa`)
  bf16_on_fma,   // bf16 on avx512's fp32 kernels, operands widened to fp32 as they are loaded or packed
  vbmi,          // FP8 on avx512bf16, fp8 widened with byte permutes
  amx,           // AMX tiles, the instructions
  amx_emulated,  // AMX tiles, on the emulator
};

struct Choice {
  Family family = Family::isa;
  cpu::Isa isa = cpu::Isa::scalar;  // the path whose table serves (bf16_on_fma: avx512; vbmi: avx512bf16)
  Jit jit = Jit::off;               // small-m work: whether the JIT may serve it
  bool operator==(const Choice&) const = default;
};

// The policy, one table of rules read top down (dispatch.cpp).
Choice choose(Dtype dtype, Work work, const Switches& s = current());

// What a scope forces: a field left empty keeps what holds outside the scope (the `= {}` lets a
// designated initializer name only the fields it forces).
struct Path {
  std::optional<cpu::Isa> isa = {};
  std::optional<bool> amx_emulated = {}, bf16_on_fma = {}, fp8_vbmi = {};
  std::optional<Jit> jit = {};
};

// The one override, for tests and benchmarks: every kernel called inside the scope sees these switches.
// Process-wide, as RIDGE_ISA is; nests, and restores what it found. A path the machine cannot run (an
// ISA above its best, fp8_vbmi without VBMI) is a ridge::Error, and nothing is changed.
class ScopedPath {
 public:
  explicit ScopedPath(const Path& p);
  ~ScopedPath();
  ScopedPath(const ScopedPath&) = delete;
  ScopedPath& operator=(const ScopedPath&) = delete;

 private:
  std::optional<cpu::ScopedIsa> isa_;
  int previous_[4];
};

// Every path this machine runs whose kernels for some work of `dtypes` no earlier entry runs (as
// `choose` says), lowest first: each ISA path with the switches off; on avx512bf16 and amx each
// switch on alone (fp8_vbmi where the CPU has VBMI); last the AMX kernels on the emulator at the best
// path. Every entry sets isa, amx_emulated, bf16_on_fma and fp8_vbmi; the JIT is left to RIDGE_JIT.
std::vector<Path> paths(const std::vector<Dtype>& dtypes);

// A path's name in test output: "avx512bf16", "avx512bf16+bf16-on-fma", "avx512bf16+vbmi",
// "amx-emulated(avx512bf16)".
std::string name(const Path& p);

}  // namespace ridge::dispatch
