// `ridge report` (what scripts/demo runs): probe this machine quickly, put its roofline beside a
// GPU's, bound the standard benchmark shapes on both, and draw the chart. Measured kernel points
// join through --results (JSON lines of bench result rows) and, unless --no-measure, from a short
// live run of the GEMM and attention benchmarks (measured_rows() below), so the kernels appear as
// points under the roof the probe just measured.
#include <algorithm>
#include <fmt/format.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "cli.hpp"
#include "ridge/bench.hpp"
#include "ridge/core.hpp"
#include "ridge/probe.hpp"
#include "ridge/roofline.hpp"
#include "core/check.hpp"
#include "bench/registry.hpp"
#include "roofline/json.hpp"
#include "probe/json.hpp"

namespace {

namespace rr = ridge::roofline;
using ridge::units::format_bytes;
using ridge::units::format_flops;
using ridge::units::format_rate;
using ridge::units::format_seconds;

struct Opts {
  std::string hw = "h100", this_file, out = "ridge-roofline", results;
  bool reuse_probe = false, json = false, no_measure = false;
};

// A short live run of registered kernel benchmarks (no peers: the report places ridge's own kernels
// on this machine's roof; `ridge bench gemm|attention` gives the peer ratios). Each case is a few
// milliseconds to a few hundred, so the whole set stays well under a minute.
std::vector<rr::MeasuredPoint> measured_rows() {
  namespace rb = ridge::bench;
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
  if (!devnull) ridge::fail("report: cannot open /dev/null for the measured runs");
  const auto path = std::filesystem::temp_directory_path() / fmt::format("ridge-report-{}.jsonl", ::getpid());
  {
    std::ofstream out(path);
    for (const auto& r : runs) {
      const auto& b = rb::find_benchmark(r.name);
      rb::Sink sink(rb::Format::json, devnull);
      rb::Progress progress(false);
      rb::Context ctx(b.name, sink, progress);
      ctx.grid = rb::Grid::parse(r.grid);
      ctx.quick = true;
      ctx.threads = ridge::get_num_threads();
      ctx.options.warmup = 1;
      ctx.options.iters = 5;
      std::cerr << "report: measuring " << r.name;
      for (const auto& g : r.grid) std::cerr << " " << g;
      std::cerr << "\n";
      b.run(ctx);
      sink.finish();
      out << rb::to_json_lines(sink.rows());
    }
  }
  std::fclose(devnull);
  auto pts = rr::read_measured(path.string());
  std::filesystem::remove(path);
  return pts;
}

// The one place the probe is called: a quick run, written as this machine's chip file unless a
// (presumably fuller) probe result exists already.
rr::Chip this_machine(const Opts& o, std::string& how) {
  if (!o.this_file.empty()) {
    how = "from " + o.this_file;
    return rr::load_chip(o.this_file);
  }
  if (o.reuse_probe && rr::has_probe_result()) {
    how = "from the probe result at " + rr::probe_result_path();
    return rr::load_chip("this");
  }
  ridge::probe::ProbeOptions po;
  po.quick = true;
  po.progress = [](const std::string& line) { std::cerr << "probe: " << line << "\n"; };
  const auto result = ridge::probe::run(po);
  const auto doc = ridge::probe::to_chip_json(result);
  how = fmt::format("quick probe, {:.1f} s", result.seconds);
  if (!rr::has_probe_result()) {
    ridge::probe::write_chip_file(doc, rr::probe_result_path());
    how += ", written to " + rr::probe_result_path();
  }
  return rr::parse_chip(doc, "probe (quick)");
}

std::string peak_cell(const rr::Chip& c, const char* k) { return c.has_peak(k) ? format_flops(c.peak(k)) : "-"; }

std::string chips_table(const rr::Chip& a, const rr::Chip& b) {
  std::string s = fmt::format("{:<22} {:>22} {:>22}\n", "", a.id, b.id);
  for (const char* k : {"fp32", "bf16", "fp16", "fp8", "int8"})
    s += fmt::format("{:<22} {:>22} {:>22}\n", fmt::format("peak {}", k), peak_cell(a, k), peak_cell(b, k));
  auto levels = [](const rr::Chip& c) {
    std::vector<std::string> v;
    for (const auto& m : c.memory) v.push_back(m.level);
    return v;
  };
  std::vector<std::string> all = levels(a);
  for (const auto& l : levels(b))
    if (std::find(all.begin(), all.end(), l) == all.end()) all.insert(all.begin(), l);
  for (const auto& l : all) {
    auto cell = [&](const rr::Chip& c) {
      for (const auto& m : c.memory)
        if (m.level == l) return format_rate(m.bandwidth.value);
      return std::string("-");
    };
    s += fmt::format("{:<22} {:>22} {:>22}\n", "bandwidth " + l, cell(a), cell(b));
  }
  auto ridge_pt = [](const rr::Chip& c) {
    const char* k = c.has_peak("bf16") ? "bf16" : "fp32";
    return fmt::format("{:.3g} FLOP/B ({})", c.peak(k) / c.bandwidth(), k);
  };
  s += fmt::format("{:<22} {:>22} {:>22}\n", "ridge point (outer)", ridge_pt(a), ridge_pt(b));
  return s;
}

struct Cell {
  bool ok = false;
  rr::Bound b;
};

Cell bound_cell(const rr::NamedCost& op, const rr::Chip& c) {
  Cell cell;
  if (!c.has_peak(op.cost.compute)) return cell;
  cell.b = rr::bound(op.cost, c);
  cell.ok = true;
  return cell;
}

std::string cell_text(const Cell& c) {
  if (!c.ok) return fmt::format("{:>10} {:>8} {:>5}", "-", "no peak", "");
  return fmt::format("{:>10} {:>8} {:>4.0f}%", format_seconds(c.b.t_lower), c.b.binding, 100 * c.b.fraction_of_peak);
}

// Measured points (bench result rows) against this machine's roof (roofline::hold_against, already
// applied): achieved vs the bound at the row's intensity and memory level. The numbers in the first
// column are the plot's labels. The kernel issues fill this section by passing --results.
std::string measured_table(const std::vector<rr::MeasuredPoint>& pts, const rr::Chip& c, nlohmann::json& j) {
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

void run(const Opts& o) {
  rr::check_plot_outputs(o.out, {o.hw, o.this_file, o.results});  // never write over an input
  const auto gpu = rr::load_chip(o.hw);
  // Every input is read before the probe runs: a bad file is one line, not a probe and then a line.
  auto measured = o.results.empty() ? std::vector<rr::MeasuredPoint>{} : rr::read_measured(o.results);
  std::string how;
  const auto me = this_machine(o, how);
  const auto ops = rr::standard_ops();
  if (!o.no_measure) {
    auto live = measured_rows();
    measured.insert(measured.end(), live.begin(), live.end());
  }

  nlohmann::json j;
  j["this"] = to_json(me);
  j["this_source"] = how;
  j["gpu"] = gpu.id;
  j["shapes"] = nlohmann::json::array();
  std::string table = fmt::format("{:<16} {:<40} {:>11} {:>11} {:>9}  {:<25}  {:<25}\n", "group", "shape", "FLOPs",
                                  "bytes", "FLOP/B", fmt::format("{}: T_lower roof %pk", me.id),
                                  fmt::format("{}: T_lower roof %pk", gpu.id));
  // `--this h100.json --hw h100` gives both columns one id: keep the two apart in the JSON.
  const std::string me_key = me.id == gpu.id ? me.id + " (this machine)" : me.id;
  j["this_key"] = me_key;
  for (const auto& op : ops) {
    const Cell a = bound_cell(op, me), b = bound_cell(op, gpu);
    std::string flops = format_flops(static_cast<double>(op.cost.flops));
    flops = flops.substr(0, flops.size() - 2);
    table += fmt::format("{:<16} {:<40} {:>11} {:>11} {:>9.4g}  {}  {}\n", op.group, op.label.substr(0, 40), flops,
                         format_bytes(static_cast<double>(op.cost.memory_bytes())), op.cost.intensity(), cell_text(a),
                         cell_text(b));
    nlohmann::json row{{"group", op.group}, {"label", op.label}, {"cost", to_json(op.cost)}};
    row[me_key] = a.ok ? to_json(a.b) : nlohmann::json(nullptr);
    row[gpu.id] = b.ok ? to_json(b.b) : nlohmann::json(nullptr);
    j["shapes"].push_back(row);
  }
  for (auto& p : measured) rr::hold_against(p, me);
  nlohmann::json mj = nlohmann::json::array();
  const std::string mtable = measured.empty() ? "" : measured_table(measured, me, mj);
  j["measured"] = mj;

  // Every roof of both chips (each dtype at each memory level): what the plot draws from.
  const auto spec =
      rr::plot_spec({me, gpu}, ops, measured, fmt::format("roofline: {} vs {}", me.name, gpu.name));
  j["roofs"] = spec["roofs"];
  std::string plot_line;
  try {
    const auto files = rr::render_plot(spec, o.out);
    j["plot"] = {{"png", files[0]}, {"svg", files[1]}};
    plot_line = fmt::format("plot: {} (and {})\n", files[0], files[1]);
  } catch (const ridge::Error& e) {
    // The numbers stand without the chart; say why it is missing instead of failing the report.
    j["plot"] = {{"error", e.what()}};
    plot_line = fmt::format("plot: not written: {}\n", e.what());
  }

  if (o.json) {
    ridge::cli::print_json(j);
    return;
  }
  fmt::print("this machine: {} ({})\n\n{}\n", me.name, how, chips_table(me, gpu));
  fmt::print("predicted bound of the standard shapes (bf16 unless noted; T_lower = max(T_math, T_memory) against the "
             "outermost memory level; %pk = share of peak FLOP/s attainable)\n{}",
             table);
  if (!mtable.empty()) fmt::print("\n{}", mtable);
  fmt::print("\n{}", plot_line);
}

void setup(CLI::App& root) {
  auto o = std::make_shared<Opts>();
  auto* c = root.add_subcommand("report", "probe this machine, put its roofline beside a GPU's, bound the standard "
                                          "shapes on both and draw the chart");
  c->add_option("--hw", o->hw, "the chip to compare with (id or chip JSON file)")->capture_default_str();
  c->add_option("--this", o->this_file, "use this chip file for the machine instead of probing");
  c->add_flag("--reuse-probe", o->reuse_probe, "use the existing probe result if there is one");
  c->add_option("--out", o->out, "plot path without extension (.png and .svg are written)")->capture_default_str();
  c->add_option("--results", o->results, "JSON-lines benchmark rows to add as measured points");
  c->add_flag("--no-measure", o->no_measure, "skip the short live GEMM and attention runs");
  c->add_flag("--json", o->json, "print one JSON document");
  c->callback([o] { run(*o); });
}

}  // namespace

RIDGE_COMMAND(report, setup);
