// What the CPU can do, read from cpuid with the xgetbv check that the OS saves the wide registers,
// and which instruction-set path the kernels take.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ridge::cpu {

struct Features {
  bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false, bmi2 = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512cd = false;
  bool avx512_vbmi = false;  // byte permutes (vpermb, vpermt2b): the fp8 widening uses them when present
  bool avx512_bf16 = false, avx512_vnni = false, avx512_fp16 = false, avx_vnni = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  bool os_avx = false;     // XCR0 has XMM and YMM state
  bool os_avx512 = false;  // XCR0 has opmask and ZMM state
  bool os_amx = false;     // XCR0 has tile state
};

struct Caches {
  // Bytes per instance; 0 when unknown. l1d and l2 are per core; l3 is per shared instance.
  int64_t l1d = 0, l2 = 0, l3 = 0;
  int l3_sharing = 0;  // logical CPUs sharing one L3
  int64_t line = 64;
};

struct Info {
  std::string vendor, brand;
  int family = 0, model = 0, stepping = 0;
  int logical_cpus = 0;  // online logical CPUs available to this process
  int cores = 0;         // distinct physical cores among them (SMT siblings counted once)
  Features features;
  Caches caches;
  // Why the amx path is off on a CPU whose cpuid has AMX (the OS does not save the tile state in XCR0,
  // Linux refused this process the tile data: arch_prctl(ARCH_REQ_XCOMP_PERM), or the instructions
  // disagreed with ridge's tile emulator at start); empty otherwise. amx_off_reason() says it whole.
  std::string amx_refused;
};

// Read once and cached.
const Info& info();

// Each CPU feature of Features (the os_* ones aside) by the name /proc/cpuinfo gives it, in one order:
// `ridge info` and the JIT's CPU signature (part of its cache key) read this list, so a flag added to
// Features is added here once.
std::vector<std::pair<const char*, bool>> feature_list(const Features& f);

// The cache sizes every user blocks by or sizes a benchmark by: what cpuid reports, with one
// fallback per level for a level it does not report (a hypervisor that hides the cache leaves).
// The fallbacks are the small end of current x86 cores, so a block sized by them fits the real
// cache: 32 KiB L1d, 256 KiB L2, 8 MiB L3.
inline constexpr int64_t kFallbackL1d = int64_t{32} << 10;
inline constexpr int64_t kFallbackL2 = int64_t{256} << 10;
inline constexpr int64_t kFallbackL3 = int64_t{8} << 20;
struct CacheSizes {
  int64_t l1d = kFallbackL1d, l2 = kFallbackL2, l3 = kFallbackL3;  // bytes per instance, never 0
  // The largest cache a working set can hide in: L3 when cpuid reports one, else L2 when it
  // reports that, else kFallbackL3.
  int64_t last_level = kFallbackL3;
};
CacheSizes cache_sizes();

// Instruction-set paths, lowest first. Each path needs all features of the ones below it. amx is
// avx512bf16 plus Intel's matrix engine (amx_tile, amx_bf16, amx_int8, the OS saving the tile state
// and Linux granting this process the tile data); a module without AMX code takes its avx512bf16 code.
enum class Isa : int { scalar = 0, avx2 = 1, avx512 = 2, avx512bf16 = 3, amx = 4 };
inline constexpr int kIsaCount = 5;

const char* isa_name(Isa isa);
// Parses "scalar", "avx2", "avx512", "avx512bf16", "amx"; throws ridge::Error naming `what` (the flag or
// variable the text came from) and the accepted values.
Isa parse_isa(const std::string& name, const std::string& what = "RIDGE_ISA");
// Whether this machine (and OS) can run `isa`.
bool supported(Isa isa);
// The best path this machine supports.
Isa best_isa();
// Why the amx path is not offered here, in one line ("" where it is): the one wording `ridge info`,
// `ridge probe` and the tests' skips give.
std::string amx_off_reason();
// Every path the machine supports, lowest first (tests run all of them).
std::vector<Isa> supported_isas();

// What a RIDGE_ISA value asks for: the best path when empty, else that path; ridge::Error when the
// text is not a path or names one above what this machine supports.
Isa resolve_isa_request(const std::string& request);

// The path kernels take: RIDGE_ISA if set (a path above what the machine has is an error), else
// the best one. A process-wide override set by `set_isa` (tests, A/B timing) wins over both.
Isa active_isa();
// Forces a path for this process; throws ridge::Error if the machine cannot run it.
void set_isa(Isa isa);
// Clears the override set by set_isa.
void reset_isa();

// RAII override for tests: every kernel called inside the scope takes `isa`.
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa);
  ~ScopedIsa();
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  int previous_;
};

}  // namespace ridge::cpu
