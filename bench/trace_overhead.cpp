// `ridge bench trace-overhead`: what instrumentation costs per call, with tracing off (the default)
// and on (recording Chrome trace events), for RIDGE_RANGE, start/end ranges and markers. The
// targets: under 5 ns per range when off, under 300 ns when on.
#include <fmt/format.h>

#include "ridge/bench.hpp"
#include "ridge/core.hpp"
#include "core/check.hpp"
#include "bench/registry.hpp"

namespace {

using namespace ridge;

void run(bench::Context& ctx) {
  ctx.grid.check_keys({"kind", "mode", "calls"}, "trace-overhead");
  const std::vector<std::string> kinds_all = {"range", "start_end", "mark"};
  std::vector<std::string> modes_all = {"off", "on"};
  if (trace::nvtx_compiled()) modes_all.push_back("nvtx");
  const auto kinds = ctx.grid.values("kind", kinds_all);
  const auto modes = ctx.grid.values("mode", modes_all);
  for (const auto& k : kinds)
    check(std::find(kinds_all.begin(), kinds_all.end(), k) != kinds_all.end(),
          "--set kind: '{}' is not one of range, start_end, mark", k);
  for (const auto& m : modes)
    check(std::find(modes_all.begin(), modes_all.end(), m) != modes_all.end(),
          "--set mode: '{}' is not one of off, on{}", m, trace::nvtx_compiled() ? ", nvtx" : "");
  const auto calls_v = ctx.grid.counts("calls", {1000});
  check(calls_v.size() == 1 && calls_v[0] >= 1 && calls_v[0] <= 10'000'000,
        "--set calls: give one count in 1 .. 1e7");
  const int64_t calls = calls_v[0];
  const bool user_trace = trace::recording();  // --trace: keep the user's recording untouched

  // A recorded range reads the clock twice (a marker once). Where the hypervisor traps the
  // time-stamp counter a read alone can cost hundreds of ns, so report it beside the totals.
  const auto clock_m = bench::measure(
      [&] {
        for (int64_t i = 0; i < calls; ++i) bench::do_not_optimize(memory::clock_ns());
      },
      ctx.options);
  const double clock_ns = clock_m.stats.median * 1e9 / static_cast<double>(calls);

  ctx.progress.start(kinds.size() * modes.size());
  for (const auto& mode : modes) {
    if (mode == "on" && !user_trace) trace::start_recording();
    if (mode == "nvtx") trace::set_nvtx(true);
    for (const auto& kind : kinds) {
      std::function<void()> fn;
      if (kind == "range")
        fn = [&] {
          for (int64_t i = 0; i < calls; ++i) {
            RIDGE_RANGE("overhead");
            bench::do_not_optimize(i);
          }
        };
      if (kind == "start_end")
        fn = [&] {
          for (int64_t i = 0; i < calls; ++i) trace::end_range(trace::start_range("overhead"));
        };
      if (kind == "mark")
        fn = [&] {
          for (int64_t i = 0; i < calls; ++i) trace::mark("overhead", {"bench", trace::color::none, 1.0});
        };
      const auto empty = [&] {
        for (int64_t i = 0; i < calls; ++i) bench::do_not_optimize(i);
      };
      bench::Options opt = ctx.options;
      // Clearing between samples keeps memory flat; it runs in the sync hook, outside the clock.
      if (mode == "on" && !user_trace) opt.sync = [] { trace::clear(); };
      const auto m = bench::measure(fn, opt);
      const auto base = bench::measure(empty, ctx.options);
      bench::Row row;
      row.case_ = {{"kind", kind}, {"mode", mode}, {"calls", calls}};
      row.set_time(m);
      row.isa = "baseline";
      row.add_peer("empty loop", base);
      const double ns = m.stats.median * 1e9 / static_cast<double>(calls);
      const double base_ns = base.stats.median * 1e9 / static_cast<double>(calls);
      row.extra["ns_per_call"] = std::round(ns * 100) / 100;
      row.extra["ns_over_empty"] = std::round((ns - base_ns) * 100) / 100;
      row.extra["clock_read_ns"] = std::round(clock_ns * 100) / 100;
      if (mode == "on") {
        const double reads = kind == "mark" ? 1 : 2;
        row.extra["ns_beyond_clock_reads"] = std::round((ns - base_ns - reads * clock_ns) * 100) / 100;
      }
      const double target = mode == "off" ? 5.0 : 300.0;
      row.note = fmt::format("{} target {:.0f} ns", ns - base_ns < target ? "within" : "ABOVE", target);
      if (user_trace && mode == "off") row.note += " (but --trace is recording)";
      ctx.emit(std::move(row));
      ctx.progress.tick(fmt::format("{} {}", kind, mode));
    }
    if (mode == "nvtx") trace::set_nvtx(false);
    if (mode == "on" && !user_trace) {
      trace::stop_recording();
      trace::clear();
    }
  }
}

}  // namespace

RIDGE_BENCHMARK(
    trace_overhead, "trace-overhead",
    "cost per RIDGE_RANGE / start_end / mark with tracing off, on (and NVTX) (axes: kind, mode, calls)", run);
