// `ridge bench jit`: what the GEMM JIT costs and what it buys (docs/jit.md). Phases: `cold` (compile
// and load one decode kernel into an empty cache), `disk` (load it from the disk cache into a fresh
// process map), `lookup` (a warm decode call's look-up of its kernel, the cost added to every call),
// and `shape` (the model's decode GEMMs through the public API, the JIT kernel against the
// ahead-of-time one, interleaved round by round, bit-identical outputs checked; `paired_ratio` is the
// median of the rounds' AOT/JIT ratios).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "ridge/bench.hpp"
#include "ridge/core.hpp"
#include "ridge/jit.hpp"
#include "ridge/gemm.hpp"
#include "ridge/model/config.hpp"
#include "bench/registry.hpp"
#include "core/check.hpp"
#include "core/dispatch.hpp"
#include "gemm/driver.hpp"
#include "gemm/jit_decode.hpp"

namespace ridge::gemm::detail {
bool bench_blocks_avx2(int variant, int64_t m, int64_t n, int64_t k, const float* a, const float* b,
                       float* d);
}

namespace {

using namespace ridge;
namespace gd = ridge::gemm::detail;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// A private cache directory for the cold and disk phases (never the user's cache), removed at the end.
struct ScratchCache {
  std::string dir;
  std::string saved;
  bool had = false;
  ScratchCache() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ridge-bench-jit-XXXXXX").string();
    check(::mkdtemp(tmpl.data()) != nullptr, "bench jit: cannot create a temporary directory");
    dir = tmpl;
    if (const char* v = std::getenv("RIDGE_JIT_CACHE_DIR")) {
      had = true;
      saved = v;
    }
    ::setenv("RIDGE_JIT_CACHE_DIR", dir.c_str(), 1);
  }
  ~ScratchCache() {
    if (had)
      ::setenv("RIDGE_JIT_CACHE_DIR", saved.c_str(), 1);
    else
      ::unsetenv("RIDGE_JIT_CACHE_DIR");
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    gd::jit_small_m_forget();
  }
};

struct Shape {
  std::string size, op;
  int64_t n = 0, k = 0;
};

// The decode GEMMs of one CS336 size (bench/shapes/model-sizes.json): D[m, n] = X[m, k] W[n, k]^T.
std::vector<Shape> model_shapes(const std::string& size, int64_t d, int64_t dff, int64_t vocab) {
  return {{size, "qkv", 3 * d, d},
          {size, "out", d, d},
          {size, "w1|w3", 2 * dff, d},
          {size, "w2", d, dff},
          {size, "lm_head", vocab, d}};
}

void run(bench::Context& ctx) {
  ctx.grid.check_keys({"phase", "dtype", "size", "op", "m", "repeats"}, "jit");
  const auto dtypes = ctx.grid.values("dtype", {"fp32", "bf16"});
  for (const auto& d : dtypes)
    check(d == "fp32" || d == "bf16", "--set dtype: '{}' is not one of fp32, bf16", d);
  const std::vector<std::string> phases_all = {"cold", "disk", "lookup", "shape", "blocking"};
  // blocking is an experiment (docs/jit.md): asked for by name, not in the default sweep.
  const auto phases = ctx.grid.values("phase", {"cold", "disk", "lookup", "shape"});
  for (const auto& p : phases)
    check(std::find(phases_all.begin(), phases_all.end(), p) != phases_all.end(),
          "--set phase: '{}' is not one of cold, disk, lookup, shape, blocking", p);
  // The sizes' numbers are the model presets' (bench/shapes/model-sizes.json).
  const std::vector<std::string> sizes_all = {"small", "medium", "large", "xl"};
  const auto size_names = ctx.grid.values(
      "size", ctx.quick ? std::vector<std::string>{"small"} : std::vector<std::string>{"small", "medium"});
  const std::vector<std::string> ops_all = {"qkv", "out", "w1|w3", "w2", "lm_head"};
  const auto ops = ctx.grid.values("op", ops_all);
  for (const auto& o : ops)
    check(std::find(ops_all.begin(), ops_all.end(), o) != ops_all.end(),
          "--set op: '{}' is not one of qkv, out, w1|w3, w2, lm_head", o);
  const auto ms = ctx.grid.counts(
      "m", ctx.quick ? std::vector<int64_t>{4, 8, 16} : std::vector<int64_t>{1, 4, 8, 12, 16});
  for (int64_t m : ms) check(m >= 1 && m <= 16, "--set m: {} is not a decode batch (expected 1 .. 16)", m);
  const auto reps_v = ctx.grid.counts("repeats", {5});
  check(reps_v.size() == 1 && reps_v[0] >= 1 && reps_v[0] <= 100,
        "--set repeats: give one count in 1 .. 100");
  const int64_t repeats = reps_v[0];
  std::vector<Shape> shapes;
  for (const auto& sn : size_names) {
    check(std::find(sizes_all.begin(), sizes_all.end(), sn) != sizes_all.end(),
          "--set size: '{}' is not one of small, medium, large, xl", sn);
    const model::ModelConfig c = model::preset(sn, 10000, 256);
    for (const auto& s : model_shapes(sn, c.d_model, c.d_ff, c.vocab_size))
      if (std::find(ops.begin(), ops.end(), s.op) != ops.end()) shapes.push_back(s);
  }

  // cold, disk and lookup time the fp32 kernel of this path (its template, whether the table keeps it).
  const gd::KernelInfo ki = gd::select_kernel(gd::Elem::f32, dispatch::Work::small_m, cpu::active_isa());
  const bool served_here = ki.small_m_jit != nullptr;
  const std::string why_not =
      fmt::format("the {} path's fp32 decode kernel has no JIT template", cpu::isa_name(cpu::active_isa()));
  ctx.progress.start(0);

  // cold and disk: one kernel (m = 8, k = 768), a private cache.
  if (served_here && (std::count(phases.begin(), phases.end(), "cold") ||
                      std::count(phases.begin(), phases.end(), "disk"))) {
    ScratchCache scratch;
    std::vector<double> cold, disk;
    for (int64_t r = 0; r < repeats; ++r) {
      // Empty cache: every entry removed, the process map dropped.
      for (const auto& e : std::filesystem::directory_iterator(scratch.dir))
        std::filesystem::remove_all(e.path());
      gd::jit_small_m_forget();
      auto t0 = std::chrono::steady_clock::now();
      check(gd::jit_small_m_build(ki, 8, 768) != nullptr,
            "bench jit: the JIT could not build its kernel (see the notice above)");
      cold.push_back(seconds_since(t0));
      for (int i = 0; i < 4; ++i) {
        gd::jit_small_m_forget();
        t0 = std::chrono::steady_clock::now();
        check(gd::jit_small_m_build(ki, 8, 768) != nullptr, "bench jit: the disk cache entry did not load");
        disk.push_back(seconds_since(t0));
      }
      ctx.progress.tick("cold/disk");
    }
    for (const char* phase : {"cold", "disk"}) {
      if (!std::count(phases.begin(), phases.end(), std::string(phase))) continue;
      const auto& v = std::string(phase) == "cold" ? cold : disk;
      bench::Row row;
      row.case_ = {{"phase", phase},
                   {"kernel", fmt::format("small_m_{}_m8_k768", ki.small_m_jit)},
                   {"repeats", v.size()}};
      row.dtype = "fp32";
      row.median_ms = median(v) * 1e3;
      row.min_ms = *std::min_element(v.begin(), v.end()) * 1e3;
      const double target_ms = std::string(phase) == "cold" ? 2000 : 5;
      row.note =
          fmt::format("{} target {:.0f} ms", row.median_ms <= target_ms ? "within" : "ABOVE", target_ms);
      ctx.emit(std::move(row));
    }
  }

  // lookup: what a warm decode call adds to find its kernel (the thread's memo), per call.
  if (served_here && std::count(phases.begin(), phases.end(), "lookup")) {
    check(gd::jit_small_m(ki, 8, 768, dispatch::Jit::every) != nullptr,
          "bench jit: the JIT could not build its kernel (see the notice above)");
    const int64_t calls = 1'000'000;
    const auto m = bench::measure(
        [&] {
          for (int64_t i = 0; i < calls; ++i)
            bench::do_not_optimize(gd::jit_small_m(ki, 8 + (i & 1) * 4, 768, dispatch::Jit::every));
        },
        ctx.options);
    bench::Row row;
    row.case_ = {{"phase", "lookup"}, {"calls", calls}};
    row.dtype = "fp32";
    row.set_time(m);
    const double ns = m.median_ms() * 1e6 / static_cast<double>(calls);
    row.extra["ns_per_call"] = std::round(ns * 100) / 100;
    row.note = fmt::format("{} target 50 ns", ns <= 50 ? "within" : "ABOVE");
    ctx.emit(std::move(row));
    ctx.progress.tick("lookup");
  }

  // shape: the public API with the JIT kernel and with the AOT one, alternated `repeats` times, each a
  // measure(); the JIT side takes every template (Jit::every), so the rows of a template the decision
  // table did not keep are measured too, and say so.
  if (std::count(phases.begin(), phases.end(), "shape")) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (const auto& dtype : dtypes) {
      const bool bf = dtype == "bf16";
      const gd::KernelInfo kd =
          gd::select_kernel(bf ? gd::Elem::bf16 : gd::Elem::f32, dispatch::Work::small_m, cpu::active_isa());
      for (const auto& s : shapes) {
        Buffer<float> w(static_cast<size_t>(s.n * s.k));
        for (auto& v : w) v = u(rng);
        Buffer<bf16> w16(w.size());
        for (size_t i = 0; i < w.size(); ++i) w16[i] = to_bf16(w[i]);
        for (int64_t m : ms) {
          Buffer<float> x(static_cast<size_t>(m * s.k)), d_jit(static_cast<size_t>(m * s.n)),
              d_aot(static_cast<size_t>(m * s.n));
          for (auto& v : x) v = u(rng);
          Buffer<bf16> x16(x.size());
          for (size_t i = 0; i < x.size(); ++i) x16[i] = to_bf16(x[i]);
          auto call = [&](Buffer<float>& d) {
            const MatrixView<float> out{d.data(), m, s.n, s.n};
            if (bf)
              gemm::bf16_gemm_nt(MatrixView<const bf16>{x16.data(), m, s.k, s.k},
                                 MatrixView<const bf16>{w16.data(), s.n, s.k, s.k}, out);
            else
              gemm::f32_gemm_nt(MatrixView<const float>{x.data(), m, s.k, s.k},
                                MatrixView<const float>{w.data(), s.n, s.k, s.k}, out);
          };
          // The median of one measure() with the JIT switch at `mode`.
          auto time = [&](dispatch::Jit mode, Buffer<float>& d) {
            const dispatch::ScopedPath jit({.jit = mode});
            return bench::measure([&] { call(d); }, ctx.options).median_ms();
          };
          {
            const dispatch::ScopedPath jit({.jit = dispatch::Jit::every});
            call(d_jit);  // builds (or loads) the kernel outside the clock
          }
          // Each round times the two kernels back to back, so both see the same machine: this VM slows
          // down ~2x for seconds at a time, and the ratio of two adjacent timings is steadier than the
          // ratio of two medians. paired_ratio is the median of the rounds' ratios.
          std::vector<double> tj, ta, ratio;
          for (int64_t r = 0; r < repeats; ++r) {
            const bool aot_first = r % 2 == 0;  // alternate the order too
            double a = 0, j = 0;
            if (aot_first) a = time(dispatch::Jit::off, d_aot);
            j = time(dispatch::Jit::every, d_jit);
            if (!aot_first) a = time(dispatch::Jit::off, d_aot);
            ta.push_back(a);
            tj.push_back(j);
            ratio.push_back(a / j);
          }
          bench::Row row;
          row.case_ = {{"phase", "shape"}, {"size", s.size}, {"op", s.op}, {"m", m}, {"n", s.n}, {"k", s.k}};
          row.dtype = dtype;
          row.median_ms = median(tj);
          row.min_ms = *std::min_element(tj.begin(), tj.end());
          row.flops = 2.0 * static_cast<double>(m * s.n * s.k);
          row.bytes = (bf ? 2.0 : 4.0) * static_cast<double>(s.n * s.k + m * s.k) +
                      4.0 * static_cast<double>(m * s.n);
          row.cache = "warm";
          row.add_peer("AOT", median(ta));
          row.extra["jit_spread_pct"] =
              std::round(1000 * (*std::max_element(tj.begin(), tj.end()) / row.min_ms - 1)) / 10;
          std::sort(ratio.begin(), ratio.end());
          row.extra["paired_ratio"] = std::round(1000 * median(ratio)) / 1000;
          // The middle half of the rounds' ratios (their quartiles): how far one round's figure moves.
          row.extra["paired_q1"] = std::round(1000 * ratio[ratio.size() / 4]) / 1000;
          row.extra["paired_q3"] = std::round(1000 * ratio[(3 * ratio.size()) / 4]) / 1000;
          row.extra["same_bits"] = std::memcmp(d_jit.data(), d_aot.data(), d_jit.size() * sizeof(float)) == 0;
          if (!kd.small_m_jit || m < gd::kJitMinM || m > gd::kJitMaxM)
            row.note = kd.small_m_jit
                           ? "no JIT for this m: the AOT kernel both times"
                           : fmt::format("{} has no JIT template: the AOT kernel both times", kd.name);
          else
            row.note = gd::jit_serves(kd, m) ? "JIT kernel (served)"
                                             : "JIT kernel (not served: the table keeps AOT)";
          ctx.emit(std::move(row));
          ctx.progress.tick(fmt::format("{} {} {} m={}", dtype, s.size, s.op, m));
        }
      }
    }
  }
  // blocking: the AVX2 decode kernel's row blocks (4 x 2, 6 x 2, 8 x 1) against each other, fp32, one
  // thread, the rounds interleaved. Needs AVX2.
  if (std::count(phases.begin(), phases.end(), "blocking")) {
    check(cpu::supported(cpu::Isa::avx2), "--set phase=blocking: times AVX2 kernels; this CPU has no AVX2");
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const char* names[] = {"4x2", "6x2", "8x1"};
    for (const auto& s : shapes) {
      Buffer<float> w(static_cast<size_t>(s.n * s.k));
      for (auto& v : w) v = u(rng);
      for (int64_t m : ms) {
        if (m < 4) continue;  // 1..3 rows have their own blocks
        Buffer<float> x(static_cast<size_t>(m * s.k)), d(static_cast<size_t>(m * s.n));
        for (auto& v : x) v = u(rng);
        std::vector<double> t[3];
        for (int64_t r = 0; r < repeats; ++r)
          for (int v = 0; v < 3; ++v)
            t[v].push_back(
                bench::measure([&] { gd::bench_blocks_avx2(v, m, s.n, s.k, x.data(), w.data(), d.data()); },
                               ctx.options)
                    .median_ms());
        for (int v = 0; v < 3; ++v) {
          bench::Row row;
          row.case_ = {
              {"phase", "blocking"}, {"size", s.size}, {"op", s.op}, {"m", m}, {"n", s.n}, {"k", s.k},
              {"blocks", names[v]}};
          row.dtype = "fp32";
          row.threads = 1;
          row.isa = "avx2";
          row.median_ms = median(t[v]);
          row.min_ms = *std::min_element(t[v].begin(), t[v].end());
          row.flops = 2.0 * static_cast<double>(m * s.n * s.k);
          row.add_peer("4x2", median(t[0]));
          ctx.emit(std::move(row));
        }
        ctx.progress.tick(fmt::format("blocking {} {} m={}", s.size, s.op, m));
      }
    }
  }
  if (!served_here &&
      (std::count(phases.begin(), phases.end(), "cold") || std::count(phases.begin(), phases.end(), "disk") ||
       std::count(phases.begin(), phases.end(), "lookup")))
    fmt::print(stderr, "ridge bench jit: {}: no cold, disk or lookup rows\n", why_not);
}

}  // namespace

RIDGE_BENCHMARK(
    jit, "jit",
    "the GEMM JIT: cold compile, disk-cache hit, warm look-up, and JIT vs AOT decode kernels per "
    "model shape; phase=blocking times the AVX2 decode blocks (axes: phase, dtype, size, op, m, repeats)",
    run);
