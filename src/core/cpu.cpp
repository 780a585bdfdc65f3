#include "ridge/core/cpu.hpp"

#include <cpuid.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#include "core/amx.hpp"
#include "core/check.hpp"
#include "ridge/core/env.hpp"
#include "ridge/core/error.hpp"

namespace ridge::cpu {
namespace {

struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned sub = 0) {
  Regs r;
  __cpuid_count(leaf, sub, r.a, r.b, r.c, r.d);
  return r;
}

// Set by read_info where RIDGE_ISA asks for a path below amx: the amx path is then off, with the CPU's
// and the OS's facts left as they are.
bool g_amx_declined = false;

// Whether features `f` hold everything path `isa` needs: the one rule, for supported() and for read_info
// (which decides the amx facts before info() can answer).
bool has_path(const Features& f, Isa isa) {
  const bool avx2 = f.avx2 && f.fma && f.f16c && f.bmi2;
  const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  switch (isa) {
    case Isa::scalar:
      return true;
    case Isa::avx2:
      return avx2;
    case Isa::avx512:
      return avx512;
    case Isa::avx512bf16:
      return avx512 && f.avx512_bf16;
    case Isa::amx:
      return avx512 && f.avx512_bf16 && f.amx_tile && f.amx_bf16 && f.amx_int8 && f.os_amx;
  }
  return false;
}

uint64_t xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool bit(unsigned v, int i) {
  return (v >> i) & 1u;
}

// Deterministic cache parameters: leaf 4 on Intel, 0x8000001D on AMD (same layout).
void read_caches_cpuid(unsigned leaf, Caches& c) {
  for (unsigned sub = 0; sub < 16; ++sub) {
    const Regs r = cpuid(leaf, sub);
    const unsigned type = r.a & 0x1F;
    if (type == 0) break;
    const unsigned level = (r.a >> 5) & 7;
    const int64_t ways = ((r.b >> 22) & 0x3FF) + 1, parts = ((r.b >> 12) & 0x3FF) + 1;
    const int64_t line = (r.b & 0xFFF) + 1, sets = static_cast<int64_t>(r.c) + 1;
    const int64_t size = ways * parts * line * sets;
    const int sharing = static_cast<int>(((r.a >> 14) & 0xFFF) + 1);
    if (level == 1 && type == 1) {
      c.l1d = size;
      c.line = line;
    } else if (level == 2 && type != 2) {
      c.l2 = size;
    } else if (level == 3 && type != 2) {
      c.l3 = size;
      c.l3_sharing = sharing;
    }
  }
}

int64_t read_sysfs_size(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s.empty()) return 0;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || v < 0 || v > (int64_t{1} << 40)) return 0;  // unreadable: unknown
  const char u = end < s.data() + s.size() ? *end : 'B';
  if (u == 'K')
    v <<= 10;
  else if (u == 'M')
    v <<= 20;
  return v;
}

void read_caches_sysfs(Caches& c) {
  for (int i = 0; i < 8; ++i) {
    const std::string base = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream lf(base + "level"), tf(base + "type");
    int level = 0;
    std::string type;
    if (!(lf >> level) || !(tf >> type)) break;
    const int64_t size = read_sysfs_size(base + "size");
    if (level == 1 && type == "Data" && c.l1d == 0) c.l1d = size;
    if (level == 2 && type != "Instruction" && c.l2 == 0) c.l2 = size;
    if (level == 3 && type != "Instruction" && c.l3 == 0) c.l3 = size;
  }
}

// Physical cores among the CPUs this process may run on: distinct (package, core id) pairs from
// sysfs. 0 when the topology files are missing (containers may hide them).
int count_cores(const cpu_set_t& set) {
  std::set<std::pair<int, int>> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    std::ifstream pf(base + "physical_package_id"), cf(base + "core_id");
    int package = 0, core = 0;
    if (!(pf >> package) || !(cf >> core)) return 0;
    cores.insert({package, core});
  }
  return static_cast<int>(cores.size());
}

Info read_info() {
  Info in;
  const Regs r0 = cpuid(0);
  const unsigned max_leaf = r0.a;
  char vendor[13] = {};
  std::memcpy(vendor, &r0.b, 4);
  std::memcpy(vendor + 4, &r0.d, 4);
  std::memcpy(vendor + 8, &r0.c, 4);
  in.vendor = vendor;

  const Regs r1 = cpuid(1);
  const unsigned base_family = (r1.a >> 8) & 0xF;
  in.family = static_cast<int>(base_family == 0xF ? base_family + ((r1.a >> 20) & 0xFF) : base_family);
  in.model = static_cast<int>(((r1.a >> 4) & 0xF) |
                              ((base_family == 6 || base_family == 0xF) ? ((r1.a >> 12) & 0xF0) : 0));
  in.stepping = static_cast<int>(r1.a & 0xF);

  Features& f = in.features;
  f.sse42 = bit(r1.c, 20);
  f.fma = bit(r1.c, 12);
  f.f16c = bit(r1.c, 29);
  const bool osxsave = bit(r1.c, 27);
  f.avx = bit(r1.c, 28);
  if (osxsave) {
    const uint64_t xcr0 = xgetbv0();
    f.os_avx = (xcr0 & 0x6) == 0x6;
    f.os_avx512 = f.os_avx && (xcr0 & 0xE0) == 0xE0;
    f.os_amx = (xcr0 & 0x60000) == 0x60000;
  }
  if (max_leaf >= 7) {
    const Regs r7 = cpuid(7, 0);
    f.avx2 = bit(r7.b, 5);
    f.bmi2 = bit(r7.b, 8);
    f.avx512f = bit(r7.b, 16);
    f.avx512dq = bit(r7.b, 17);
    f.avx512cd = bit(r7.b, 28);
    f.avx512bw = bit(r7.b, 30);
    f.avx512vl = bit(r7.b, 31);
    f.avx512_vbmi = bit(r7.c, 1);
    f.avx512_vnni = bit(r7.c, 11);
    f.avx512_fp16 = bit(r7.d, 23);
    f.amx_bf16 = bit(r7.d, 22);
    f.amx_tile = bit(r7.d, 24);
    f.amx_int8 = bit(r7.d, 25);
    if (r7.a >= 1) {
      const Regs r71 = cpuid(7, 1);
      f.avx_vnni = bit(r71.a, 4);
      f.avx512_bf16 = bit(r71.a, 5);
    }
  }
  // Features the OS does not save registers for are unusable: report them as absent.
  if (!f.os_avx) f.avx = f.avx2 = f.fma = f.f16c = f.avx_vnni = false;
  if (!f.os_avx512)
    f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.avx512cd = f.avx512_vbmi = f.avx512_bf16 =
        f.avx512_vnni = f.avx512_fp16 = false;
  // AMX's tile data (XTILEDATA, 8 KiB) is saved by Linux only for a process that asks first
  // (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16+); without the grant the first tile instruction
  // faults. Asked once, here, for the whole process (the grant covers every thread).
  const bool cpu_amx = f.amx_tile && f.amx_bf16;
  // RIDGE_ISA naming a path below amx keeps the process off the tiles altogether: Linux is not asked for
  // the tile data (a grant has side effects, such as larger signal stacks for every thread) and no tile
  // instruction runs. It is the way out if the start-up check below ever faults, and the A/B switch.
  // Read raw here: env::knobs() validates RIDGE_ISA against what this function finds.
  const char* request = std::getenv("RIDGE_ISA");
  for (int i = 0; request && i < static_cast<int>(Isa::amx); ++i)
    if (std::strcmp(request, isa_name(static_cast<Isa>(i))) == 0) g_amx_declined = true;
  if (cpu_amx && g_amx_declined)
    in.amx_refused = std::string("RIDGE_ISA=") + request +
                     " keeps this process off the tiles (Linux is not asked for the tile data and no tile "
                     "instruction runs)";
  if (cpu_amx && !f.os_amx) in.amx_refused = "the OS does not save the tile state (XCR0 bits 17-18 clear)";
  if (cpu_amx && f.os_amx && !g_amx_declined) {
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
      in.amx_refused = std::string("Linux refused the tile data (arch_prctl ARCH_REQ_XCOMP_PERM: ") +
                       std::strerror(errno) + ")";
      f.os_amx = false;
    }
  }
  // The instructions must agree with the tile emulator, on which the suite checks every AMX kernel,
  // before ridge runs its kernels on them (amx::differs_from_emulator: microseconds, once). The unit
  // that holds them is built for avx512bf16 as well, so it runs only where the whole amx path could.
  if (has_path(f, Isa::amx) && !g_amx_declined) {
    const std::string differs = amx::differs_from_emulator(amx::run_one_on_the_tiles);
    if (!differs.empty()) {
      in.amx_refused =
          "its tile instructions disagree with ridge's tile emulator, against which the AMX "
          "kernels are tested (" +
          differs + ")";
      f.os_amx = false;
    }
  }
  if (!f.os_amx) f.amx_tile = f.amx_bf16 = f.amx_int8 = false;

  const unsigned max_ext = cpuid(0x80000000).a;
  if (max_ext >= 0x80000004) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002 + i);
      std::memcpy(brand + 16 * i, &r, 16);
    }
    in.brand = brand;
    const auto b = in.brand.find_first_not_of(' ');
    const auto e = in.brand.find_last_not_of(' ');
    in.brand = b == std::string::npos ? "" : in.brand.substr(b, e - b + 1);
  }

  // Leaf 0x8000001D is only defined when the topology extensions bit is set (older AMD parts and
  // some hypervisors leave it clear); sysfs fills in whatever cpuid could not.
  const bool topoext = max_ext >= 0x80000001 && bit(cpuid(0x80000001).c, 22);
  if (in.vendor == "GenuineIntel" && max_leaf >= 4)
    read_caches_cpuid(4, in.caches);
  else if ((in.vendor == "AuthenticAMD" || in.vendor == "HygonGenuine") && topoext && max_ext >= 0x8000001D)
    read_caches_cpuid(0x8000001D, in.caches);
  read_caches_sysfs(in.caches);

  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    in.logical_cpus = CPU_COUNT(&set);
    in.cores = count_cores(set);
  }
  if (in.logical_cpus <= 0) in.logical_cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  if (in.logical_cpus <= 0) in.logical_cpus = 1;
  if (in.cores <= 0 || in.cores > in.logical_cpus) in.cores = in.logical_cpus;
  return in;
}

constexpr int kNoOverride = -1;
std::atomic<int> g_override{kNoOverride};

}  // namespace

std::vector<std::pair<const char*, bool>> feature_list(const Features& f) {
  return {{"sse4.2", f.sse42},
          {"avx", f.avx},
          {"avx2", f.avx2},
          {"fma", f.fma},
          {"f16c", f.f16c},
          {"bmi2", f.bmi2},
          {"avx512f", f.avx512f},
          {"avx512bw", f.avx512bw},
          {"avx512vl", f.avx512vl},
          {"avx512dq", f.avx512dq},
          {"avx512cd", f.avx512cd},
          {"avx512_vbmi", f.avx512_vbmi},
          {"avx512_bf16", f.avx512_bf16},
          {"avx512_vnni", f.avx512_vnni},
          {"avx512_fp16", f.avx512_fp16},
          {"avx_vnni", f.avx_vnni},
          {"amx_tile", f.amx_tile},
          {"amx_bf16", f.amx_bf16},
          {"amx_int8", f.amx_int8}};
}

const Info& info() {
  static const Info in = read_info();
  return in;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar:
      return "scalar";
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
    case Isa::avx512bf16:
      return "avx512bf16";
    case Isa::amx:
      return "amx";
  }
  return "?";
}

Isa parse_isa(const std::string& name, const std::string& what) {
  std::string accepted;
  for (int i = 0; i < kIsaCount; ++i) {
    if (name == isa_name(static_cast<Isa>(i))) return static_cast<Isa>(i);
    accepted += (i ? ", " : "") + std::string(isa_name(static_cast<Isa>(i)));
  }
  fail("{}: '{}' is not an ISA path (accepted: {})", what, name, accepted);
}

bool supported(Isa isa) {
  return has_path(info().features, isa) && !(isa == Isa::amx && g_amx_declined);
}

Isa best_isa() {
  // One notice per process where the CPU has AMX and the OS took it away: the path list says amx is
  // missing, this says why.
  static const bool noticed = [] {
    if (!info().amx_refused.empty() && !g_amx_declined)
      std::fprintf(stderr, "ridge: notice: this CPU has AMX but the amx path is off: %s\n",
                   info().amx_refused.c_str());
    return true;
  }();
  (void)noticed;
  for (int i = kIsaCount - 1; i > 0; --i)
    if (supported(static_cast<Isa>(i))) return static_cast<Isa>(i);
  return Isa::scalar;
}

std::string amx_off_reason() {
  if (supported(Isa::amx)) return "";
  const Info& in = info();
  if (!in.amx_refused.empty()) return "the CPU has AMX, but " + in.amx_refused;
  const Features& f = in.features;
  if (!(f.amx_tile && f.amx_bf16 && f.amx_int8))
    return "cpuid has no amx_tile, amx_bf16 and amx_int8 (a hypervisor may mask them)";
  return "the amx path needs AVX-512 with AVX512_BF16 as well";
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (int i = 0; i < kIsaCount; ++i)
    if (supported(static_cast<Isa>(i))) out.push_back(static_cast<Isa>(i));
  return out;
}

Isa resolve_isa_request(const std::string& request) {
  if (request.empty()) return best_isa();
  const Isa want = parse_isa(request, "RIDGE_ISA");
  check(supported(want), "RIDGE_ISA: this machine cannot run '{}' (it supports up to '{}')", request,
        isa_name(best_isa()));
  return want;
}

CacheSizes cache_sizes() {
  const Caches& c = info().caches;
  CacheSizes s;
  if (c.l1d > 0) s.l1d = c.l1d;
  if (c.l2 > 0) s.l2 = c.l2;
  if (c.l3 > 0) s.l3 = c.l3;
  s.last_level = c.l3 > 0 ? c.l3 : c.l2 > 0 ? c.l2 : kFallbackL3;
  return s;
}

Isa active_isa() {
  const int o = g_override.load(std::memory_order_relaxed);
  if (o != kNoOverride) return static_cast<Isa>(o);
  static const Isa best = best_isa();
  const int forced = env::knobs().isa;  // RIDGE_ISA, parsed and checked once
  return forced >= 0 ? static_cast<Isa>(forced) : best;
}

void set_isa(Isa isa) {
  check(supported(isa), "isa: this machine cannot run '{}' (it supports up to '{}')", isa_name(isa),
        isa_name(best_isa()));
  g_override.store(static_cast<int>(isa), std::memory_order_relaxed);
}

void reset_isa() {
  g_override.store(kNoOverride, std::memory_order_relaxed);
}

ScopedIsa::ScopedIsa(Isa isa) : previous_(g_override.load()) {
  set_isa(isa);
}
ScopedIsa::~ScopedIsa() {
  g_override.store(previous_);
}

}  // namespace ridge::cpu
