#include "core/dispatch.hpp"

#include <atomic>

#include "ridge/core/env.hpp"
#include "core/check.hpp"

namespace ridge::dispatch {
namespace {

constexpr unsigned bit(Dtype d) {
  return 1u << static_cast<int>(d);
}
constexpr unsigned bit(Work w) {
  return 1u << static_cast<int>(w);
}
constexpr unsigned bit(cpu::Isa i) {
  return 1u << static_cast<int>(i);
}

// The switch a rule needs on.
enum class Needs { nothing, amx_emulated, bf16_on_fma, fp8_vbmi };

constexpr int kActivePath = -1;

// Work of `dtypes` and `works`, on one of `paths`, with `needs` on, runs on `family` from the table of
// path `table` (kActivePath: the path in force).
struct Rule {
  unsigned dtypes, works, paths;
  Needs needs;
  Family family;
  int table;
};

constexpr unsigned kBf16 = bit(Dtype::bf16), kFp8 = bit(Dtype::fp8);
constexpr unsigned kBlocked = bit(Work::blocked), kSmallM = bit(Work::small_m);
constexpr unsigned kAnyPath = ~0u, kAmx = bit(cpu::Isa::amx), kAvx512bf16 = bit(cpu::Isa::avx512bf16);
constexpr int kTableAvx512 = static_cast<int>(cpu::Isa::avx512),
              kTableAvx512bf16 = static_cast<int>(cpu::Isa::avx512bf16),
              kTableAmx = static_cast<int>(cpu::Isa::amx);

// The policy. The first rule that matches decides; work no rule matches (fp32 everywhere, everything
// below avx512bf16) runs on the active path's own kernels.
constexpr Rule kRules[] = {
    // dtypes     work                paths                 needs                family                 table
    // The emulated tiles take all the work AMX does, decode rows included (the emulated kernels have no
    // small-m kernel: every shape runs on the tiles), on any path.
    {kBf16 | kFp8, kBlocked | kSmallM, kAnyPath, Needs::amx_emulated, Family::amx_emulated, kActivePath},
    // The tiles take the blocked work; decode rows keep the avx512bf16 small-m kernels (below), which
    // read B once at the memory roof.
    {kBf16 | kFp8, kBlocked, kAmx, Needs::nothing, Family::amx, kTableAmx},
    // Blocked bf16 on the fp32 FMAs where they are the faster; decode rows (up to 16: gemm's plan()) are
    // bound by memory either way and keep the bf16 small-m kernels.
    {kBf16, kBlocked, kAvx512bf16, Needs::bf16_on_fma, Family::bf16_on_fma, kTableAvx512},
    // FP8's byte-permute widening, blocked and small-m (on amx, the small-m kernels only: blocked FP8
    // took the tiles above).
    {kFp8, kBlocked | kSmallM, kAvx512bf16 | kAmx, Needs::fp8_vbmi, Family::vbmi, kTableAvx512bf16},
    {kBf16 | kFp8, kSmallM, kAmx, Needs::nothing, Family::isa, kTableAvx512bf16},
};

bool holds(Needs n, const Switches& s) {
  switch (n) {
    case Needs::amx_emulated:
      return s.amx_emulated;
    case Needs::bf16_on_fma:
      return s.bf16_on_fma;
    case Needs::fp8_vbmi:
      return s.fp8_vbmi;
    default:
      return true;
  }
}

// The overrides of ScopedPath for the switches after the ISA (whose override is cpu::set_isa's), in
// this order; -1 where none is in force, so the knob or the CPU decides.
enum Slot { kEmulated, kBf16OnFma, kVbmi, kJit, kSlots };
std::atomic<int> g_forced[kSlots] = {-1, -1, -1, -1};

bool forced_or(Slot slot, bool otherwise) {
  const int o = g_forced[slot].load(std::memory_order_relaxed);
  return o >= 0 ? o == 1 : otherwise;
}

bool has_vbmi() {
  return cpu::info().features.avx512_vbmi;
}

}  // namespace

Switches current() {
  const env::Knobs& k = env::knobs();
  static const bool intel = cpu::info().vendor == "GenuineIntel";  // read once: every bf16 call asks
  Switches s;
  s.isa = cpu::active_isa();
  s.amx_emulated = forced_or(kEmulated, k.amx_emulate);
  s.bf16_on_fma = forced_or(kBf16OnFma, k.bf16_on_fma >= 0 ? k.bf16_on_fma == 1 : intel);
  s.fp8_vbmi = forced_or(kVbmi, k.fp8_vbmi >= 0 ? k.fp8_vbmi == 1 : has_vbmi());
  const int jit = g_forced[kJit].load(std::memory_order_relaxed);
  s.jit = jit >= 0 ? static_cast<Jit>(jit) : k.jit ? Jit::on : Jit::off;
  return s;
}

Choice choose(Dtype dtype, Work work, const Switches& s) {
  Choice c{Family::isa, s.isa, work == Work::small_m ? s.jit : Jit::off};
  for (const Rule& r : kRules)
    if ((r.dtypes & bit(dtype)) && (r.works & bit(work)) && (r.paths & bit(s.isa)) && holds(r.needs, s)) {
      c.family = r.family;
      if (r.table != kActivePath) c.isa = static_cast<cpu::Isa>(r.table);
      break;
    }
  return c;
}

ScopedPath::ScopedPath(const Path& p) {
  check(!p.fp8_vbmi.value_or(false) || has_vbmi(),
        "fp8_vbmi: this CPU has no AVX512_VBMI (the byte-permute widening needs it)");
  if (p.isa) isa_.emplace(*p.isa);  // a path the machine cannot run throws here, before anything changes
  auto as_int = [](const std::optional<bool>& b) { return b ? static_cast<int>(*b) : -1; };
  const int want[kSlots] = {as_int(p.amx_emulated), as_int(p.bf16_on_fma), as_int(p.fp8_vbmi),
                            p.jit ? static_cast<int>(*p.jit) : -1};
  for (int i = 0; i < kSlots; ++i) {
    previous_[i] = g_forced[i].load();
    if (want[i] >= 0) g_forced[i].store(want[i]);
  }
}

ScopedPath::~ScopedPath() {
  for (int i = 0; i < kSlots; ++i) g_forced[i].store(previous_[i]);
}

std::vector<Path> paths(const std::vector<Dtype>& dtypes) {
  std::vector<Path> candidates;
  for (cpu::Isa i : cpu::supported_isas()) {
    candidates.push_back({i, false, false, false, {}});
    if (i >= cpu::Isa::avx512bf16) {
      candidates.push_back({i, false, true, false, {}});
      if (has_vbmi()) candidates.push_back({i, false, false, true, {}});
    }
  }
  candidates.push_back({cpu::best_isa(), true, false, false, {}});
  std::vector<Path> out;
  std::vector<std::vector<Choice>> taken;
  for (const Path& p : candidates) {
    const Switches s{*p.isa, *p.amx_emulated, *p.bf16_on_fma, *p.fp8_vbmi, Jit::off};
    std::vector<Choice> runs;
    for (Dtype d : dtypes)
      for (Work w : {Work::blocked, Work::small_m}) runs.push_back(choose(d, w, s));
    bool seen = false;
    for (const auto& t : taken) seen = seen || t == runs;
    if (seen) continue;
    taken.push_back(runs);
    out.push_back(p);
  }
  return out;
}

std::string name(const Path& p) {
  std::string n = p.isa ? cpu::isa_name(*p.isa) : "active";
  if (p.bf16_on_fma.value_or(false)) n += "+bf16-on-fma";
  if (p.fp8_vbmi.value_or(false)) n += "+vbmi";
  if (p.amx_emulated.value_or(false)) n = "amx-emulated(" + n + ")";
  return n;
}

}  // namespace ridge::dispatch
