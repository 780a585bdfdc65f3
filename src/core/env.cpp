#include "ridge/core/env.hpp"

#include <cstdlib>
#include <limits>
#include <optional>
#include <string_view>

#include "ridge/core/cpu.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/numbers.hpp"
#include "core/check.hpp"

namespace ridge::env {
namespace {

// A knob's integer, read by core's one parser (ridge/core/numbers.hpp) and refused in its words.
int64_t parse_int(const char* name, const std::string& v, int64_t lo, int64_t hi,
                  const char* note = nullptr) {
  return numbers::parse_integer(v, name, {lo, hi, numbers::Suffix::none, 1, note});
}

// OMP_NUM_THREADS: a thread count, or a comma-separated list of them (OpenMP's counts for nested levels,
// "8,2"); every entry is checked, and ridge's count is the first.
constexpr numbers::IntegerRule kOmpThreads{
    1, kMaxThreads, numbers::Suffix::none, 1,
    "or a comma-separated list of them for nested levels, of which ridge uses the first"};

// The first entry of OMP_NUM_THREADS, or 0 when an entry is refused (*fault says why). Allocates
// nothing and throws nothing (it also runs before main).
int64_t openmp_threads(std::string_view v, numbers::Fault* fault = nullptr) noexcept {
  int64_t first = 0;
  for (size_t at = 0;;) {
    const size_t comma = v.find(',', at);
    const auto r = numbers::read_integer(
        v.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at), kOmpThreads);
    if (r.fault != numbers::Fault::none) {
      if (fault) *fault = r.fault;
      return 0;
    }
    if (first == 0) first = r.value;
    if (comma == std::string_view::npos) return first;
    at = comma + 1;
  }
}

constexpr std::string_view kOmpNumThreads = "OMP_NUM_THREADS";

// The value before_openmp took out of the environment (it is not there for getenv any more); knobs()
// refuses it. Constant-initialised: set before main, read after.
const char* g_withheld_openmp_threads = nullptr;

// A 0/1 switch: the integer 0 or 1, read as every number is ("+1" and "01" are 1).
bool parse_switch(const char* name, const std::string& v) {
  return parse_int(name, v, 0, 1, "1 to switch it on or 0 for off") == 1;
}

}  // namespace

Knobs parse_knobs(const char* (*lookup)(const char* name)) {
  // Unset and empty are the same: the default.
  auto get = [&](const char* name) {
    const char* v = lookup(name);
    return v ? std::string(v) : std::string();
  };
  Knobs k;
  if (const auto v = get("RIDGE_ISA"); !v.empty()) k.isa = static_cast<int>(cpu::resolve_isa_request(v));
  if (const auto v = get("RIDGE_GEMM_KC"); !v.empty()) k.gemm_kc = parse_int("RIDGE_GEMM_KC", v, 1, 16384);
  if (const auto v = get("RIDGE_GEMM_MC"); !v.empty()) k.gemm_mc = parse_int("RIDGE_GEMM_MC", v, 1, 16384);
  if (const auto v = get("RIDGE_GEMM_NC"); !v.empty()) k.gemm_nc = parse_int("RIDGE_GEMM_NC", v, 1, 1 << 20);
  if (const auto v = get("RIDGE_GEMM_NO_NARROW"); !v.empty())
    k.gemm_no_narrow = parse_switch("RIDGE_GEMM_NO_NARROW", v);
  if (const auto v = get("RIDGE_GEMM_SCALAR_PACK"); !v.empty())
    k.gemm_scalar_pack = parse_switch("RIDGE_GEMM_SCALAR_PACK", v);
  if (const auto v = get("RIDGE_JIT"); !v.empty()) k.jit = parse_switch("RIDGE_JIT", v);
  if (const auto v = get("RIDGE_AMX_EMULATE"); !v.empty())
    k.amx_emulate = parse_switch("RIDGE_AMX_EMULATE", v);
  if (const auto v = get("RIDGE_BF16_ON_FMA"); !v.empty())
    k.bf16_on_fma = parse_switch("RIDGE_BF16_ON_FMA", v) ? 1 : 0;
  if (const auto v = get("RIDGE_FP8_VBMI"); !v.empty()) {
    k.fp8_vbmi = parse_switch("RIDGE_FP8_VBMI", v) ? 1 : 0;
    check(k.fp8_vbmi == 0 || cpu::info().features.avx512_vbmi,
          "RIDGE_FP8_VBMI: '{}' asks for the byte-permute widening, but this CPU has no AVX512_VBMI "
          "(accepted: 0, or 1 on a CPU with AVX512_VBMI)",
          v);
  }
  // Attention blocks are whole vectors of 16 floats (the widest ISA's register).
  for (auto [name, slot] : {std::pair{"RIDGE_ATTENTION_BLOCK_Q", &k.attention_block_q},
                            std::pair{"RIDGE_ATTENTION_BLOCK_K", &k.attention_block_k}}) {
    const auto v = get(name);
    if (v.empty()) continue;
    *slot = static_cast<int>(numbers::parse_integer(v, name, {16, 1024, numbers::Suffix::none, 16}));
  }
  // OpenMP accepts a list ("8,2") for nested levels: every entry is checked, ridge's count is the first.
  if (const auto v = get("OMP_NUM_THREADS"); !v.empty()) {
    numbers::Fault fault = numbers::Fault::none;
    k.omp_threads = static_cast<int>(openmp_threads(v, &fault));
    if (k.omp_threads == 0) throw Error("OMP_NUM_THREADS", numbers::refusal(v, fault, kOmpThreads));
  }
  if (const auto v = get("RIDGE_TEST_DIE_AT_STEP"); !v.empty()) {
    k.test_die_at_step = parse_int("RIDGE_TEST_DIE_AT_STEP", v, 1, int64_t{1} << 40, "test only");
    k.test_die_rank = 0;
  }
  if (const auto v = get("RIDGE_TEST_DIE_RANK"); !v.empty()) {
    if (k.test_die_at_step == 0)
      fail(
          "RIDGE_TEST_DIE_RANK: '{}' is not accepted alone (expected RIDGE_TEST_DIE_AT_STEP with it; test "
          "only)",
          v);
    k.test_die_rank = static_cast<int>(parse_int("RIDGE_TEST_DIE_RANK", v, 0, 1 << 20, "test only"));
  }
  return k;
}

const Knobs& knobs() {
  static const Knobs k = parse_knobs([](const char* name) -> const char* {
    if (g_withheld_openmp_threads && name == kOmpNumThreads) return g_withheld_openmp_threads;
    return std::getenv(name);
  });
  return k;
}

const char* withhold_openmp_threads(char** envp) noexcept {
  const char* refused = nullptr;
  if (!envp) return refused;
  size_t to = 0;
  for (size_t from = 0; envp[from]; ++from) {
    const std::string_view entry(envp[from]);
    const bool ours = entry.size() > kOmpNumThreads.size() &&
                      entry.substr(0, kOmpNumThreads.size()) == kOmpNumThreads &&
                      entry[kOmpNumThreads.size()] == '=';
    const char* value = envp[from] + kOmpNumThreads.size() + 1;
    if (ours && (*value == '\0' || openmp_threads(value) == 0)) {
      if (*value != '\0' && !refused) refused = value;
      continue;  // taken out: the entries after it move up
    }
    envp[to++] = envp[from];
  }
  envp[to] = nullptr;
  return refused;
}

void before_openmp(int, char**, char** envp) noexcept {
  if (const char* v = withhold_openmp_threads(envp)) g_withheld_openmp_threads = v;
}

Launcher parse_launcher(const char* (*lookup)(const char* name)) {
  // Unset and empty are the same, as for the knobs.
  auto set = [&](const char* name) {
    const char* v = lookup(name);
    return v != nullptr && *v != '\0';
  };
  auto number = [&](const char* name, int lo) -> std::optional<int> {
    if (!set(name)) return std::nullopt;
    return static_cast<int>(parse_int(name, lookup(name), lo, 1 << 24, "as an MPI launcher sets it"));
  };
  Launcher l;
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    l.launched = l.launched || set(name);
  // Every variable that is set is checked, not only the one that wins, so a bad one is never ignored.
  const auto ompi_size = number("OMPI_COMM_WORLD_SIZE", 1), pmi_size = number("PMI_SIZE", 1);
  const auto ompi_rank = number("OMPI_COMM_WORLD_RANK", 0), pmi_rank = number("PMI_RANK", 0),
             pmix_rank = number("PMIX_RANK", 0);
  number("MPI_LOCALNRANKS", 1);
  l.size = ompi_size ? *ompi_size : pmi_size ? *pmi_size : 0;
  l.rank = ompi_rank ? *ompi_rank : pmi_rank ? *pmi_rank : pmix_rank ? *pmix_rank : 0;
  if (l.size > 0 && l.rank >= l.size)
    fail("{}: rank {} is not accepted (expected a rank below the world size {})",
         ompi_rank  ? "OMPI_COMM_WORLD_RANK"
         : pmi_rank ? "PMI_RANK"
                    : "PMIX_RANK",
         l.rank, l.size);
  if (!l.launched) l.size = 1;
  return l;
}

Launcher launcher() {
  return parse_launcher([](const char* name) -> const char* { return std::getenv(name); });
}

std::string text(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

}  // namespace ridge::env
