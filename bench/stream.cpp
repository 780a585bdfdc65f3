// `ridge bench stream`: McCalpin's STREAM kernels (copy, scale, add, triad) over array sizes, with
// memcpy as the peer of copy. Bytes follow STREAM's convention (each array element read or written
// once; write-allocate traffic is not counted), so GB/s here compares with published STREAM
// figures and with the probe's bandwidth roofs (the level is chosen by the working set).
#include <fmt/format.h>
#include <omp.h>

#include <cstring>

#include "ridge/bench.hpp"
#include "ridge/core.hpp"
#include "core/check.hpp"
#include "bench/registry.hpp"

namespace {

using namespace ridge;

constexpr double kScalar = 3.0;

// Kernel bodies: plain loops the compiler vectorises at the base ISA; STREAM measures memory.
void copy(const double* a, double* c, int64_t n, int t) {
#pragma omp parallel for schedule(static) num_threads(t)
  for (int64_t i = 0; i < n; ++i) c[i] = a[i];
}
void scale(double* b, const double* c, int64_t n, int t) {
#pragma omp parallel for schedule(static) num_threads(t)
  for (int64_t i = 0; i < n; ++i) b[i] = kScalar * c[i];
}
void add(const double* a, const double* b, double* c, int64_t n, int t) {
#pragma omp parallel for schedule(static) num_threads(t)
  for (int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}
void triad(double* a, const double* b, const double* c, int64_t n, int t) {
#pragma omp parallel for schedule(static) num_threads(t)
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + kScalar * c[i];
}
void memcpy_parallel(double* dst, const double* src, int64_t n, int t) {
#pragma omp parallel num_threads(t)
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t lo = n * id / nt, hi = n * (id + 1) / nt;
    std::memcpy(dst + lo, src + lo, static_cast<size_t>(hi - lo) * sizeof(double));
  }
}

// The memory level a working set of `bytes` lives in, given `threads` cores' private caches.
std::string level_for(double bytes, int threads) {
  const auto& c = cpu::info().caches;
  const double t = threads;
  if (c.l1d > 0 && bytes <= 0.5 * static_cast<double>(c.l1d) * t) return "l1";
  if (c.l2 > 0 && bytes <= 0.5 * static_cast<double>(c.l2) * t) return "l2";
  if (c.l3 > 0 && bytes <= 0.5 * static_cast<double>(c.l3)) return "l3";
  return "dram";
}

// STREAM's own kind of check, on a few elements: the output holds what the kernel implies.
void validate(const Buffer<double>& a, const Buffer<double>& b, const Buffer<double>& c,
              const std::string& k) {
  const int64_t n = static_cast<int64_t>(a.size());
  for (int64_t i : {int64_t{0}, n / 3, n / 2, n - 1}) {
    bool ok = true;
    if (k == "copy") ok = c[i] == a[i];
    if (k == "scale") ok = b[i] == kScalar * c[i];
    if (k == "add") ok = c[i] == a[i] + b[i];
    if (k == "triad") ok = a[i] == b[i] + kScalar * c[i];
    check(ok, "stream: {} produced a wrong value at index {} (a broken kernel or memory error)", k, i);
  }
}

void run(bench::Context& ctx) {
  const std::vector<std::string> all_kernels = {"copy", "scale", "add", "triad"};
  ctx.grid.check_keys({"n", "kernel"}, "stream");
  const std::vector<int64_t> sizes =
      ctx.grid.counts("n", ctx.quick ? std::vector<int64_t>{1 << 14, 1 << 20}
                                     : std::vector<int64_t>{1 << 14, 1 << 17, 1 << 20, 1 << 23});
  const auto kernels = ctx.grid.values("kernel", all_kernels);
  for (const auto& k : kernels)
    check(std::find(all_kernels.begin(), all_kernels.end(), k) != all_kernels.end(),
          "--set kernel: '{}' is not a STREAM kernel (expected copy, scale, add, triad)", k);
  for (int64_t n : sizes)
    check(n >= 1 && n <= (int64_t{1} << 31), "--set n: {} elements is out of range (1 .. 2^31)", n);
  for (int64_t n : sizes)  // three arrays of doubles, held against the memory there is, up front
    memory::check_fits(3.0 * 8.0 * static_cast<double>(n), fmt::format("--set n={}", n));

  bench::Options opt = ctx.options;
  if (opt.min_time_s == 0) opt.min_time_s = ctx.quick ? 0.005 : 0.05;
  const int t = ctx.threads;
  ctx.progress.start(sizes.size() * kernels.size());
  for (int64_t n : sizes) {
    const auto un = static_cast<size_t>(n);
    Buffer<double> a(un, "stream.a"), b(un, "stream.b"), c(un, "stream.c");
    {
      RIDGE_RANGE("stream.init");
#pragma omp parallel for schedule(static) num_threads(t)
      for (int64_t i = 0; i < n; ++i) {
        a[static_cast<size_t>(i)] = 1.0 + static_cast<double>(i % 7);
        b[static_cast<size_t>(i)] = 2.0;
        c[static_cast<size_t>(i)] = 0.0;
      }
    }
    // Each kernel's inputs must hold what STREAM's order (copy, scale, add, triad) leaves there.
    copy(a.data(), c.data(), n, t);
    scale(b.data(), c.data(), n, t);
    for (const auto& k : kernels) {
      std::function<void()> fn;
      double words = 2;
      if (k == "copy")
        fn = [&] {
          RIDGE_RANGE("stream.copy");
          copy(a.data(), c.data(), n, t);
        };
      if (k == "scale")
        fn = [&] {
          RIDGE_RANGE("stream.scale");
          scale(b.data(), c.data(), n, t);
        };
      if (k == "add") {
        fn = [&] {
          RIDGE_RANGE("stream.add");
          add(a.data(), b.data(), c.data(), n, t);
        };
        words = 3;
      }
      if (k == "triad") {
        fn = [&] {
          RIDGE_RANGE("stream.triad");
          triad(a.data(), b.data(), c.data(), n, t);
        };
        words = 3;
      }
      // add and triad read what copy and scale wrote; rerun those so each kernel sees its inputs.
      copy(a.data(), c.data(), n, t);
      scale(b.data(), c.data(), n, t);
      const auto m = bench::measure(fn, opt);
      validate(a, b, c, k);
      bench::Row row;
      row.case_ = {{"kernel", k}, {"n", n}, {"array", units::format_bytes(static_cast<double>(n) * 8)}};
      row.dtype = "fp64";
      row.threads = t;
      row.isa = "baseline";  // plain loops at the base x86-64 flags, whatever RIDGE_ISA says
      row.set_time(m);
      row.bytes = words * 8.0 * static_cast<double>(n);
      row.bound_level = level_for(3 * 8.0 * static_cast<double>(n), t);
      row.cache = "warm";  // STREAM sweeps the levels on purpose: the arrays stay where they fit
      row.extra["cv"] = std::round(m.stats.cv * 1000) / 1000;
      if (k == "copy") {
        Buffer<double> d(un, "stream.memcpy_dst");
        const auto pm = bench::measure(
            [&] {
              RIDGE_RANGE("memcpy");
              memcpy_parallel(d.data(), a.data(), n, t);
            },
            opt);
        row.add_peer("memcpy", pm);
      }
      ctx.emit(std::move(row));
      ctx.progress.tick(fmt::format("stream {} n={}", k, n));
    }
  }
}

}  // namespace

RIDGE_BENCHMARK(stream, "stream", "STREAM copy/scale/add/triad GB/s over array sizes (axes: n, kernel)", run);
