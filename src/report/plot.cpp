// The roofline chart: the spec tools/plot_roofline.py draws, and running it (python3 with
// matplotlib, found and started through core/process.hpp, never a shell).
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "core/check.hpp"
#include "ridge/build_paths.h"  // RIDGE_SOURCE_DIR (generated)
#include "ridge/core/env.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/files.hpp"
#include "ridge/core/process.hpp"
#include "report/report.hpp"

namespace ridge::report {
namespace fs = std::filesystem;

nlohmann::json plot_spec(const std::vector<Chip>& chips, const std::vector<NamedCost>& ops,
                         const std::vector<MeasuredPoint>& measured, const std::string& title) {
  nlohmann::json spec;
  spec["title"] = title;
  spec["roofs"] = nlohmann::json::array();
  for (const auto& c : chips) {
    for (const auto& [dt, pk] : c.peak_flops) {
      for (const auto& m : c.memory)
        spec["roofs"].push_back({{"chip", c.id},
                                 {"chip_name", c.name},
                                 {"dtype", dt},
                                 {"level", m.level},
                                 {"peak_flops", pk.value},
                                 {"bandwidth", m.bandwidth.value}});
    }
  }
  spec["points"] = nlohmann::json::array();
  for (const auto& c : chips)
    for (const auto& o : ops) {
      if (!c.has_peak(o.cost.compute) || o.cost.memory.empty()) continue;
      const auto b = roofline::bound(o.cost, c);
      spec["points"].push_back({{"chip", c.id},
                                {"group", o.group},
                                {"label", o.label},
                                {"dtype", o.cost.compute},
                                {"intensity", b.intensity},
                                {"flops_per_s", b.attainable_flops},
                                {"binding", b.binding},
                                {"kind", "predicted"}});
    }
  // Measured points are numbered from 1 in the order given: the report's table has the same numbers.
  int num = 0;
  for (const auto& m : measured)
    spec["points"].push_back({{"chip", "measured"},
                              {"group", m.benchmark},
                              {"label", m.label},
                              {"dtype", m.dtype},
                              {"intensity", m.intensity},
                              {"flops_per_s", m.gflops * 1e9},
                              {"kind", "measured"},
                              {"num", ++num},
                              {"cache", m.cache},
                              {"above_roof", m.above_roof}});
  return spec;
}

namespace {

std::string find_plot_script() {
  std::vector<fs::path> c;
  if (auto d = env::text("RIDGE_TOOLS_DIR"); !d.empty()) c.emplace_back(fs::path(d) / "plot_roofline.py");
#ifdef RIDGE_SOURCE_DIR
  c.emplace_back(fs::path(RIDGE_SOURCE_DIR) / "tools" / "plot_roofline.py");
#endif
  c.emplace_back("tools/plot_roofline.py");
  for (const auto& p : c) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  fail("plot: tools/plot_roofline.py not found (set RIDGE_TOOLS_DIR to the folder that holds it)");
}

// The first python3 that can import matplotlib: $RIDGE_PYTHON, each python3 on PATH, then the
// system one (a pyenv or venv python3 early on PATH often lacks the Debian matplotlib).
std::string find_python() {
  std::vector<std::string> candidates;
  if (auto p = env::text("RIDGE_PYTHON"); !p.empty()) candidates.push_back(p);
  std::stringstream ss(env::text("PATH"));
  std::string d;
  while (std::getline(ss, d, ':'))
    if (!d.empty()) candidates.push_back((fs::path(d) / "python3").string());
  candidates.push_back("/usr/bin/python3");
  bool any = false;
  for (const auto& c : candidates) {
    std::error_code ec;
    if (!fs::is_regular_file(c, ec)) continue;
    any = true;
    if (process::run({c, "-c", "import matplotlib"}).exit_code == 0) return c;
  }
  if (!any) fail("plot: python3 not found (install python3 and python3-matplotlib, or set RIDGE_PYTHON)");
  fail(
      "plot: matplotlib is missing for every python3 found (Debian: apt-get install python3-matplotlib; "
      "or pip install matplotlib; or set RIDGE_PYTHON to a python3 that has it)");
}

}  // namespace

std::vector<std::string> plot_outputs(const std::string& out) {
  check_arg(!out.empty(), "out", "empty path");
  fs::path base(out);
  if (base.extension() == ".png" || base.extension() == ".svg") base.replace_extension();
  return {base.string() + ".png", base.string() + ".svg", base.string() + ".json"};
}

void check_plot_outputs(const std::string& out, const std::vector<std::string>& inputs) {
  for (const auto& f : plot_outputs(out)) files::check_not_an_input(f, inputs, "out");
}

void check_plot_names(const std::string& out) {
  for (const auto& f : plot_outputs(out))
    for (const auto& part : fs::path(f))
      check_arg(part.native().size() <= 255, "out",
                "'{}' has a name longer than 255 bytes, which no file can have",
                out.size() > 40 ? out.substr(0, 40) + "..." : out);
}

std::vector<std::string> render_plot(const nlohmann::json& spec, const std::string& out) {
  const auto outputs = plot_outputs(out);
  const fs::path base = fs::path(outputs[0]).replace_extension();
  std::error_code ec;
  if (base.has_parent_path()) fs::create_directories(base.parent_path(), ec);
  for (const auto& f : outputs) files::check_writable(f, "out");
  const std::string spec_path = outputs[2];
  // Python reads a private copy; out.json itself is replaced only after the plot succeeded.
  std::string tmp_spec = (fs::temp_directory_path() / "ridge-plot-spec.XXXXXX").string();
  {
    const int fd = ::mkstemp(tmp_spec.data());
    if (fd < 0) fail("plot: cannot create a temporary file in {}", fs::temp_directory_path().string());
    ::close(fd);
  }
  struct Remove {
    std::string p;
    ~Remove() { std::remove(p.c_str()); }
  } remove_tmp{tmp_spec};
  const std::string spec_text = spec.dump(1) + "\n";
  files::write_text(tmp_spec, spec_text, "plot");
  const auto r = process::run({find_python(), find_plot_script(), tmp_spec, base.string()});
  if (!r.started) fail("plot: cannot start python3");
  if (r.exit_code != 0) fail("plot: {}", process::last_line(r.output));
  files::write_text(spec_path, spec_text, "out");
  return outputs;
}

}  // namespace ridge::report
