// `ridge report` (what scripts/demo runs): probe this machine quickly, put its roofline beside a
// GPU's, bound the standard benchmark shapes on both, and draw the chart. Measured kernel points
// join through --results (JSON lines of bench result rows) and, unless --no-measure, from a short
// live run of the GEMM and attention benchmarks (report::measure_kernels), so the kernels appear as
// points under the roof the probe just measured. Parsing and printing only: the joining is
// ridge::report's (docs/report.md).
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "cli.hpp"
#include "ridge/core.hpp"
#include "ridge/probe.hpp"
#include "report/report.hpp"
#include "ridge/roofline.hpp"
#include "core/check.hpp"
#include "bench/registry.hpp"
#include "roofline/json.hpp"
#include "probe/json.hpp"

namespace {

namespace rr = ridge::roofline;
namespace rp = ridge::report;

struct Opts {
  std::string hw = "h100", this_file, out = "ridge-roofline", results;
  bool reuse_probe = false, json = false, no_measure = false;
};

// The one place the probe is called: a quick run, written as this machine's chip file unless a
// (presumably fuller) probe result exists already.
rr::Chip this_machine(const Opts& o, std::string& how) {
  if (!o.this_file.empty()) {
    how = "from " + o.this_file;
    return ridge::cli::with_flags(ridge::cli::chip_flags("--this"),
                                  [&] { return rr::load_chip(o.this_file); });
  }
  if (o.reuse_probe && rr::has_probe_result()) {
    how = "from the probe result at " + rr::probe_result_path();
    return rr::load_chip("this");
  }
  ridge::probe::ProbeOptions po;
  po.quick = true;
  po.progress = [](const std::string& line) { ridge::cli::say("probe: ", line); };
  const auto result = ridge::probe::run(po);
  const auto doc = ridge::probe::to_chip_json(result);
  how = fmt::format("quick probe, {:.1f} s", result.seconds);
  if (!rr::has_probe_result()) {
    ridge::probe::write_chip_file(doc, rr::probe_result_path());
    how += ", written to " + rr::probe_result_path();
  }
  return rr::parse_chip(doc, "probe (quick)");
}

// Library errors name their arguments; these are the flags that fed them.
const ridge::cli::FlagNames kFlags = {{"out", "--out"}, {"path", "--results"}};

void run(const Opts& o) {
  using ridge::cli::with_flags;
  // Never write over an input.
  with_flags(kFlags, [&] { rp::check_plot_outputs(o.out, {o.hw, o.this_file, o.results}); });
  const auto gpu = with_flags(ridge::cli::chip_flags("--hw"), [&] { return rr::load_chip(o.hw); });
  // Every input is read before the probe runs: a bad file is one line, not a probe and then a line.
  auto measured = o.results.empty() ? std::vector<rp::MeasuredPoint>{}
                                    : with_flags(kFlags, [&] { return rp::read_measured(o.results); });
  std::string how;
  const auto me = this_machine(o, how);
  const auto ops = rp::standard_ops();
  if (!o.no_measure) {
    auto live = rp::measure_kernels(me, [](const std::string& line) { ridge::cli::say("report: ", line); });
    measured.insert(measured.end(), live.begin(), live.end());
  }

  auto r = rp::make_report(me, how, gpu, ops, std::move(measured));
  try {
    rp::add_plot(r, with_flags(kFlags, [&] { return rp::render_plot(r.spec, o.out); }));
  } catch (const ridge::Error& e) {
    rp::add_plot_error(r, e.what());
  }
  if (o.json) {
    ridge::cli::print_json(r.json);
    return;
  }
  fmt::print("{}", r.text);
}

void setup(CLI::App& root) {
  auto o = std::make_shared<Opts>();
  auto* c = root.add_subcommand("report",
                                "probe this machine, put its roofline beside a GPU's, bound the standard "
                                "shapes on both and draw the chart");
  c->add_option("--hw", o->hw, "the chip to compare with (id or chip JSON file)")->capture_default_str();
  c->add_option("--this", o->this_file, "use this chip file for the machine instead of probing");
  c->add_flag("--reuse-probe", o->reuse_probe, "use the existing probe result if there is one");
  c->add_option("--out", o->out, "plot path without extension (.png and .svg are written)")
      ->capture_default_str();
  c->add_option("--results", o->results, "JSON-lines benchmark rows to add as measured points");
  c->add_flag("--no-measure", o->no_measure, "skip the short live GEMM and attention runs");
  c->add_flag("--json", o->json, "print one JSON document");
  c->callback([o] { run(*o); });
}

}  // namespace

RIDGE_COMMAND(report, setup);
