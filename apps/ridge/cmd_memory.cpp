// `ridge memory show SNAPSHOT`: the peak and what was live at the peak, by tag.
// `ridge memory plot SNAPSHOT -o FILE.png`: the live-bytes timeline stacked by tag, peak marked
// (drawn by tools/plot_memory.py with matplotlib).
#include "ridge/build_paths.h"  // RIDGE_SOURCE_DIR, RIDGE_BINARY (generated)
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "cli.hpp"
#include "ridge/bench.hpp"
#include "ridge/core.hpp"
#include "core/check.hpp"
#include "core/json.hpp"

namespace {

using namespace ridge;
using units::format_bytes;

std::string bytes(int64_t b) {
  return format_bytes(static_cast<double>(b));
}

std::vector<std::pair<std::string, int64_t>> by_size(const std::map<std::string, int64_t>& m) {
  std::vector<std::pair<std::string, int64_t>> v(m.begin(), m.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return v;
}

void show(const std::string& path, bool json, int top) {
  const auto h = memory::load_snapshot(path);
  const auto tl = memory::replay(h);
  if (json) {
    nlohmann::json peak = nlohmann::json::object(), end = nlohmann::json::object();
    for (const auto& [k, v] : tl.live_at_peak) peak[k] = v;
    for (const auto& [k, v] : tl.live_at_end) end[k] = v;
    cli::print_json({{"snapshot", path},
                     {"events", h.events.size()},
                     {"allocs", tl.allocs},
                     {"frees", tl.frees},
                     {"dropped", h.dropped},
                     {"duration_s", static_cast<double>(h.now_ns - h.t0_ns) / 1e9},
                     {"start_bytes", tl.start_bytes},
                     {"peak_bytes", tl.peak_bytes},
                     {"peak_t_s", tl.peak_t_s},
                     {"live_at_peak", peak},
                     {"end_bytes", tl.end_bytes},
                     {"live_at_end", end},
                     {"peak_rss_bytes", h.peak_rss_bytes}});
    return;
  }
  fmt::print("snapshot  {}: {} events ({} allocs, {} frees), {} dropped, {:.3f} s recorded\n", path,
             h.events.size(), tl.allocs, tl.frees, h.dropped, static_cast<double>(h.now_ns - h.t0_ns) / 1e9);
  fmt::print("start     {} live when recording began\n", bytes(tl.start_bytes));
  fmt::print("peak      {} live at {:.3f} s (process peak RSS {}, all allocators)\n", bytes(tl.peak_bytes),
             tl.peak_t_s, bytes(h.peak_rss_bytes));
  const auto rows = by_size(tl.live_at_peak);
  size_t w = 3;
  for (const auto& [k, v] : rows) w = std::max(w, k.size());
  fmt::print("live at peak, by tag:\n");
  int shown = 0;
  int64_t rest = 0;
  for (const auto& [k, v] : rows) {
    if (top > 0 && shown >= top) {
      rest += v;
      continue;
    }
    ++shown;
    const double pct =
        tl.peak_bytes > 0 ? 100.0 * static_cast<double>(v) / static_cast<double>(tl.peak_bytes) : 0;
    fmt::print("  {:<{}}  {:>10}  {:5.1f}%\n", k, w, bytes(v), pct);
  }
  if (rest > 0) fmt::print("  {:<{}}  {:>10}\n", "(other tags)", w, bytes(rest));
  if (rows.empty()) fmt::print("  (nothing)\n");
  fmt::print("end       {} live when the snapshot was taken\n", bytes(tl.end_bytes));
}

void plot(const std::string& path, const std::string& out) {
  check(!out.empty(), "memory plot: -o FILE.png is required");
  namespace fs = std::filesystem;
  // The output path is checked before Python starts, so a typo gets one line, not a traceback.
  const fs::path o(out);
  const auto ext = o.extension().string();
  check(ext == ".png" || ext == ".svg" || ext == ".pdf", "-o: '{}' must end in .png, .svg or .pdf", out);
  const fs::path dir = o.has_parent_path() ? o.parent_path() : fs::path(".");
  std::error_code ec;
  check(fs::is_directory(dir, ec), "-o: folder '{}' does not exist", dir.string());
  check(::access(dir.c_str(), W_OK) == 0, "-o: folder '{}' is not writable", dir.string());
  check(!fs::exists(o, ec) || fs::is_regular_file(o, ec), "-o: '{}' exists and is not a regular file", out);
  memory::load_snapshot(path);  // validate first, so a bad file gets ridge's one-line error
  std::string script;
  const auto tools = ridge::env::text("RIDGE_TOOLS_DIR");
  if (!tools.empty())
    script = tools + "/plot_memory.py";
  else
    script = std::string(RIDGE_SOURCE_DIR) + "/tools/plot_memory.py";
  // The error_code form: a RIDGE_TOOLS_DIR whose name is too long (or unreadable) is the same one line,
  // not a filesystem_error (the harness: "internal error: ... File name too long").
  check(fs::is_regular_file(script, ec),
        "memory plot: cannot find {}{} (set RIDGE_TOOLS_DIR to ridge's tools/ folder)",
        tools.empty() ? script : "RIDGE_TOOLS_DIR's plot_memory.py, '" + script + "'",
        ec ? fmt::format(": {}", ec.message()) : std::string());
  // scripts/setup installs matplotlib as a Debian package, i.e. for /usr/bin/python3, which a
  // pyenv or venv python3 earlier on PATH would not see. RIDGE_PYTHON overrides.
  std::string python = "python3";
  if (const auto p = ridge::env::text("RIDGE_PYTHON"); !p.empty())
    python = p;
  else if (fs::exists("/usr/bin/python3"))
    python = "/usr/bin/python3";
  const auto r = process::run({python, script, path, "-o", out});
  check(r.started,
        "memory plot: cannot run '{}' (needs python3 with matplotlib: scripts/setup installs it; or set "
        "RIDGE_PYTHON)",
        python);
  check(r.exit_code == 0, "memory plot: {} failed: {}", script, process::last_line(r.output));
  fmt::print("wrote {}\n", out);
}

void setup(CLI::App& root) {
  auto* cmd =
      root.add_subcommand("memory", "inspect memory snapshots (write one with 'ridge bench ... --memory F')");
  cmd->require_subcommand(1);
  static std::string show_path, plot_path, plot_out;
  static bool json = false;
  static int top = 0;
  auto* s = cmd->add_subcommand("show", "the peak and what was live at the peak, by tag");
  s->add_option("snapshot", show_path, "snapshot JSON file")->required();
  s->add_flag("--json", json, "print one JSON document");
  s->add_option("--top", top, "show only the N largest tags (0: all)")
      ->transform(cli::integer_in(0, std::numeric_limits<int>::max()));
  s->callback([] { show(show_path, json, top); });
  auto* p = cmd->add_subcommand("plot", "live bytes over time, stacked by tag, peak marked (PNG)");
  p->add_option("snapshot", plot_path, "snapshot JSON file")->required();
  p->add_option("-o,--output", plot_out, "output image (.png, .svg, .pdf)")->required();
  p->callback([] { plot(plot_path, plot_out); });
}

}  // namespace

RIDGE_COMMAND(memory, setup);
