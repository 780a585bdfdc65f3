#include "gemm/jit_decode.hpp"

#include <atomic>
#include <map>
#include <mutex>
#include <sstream>
#include <string_view>
#include <tuple>

#include "ridge/jit.hpp"

namespace ridge::gemm::detail {
namespace {

// The text of an embedded file as the generated unit holds it: its own #include "..." lines and
// #pragma once dropped (every file it needs is pasted in order), system includes kept.
std::string embedded(std::string_view path) {
  size_t n = 0;
  const JitSourceFile* files = jit_source_files(&n);
  for (size_t i = 0; i < n; ++i) {
    if (path != files[i].path) continue;
    std::istringstream in(files[i].text);
    std::string out, line;
    while (std::getline(in, line)) {
      if (line.rfind("#pragma once", 0) == 0 || line.rfind("#include \"", 0) == 0) continue;
      out += line;
      out += '\n';
    }
    return "// ---- src/" + std::string(path) + "\n" + out;
  }
  return {};  // not reached: cmake/gemm_jit.cmake embeds every file named here
}

// A kernel template the JIT instantiates: its ISA's flags, the files it needs after scalar.inc, and the
// call that runs it with m (M) and k (K) as constants. 5..16 rows never take the rows-in-address-order
// kernels (their rule is false past 4 rows), hence `false` for rows_order.
struct Template {
  const char* name;
  bool served;  // decode calls take it (the decision table, docs/jit.md); else only when asked for
  const char* (*flags)();
  const char* files[2];
  const char* call;  // with M and K for the constants
};
constexpr Template kTemplates[] = {
    // On AVX-512 the constants did not pay (0.89-1.02x): built for the benchmark and the tests only.
    {"f32_avx512",
     false,
     jit_flags_avx512,
     {"gemm/dot_f32_avx512.inc", "gemm/small_m_avx512.inc"},
     "small_m_blocks<DotF32, M, K>(s.m, n0, n1, s.k, s.a, s.lda, s.b, s.ldb, t, false)"},
    {"f32_avx2",
     true,
     jit_flags_avx2,
     {"gemm/small_m_avx2.inc", nullptr},
     "small_m_avx2<BF32, float, M, K>(s, n0, n1, t, false)"},
    {"bf16_avx2",
     true,
     jit_flags_avx2,
     {"gemm/small_m_avx2.inc", nullptr},
     "small_m_avx2<BBf16, uint16_t, M, K>(s, n0, n1, t, false)"},
};

const Template* find_template(const char* name) {
  if (!name) return nullptr;
  for (const auto& t : kTemplates)
    if (std::string_view(t.name) == name) return &t;
  return nullptr;
}

using Entry = SmallMKernel (*)(const JitHooks*);

// The process's built kernels (nullptr where a build failed, so a failure is not retried per call),
// and a generation that jit_small_m_forget bumps so every thread's memo empties.
std::mutex g_mutex;
std::map<std::tuple<std::string, int64_t, int64_t>, SmallMKernel> g_built;
std::atomic<uint64_t> g_generation{1};

struct Memo {
  const char* tmpl = nullptr;
  int64_t m = 0, k = 0;
  SmallMKernel fn = nullptr;
};
constexpr int kMemo = 8;  // a decode step calls 4-5 shapes per layer (qkv, out, w1|w3, w2, lm_head)
struct ThreadMemo {
  uint64_t generation = 0;
  Memo slot[kMemo];
  int next = 0;
};

}  // namespace

bool jit_serves(const KernelInfo& ki, int64_t m) {
  const Template* t = find_template(ki.small_m_jit);
  return t && t->served && m >= kJitMinM && m <= kJitMaxM;
}

std::string jit_small_m_source(const char* jit_template, int64_t m, int64_t k) {
  const Template* t = find_template(jit_template);
  if (!t) return {};
  std::string call = t->call;
  const std::string_view mk = "M, K>";
  call.replace(call.find(mk), mk.size(), std::to_string(m) + ", " + std::to_string(k) + ">");
  std::ostringstream s;
  s << "// ridge JIT unit: the decode kernel " << t->name << " with m = " << m << " and k = " << k
    << " compiled in (src/gemm/jit_decode.cpp).\n"
    << "#include <immintrin.h>\n#include <cstddef>\n#include <cstdint>\n#include <cstring>\n\n"
    << embedded("gemm/abi.hpp") << "\nnamespace ridge::gemm::detail {\nnamespace {\n\n"
    << "// ridge's plain epilogue, tile offset and scratch, handed over by ridge_jit_entry.\n"
    << "const JitHooks* hooks = nullptr;\n"
    << "void store_tile_generic(const float* acc, int64_t acc_ld, int mr, int nr, const Tile& t) {\n"
    << "  hooks->store_tile_generic(acc, acc_ld, mr, nr, t);\n}\n"
    << "Tile tile_at(const Tile& t, int64_t i, int64_t j) {\n  return hooks->tile_at(t, i, j);\n}\n"
    << "std::byte* thread_scratch(size_t bytes) {\n  return hooks->thread_scratch(bytes);\n}\n\n"
    << embedded("simd/scalar.inc");
  for (const char* f : t->files)
    if (f) s << embedded(f);
  s << "\nvoid kernel(const SmallM& s, int64_t n0, int64_t n1, const Tile& t) {\n  " << call
    << ";\n}\n\n}  // namespace\n}  // namespace ridge::gemm::detail\n\n"
    << "extern \"C\" ridge::gemm::detail::SmallMKernel ridge_jit_entry(const ridge::gemm::detail::JitHooks* "
       "h) {\n"
    << "  ridge::gemm::detail::hooks = h;\n  return &ridge::gemm::detail::kernel;\n}\n";
  return s.str();
}

SmallMKernel jit_small_m_build(const KernelInfo& ki, int64_t m, int64_t k) {
  const Template* t = find_template(ki.small_m_jit);
  if (!t || m < kJitMinM || m > kJitMaxM || k < 1) return nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto key = std::make_tuple(std::string(t->name), m, k);
  if (auto it = g_built.find(key); it != g_built.end()) return it->second;
  jit::Kernel unit;
  unit.name = std::string("small_m_") + t->name + "_m" + std::to_string(m) + "_k" + std::to_string(k);
  unit.source = jit_small_m_source(t->name, m, k);
  // The optimisation level of the release build, whose kernels the JIT units replace.
  unit.flags.push_back("-O3");
  std::istringstream flags(t->flags());
  for (std::string f; flags >> f;) unit.flags.push_back(f);
  unit.symbol = "ridge_jit_entry";
  SmallMKernel fn = nullptr;
  jit::Settings js = jit::settings();
  js.enabled = true;  // asked for explicitly: the JIT switch decides only whether jit_small_m asks
  if (void* p = jit::get(unit, js)) {
    static const JitHooks hooks{&store_tile_generic, &tile_at, &thread_scratch};
    fn = reinterpret_cast<Entry>(p)(&hooks);
  }
  g_built[key] = fn;
  return fn;
}

SmallMKernel jit_small_m(const KernelInfo& ki, int64_t m, int64_t k, dispatch::Jit mode) {
  if (mode == dispatch::Jit::off || !ki.small_m_jit || m < kJitMinM || m > kJitMaxM) return nullptr;
  if (mode != dispatch::Jit::every && !jit_serves(ki, m)) return nullptr;
  thread_local ThreadMemo memo;
  const uint64_t gen = g_generation.load(std::memory_order_acquire);
  if (memo.generation != gen) {
    memo = ThreadMemo{};
    memo.generation = gen;
  }
  for (const Memo& e : memo.slot)
    if (e.tmpl == ki.small_m_jit && e.m == m && e.k == k) return e.fn;
  SmallMKernel fn = jit_small_m_build(ki, m, k);
  memo.slot[memo.next] = Memo{ki.small_m_jit, m, k, fn};
  memo.next = (memo.next + 1) % kMemo;
  return fn;
}

void jit_small_m_forget() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_built.clear();
  g_generation.fetch_add(1, std::memory_order_acq_rel);
  jit::forget_in_process();
}

}  // namespace ridge::gemm::detail
