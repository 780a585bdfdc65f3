// `ridge report`: this machine's roofline beside a GPU's, the standard shapes bounded on both, the
// kernels measured here placed under this machine's roofs, and the chart. The CLI finds the chips
// (and runs the probe); this file joins them.
#include "core/check.hpp"
#include "roofline/json.hpp"
#include "report/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "bench/registry.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/threads.hpp"
#include "ridge/core/units.hpp"

namespace ridge::report {
namespace {

using units::format_bytes;
using units::format_flops;
using units::format_rate;
using units::format_seconds;

std::string peak_cell(const Chip& c, const char* k) {
  return c.has_peak(k) ? format_flops(c.peak(k)) : "-";
}

std::string chips_table(const Chip& a, const Chip& b) {
  std::string s = fmt::format("{:<22} {:>22} {:>22}\n", "", a.id, b.id);
  for (const char* k : {"fp32", "bf16", "fp16", "fp8", "int8"})
    s += fmt::format("{:<22} {:>22} {:>22}\n", fmt::format("peak {}", k), peak_cell(a, k), peak_cell(b, k));
  auto levels = [](const Chip& c) {
    std::vector<std::string> v;
    for (const auto& m : c.memory) v.push_back(m.level);
    return v;
  };
  std::vector<std::string> all = levels(a);
  for (const auto& l : levels(b))
    if (std::find(all.begin(), all.end(), l) == all.end()) all.insert(all.begin(), l);
  for (const auto& l : all) {
    auto cell = [&](const Chip& c) {
      for (const auto& m : c.memory)
        if (m.level == l) return format_rate(m.bandwidth.value);
      return std::string("-");
    };
    s += fmt::format("{:<22} {:>22} {:>22}\n", "bandwidth " + l, cell(a), cell(b));
  }
  auto ridge_pt = [](const Chip& c) {
    const char* k = c.has_peak("bf16") ? "bf16" : "fp32";
    return fmt::format("{:.3g} FLOP/B ({})", c.peak(k) / c.bandwidth(), k);
  };
  s += fmt::format("{:<22} {:>22} {:>22}\n", "ridge point (outer)", ridge_pt(a), ridge_pt(b));
  return s;
}

struct Cell {
  bool ok = false;
  roofline::Bound b;
};

Cell bound_cell(const NamedCost& op, const Chip& c) {
  Cell cell;
  if (!c.has_peak(op.cost.compute)) return cell;
  cell.b = roofline::bound(op.cost, c);
  cell.ok = true;
  return cell;
}

std::string cell_text(const Cell& c) {
  if (!c.ok) return fmt::format("{:>10} {:>8} {:>5}", "-", "no peak", "");
  return fmt::format("{:>10} {:>8} {:>4.0f}%", format_seconds(c.b.t_lower), c.b.binding,
                     100 * c.b.fraction_of_peak);
}

// Measured points (bench result rows) against this machine's roof (hold_against, already
// applied): achieved vs the bound at the row's intensity and memory level. The numbers in the first
// column are the plot's labels. The kernel issues fill this section by passing --results.
std::string measured_table(const std::vector<MeasuredPoint>& pts, const Chip& c, nlohmann::json& j) {
  // The label column fits the longest label, so no case field (attention's pass, say) is cut off.
  size_t w = 8;
  for (const auto& p : pts) w = std::max(w, p.dtype.size() + 1 + p.label.size());
  std::string s = fmt::format("{:>3} {:<{}} {:>5} {:>10} {:>14} {:>19} {:>9}\n", "#", "measured", w, "cache",
                              "intensity", "achieved", fmt::format("bound ({})", c.id), "% bound");
  bool any_above = false;
  int num = 0;
  for (const auto& p : pts) {
    ++num;
    const std::string label = p.dtype + " " + p.label;
    const std::string bound =
        p.bound_flops > 0 ? format_flops(p.bound_flops) + " " + p.bound_level : std::string("-");
    s += fmt::format("{:>3} {:<{}} {:>5} {:>10.3g} {:>14} {:>19} {:>8.0f}%{}\n", num, label, w,
                     p.cache.empty() ? "-" : p.cache, p.intensity, format_flops(p.gflops * 1e9), bound,
                     p.pct_of_bound, p.above_roof ? "  ABOVE ROOF" : "");
    any_above = any_above || p.above_roof;
    j.push_back({{"num", num},
                 {"label", p.label},
                 {"dtype", p.dtype},
                 {"cache", p.cache},
                 {"intensity", p.intensity},
                 {"gflops", p.gflops},
                 {"roof_dtype", p.roof_dtype},
                 {"bound_level", p.bound_level},
                 {"bound_flops", p.bound_flops},
                 {"pct_of_bound", p.pct_of_bound},
                 {"above_roof", p.above_roof}});
  }
  if (any_above)
    s += "ABOVE ROOF: the point is above its roof: the roof is wrong (rerun the probe) or the working set "
         "came from "
         "a faster level than the one it is held against\n";
  return s;
}

}  // namespace

std::vector<MeasuredPoint> measure_kernels(const Chip& chip,
                                           const std::function<void(const std::string&)>& progress) {
  // No peers: the report places ridge's own kernels on this machine's roof; `ridge bench
  // gemm|attention` gives the peer ratios. Each case is a few milliseconds to a few hundred.
  struct Run {
    const char* name;
    std::vector<std::string> grid;
  };
  const std::vector<Run> runs = {
      {"gemm", {"set=dense", "dtype=fp32,bf16,fp8", "peer=0"}},
      {"gemm", {"set=decode", "dtype=fp32,bf16,fp8", "peer=0"}},
      {"attention", {"seq=2048", "head_dim=128", "dtype=fp32,bf16", "causal=false", "pass=forward,backward"}},
      {"attention", {"seq=4096", "head_dim=64", "dtype=fp32", "causal=true", "pass=forward"}},
  };
  std::FILE* devnull = std::fopen("/dev/null", "w");
  if (!devnull) fail("report: cannot open /dev/null for the measured runs");
  struct Close {
    std::FILE* f;
    ~Close() { std::fclose(f); }
  } close_devnull{devnull};
  std::vector<bench::Row> rows;
  for (const auto& r : runs) {
    const auto& b = bench::find_benchmark(r.name);
    const ChipSource source = [&chip] { return &chip; };
    bench::Sink sink(bench::Format::json, devnull, hold_rows_against(source));
    bench::Progress quiet(false);
    bench::Context ctx(b.name, sink, quiet);
    ctx.grid = bench::Grid::parse(r.grid);
    ctx.quick = true;
    ctx.threads = get_num_threads();
    ctx.find_chip = source;
    ctx.options.warmup = 1;
    ctx.options.iters = 5;
    if (progress) {
      std::string line = fmt::format("measuring {}", r.name);
      for (const auto& g : r.grid) line += " " + g;
      progress(line);
    }
    b.run(ctx);
    sink.finish();
    rows.insert(rows.end(), sink.rows().begin(), sink.rows().end());
  }
  return measured_points(rows);
}

Report make_report(const Chip& me, const std::string& how, const Chip& gpu, const std::vector<NamedCost>& ops,
                   std::vector<MeasuredPoint> measured) {
  nlohmann::json j;
  j["this"] = roofline::to_json(me);
  j["this_source"] = how;
  j["gpu"] = gpu.id;
  j["shapes"] = nlohmann::json::array();
  std::string table = fmt::format("{:<16} {:<40} {:>11} {:>11} {:>9}  {:<25}  {:<25}\n", "group", "shape",
                                  "FLOPs", "bytes", "FLOP/B", fmt::format("{}: T_lower roof %pk", me.id),
                                  fmt::format("{}: T_lower roof %pk", gpu.id));
  // `--this h100.json --hw h100` gives both columns one id: keep the two apart in the JSON.
  const std::string me_key = me.id == gpu.id ? me.id + " (this machine)" : me.id;
  j["this_key"] = me_key;
  for (const auto& op : ops) {
    const Cell a = bound_cell(op, me), b = bound_cell(op, gpu);
    std::string flops = format_flops(static_cast<double>(op.cost.flops));
    flops = flops.substr(0, flops.size() - 2);
    table += fmt::format("{:<16} {:<40} {:>11} {:>11} {:>9.4g}  {}  {}\n", op.group, op.label.substr(0, 40),
                         flops, format_bytes(static_cast<double>(op.cost.memory_bytes())),
                         op.cost.intensity(), cell_text(a), cell_text(b));
    nlohmann::json row{{"group", op.group}, {"label", op.label}, {"cost", roofline::to_json(op.cost)}};
    row[me_key] = a.ok ? roofline::to_json(a.b) : nlohmann::json(nullptr);
    row[gpu.id] = b.ok ? roofline::to_json(b.b) : nlohmann::json(nullptr);
    j["shapes"].push_back(row);
  }
  for (auto& p : measured) hold_against(p, me);
  nlohmann::json mj = nlohmann::json::array();
  const std::string mtable = measured.empty() ? "" : measured_table(measured, me, mj);
  j["measured"] = mj;

  // Every roof of both chips (each dtype at each memory level): what the plot draws from.
  Report r;
  r.spec = plot_spec({me, gpu}, ops, measured, fmt::format("roofline: {} vs {}", me.name, gpu.name));
  j["roofs"] = r.spec["roofs"];
  r.json = std::move(j);
  r.text = fmt::format("this machine: {} ({})\n\n{}\n", me.name, how, chips_table(me, gpu));
  r.text += fmt::format(
      "predicted bound of the standard shapes (bf16 unless noted; T_lower = max(T_math, T_memory) against "
      "the "
      "outermost memory level; %pk = share of peak FLOP/s attainable)\n{}",
      table);
  if (!mtable.empty()) r.text += fmt::format("\n{}", mtable);
  return r;
}

void add_plot(Report& r, const std::vector<std::string>& files) {
  r.json["plot"] = {{"png", files.at(0)}, {"svg", files.at(1)}};
  r.text += fmt::format("\nplot: {} (and {})\n", files[0], files[1]);
}

void add_plot_error(Report& r, const std::string& why) {
  // The numbers stand without the chart; the report says why it is missing instead of failing.
  r.json["plot"] = {{"error", why}};
  r.text += fmt::format("\nplot: not written: {}\n", why);
}

}  // namespace ridge::report
