// `ridge bench NAME`: runs a registered benchmark (bench/*.cpp) over a sweep and prints its rows as
// a table, JSON lines or CSV; `--trace` and `--memory` record a trace and a memory snapshot of any
// benchmark. `ridge bench list` shows what is registered.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <utility>
#include <optional>

#include "cli.hpp"
#include "ridge/bench.hpp"
#include "ridge/core.hpp"
#include "report/report.hpp"
#include "core/check.hpp"
#include "bench/registry.hpp"
#include "core/json.hpp"

namespace {

using namespace ridge;

constexpr int kIntMax = std::numeric_limits<int>::max();

struct Common {
  std::vector<std::string> set;
  std::string grid_file;
  bool quick = false;
  std::optional<int> threads;
  bool json = false, csv = false;
  std::string trace_file, memory_file;
  int64_t memory_entries = 1'000'000;
  std::optional<int> warmup, iters;
  std::optional<double> min_time, max_time;
  bool no_progress = false;
};
Common g;  // one benchmark runs per process, so its subcommands share one set of values

void add_common(CLI::App* cmd) {
  cmd->add_option("--set,--grid", g.set,
                  "sweep axis key=v1,v2,... (repeatable), e.g. --set n=1M,16M --set kernel=triad");
  cmd->add_option("--grid-file", g.grid_file, "JSON file {\"key\": [values], ...}; --set overrides its axes");
  cmd->add_flag("--quick", g.quick, "a short sweep that still runs every path");
  cmd->add_option("--threads", g.threads, "threads for ridge kernels (default: OMP_NUM_THREADS or all CPUs)")
      ->transform(cli::integer_in(1, env::kMaxThreads));
  cmd->add_flag("--json", g.json, "one JSON object per result row (JSON lines)");
  cmd->add_flag("--csv", g.csv, "CSV with a header row");
  cmd->add_option("--trace", g.trace_file, "write a Chrome trace (Perfetto, chrome://tracing) to FILE");
  cmd->add_option("--memory", g.memory_file, "write a memory snapshot to FILE (see 'ridge memory show')");
  cmd->add_option("--memory-entries", g.memory_entries, "allocation events kept by --memory (newest)")
      ->transform(cli::integer_in(1, int64_t{1} << 30));
  cmd->add_option("--warmup", g.warmup, "untimed calls before timing (benchmark default if unset)")
      ->transform(cli::integer_in(0, kIntMax));
  cmd->add_option("--iters", g.iters, "minimum timed calls per case")->transform(cli::integer_in(1, kIntMax));
  // An hour bounds a case's timing: past it a typo (1e9) would run until killed.
  cmd->add_option("--min-time", g.min_time, "minimum timed seconds per case (0 .. 3600)")
      ->transform(cli::number_in(0, 3600));
  cmd->add_option("--max-time", g.max_time, "stop timing a case after this many seconds (0 .. 3600)")
      ->transform(cli::number_in(0, 3600));
  cmd->add_flag("--no-progress", g.no_progress, "no progress lines on stderr");
}

// Every file a benchmark's options name (--grid-file, --shapes, ...): an output must not be one of
// them. Read from the parsed options, so an option a benchmark adds later is covered too.
std::vector<std::string> input_files(const CLI::App& sub) {
  std::vector<std::string> files;
  for (const CLI::Option* opt : sub.get_options()) {
    if (opt->check_name("--trace") || opt->check_name("--memory") || opt->count() == 0) continue;
    for (const auto& v : opt->results()) {
      std::error_code ec;
      if (!v.empty() && std::filesystem::exists(v, ec)) files.push_back(v);
    }
  }
  return files;
}

void run(const std::string& name, const std::vector<std::string>& inputs) {
  const auto& b = bench::find_benchmark(name);
  check(!(g.json && g.csv), "bench: --json and --csv are exclusive; choose one");
  if (g.threads) set_num_threads(*g.threads);
  bench::Grid grid;
  if (!g.grid_file.empty())
    grid = cli::with_flags({{"path", "--grid-file"}}, [] { return bench::Grid::from_file(g.grid_file); });
  grid.merge(bench::Grid::parse(g.set));

  bench::Options opt;
  if (g.quick) {
    opt.warmup = 1;
    opt.iters = 3;
  }
  if (g.warmup) opt.warmup = *g.warmup;
  if (g.iters) opt.iters = *g.iters;
  if (g.min_time) opt.min_time_s = *g.min_time;
  if (g.max_time) opt.max_time_s = *g.max_time;

  // Check the output files before the run, so a bad path fails in a second, not after the sweep;
  // without opening them: a run that fails must leave the user's old file as it was.
  for (const auto& [file, flag] :
       {std::pair{g.trace_file, "--trace"}, std::pair{g.memory_file, "--memory"}}) {
    if (file.empty()) continue;
    files::check_writable(file, flag);
    files::check_not_an_input(file, inputs, flag);
  }
  check(g.trace_file.empty() || !files::same_file(g.trace_file, g.memory_file),
        "--trace and --memory: both name '{}'; give each its own file", g.trace_file);

  const auto format = g.json ? bench::Format::json : g.csv ? bench::Format::csv : bench::Format::table;
  // Rows are held against this machine's probe result, looked for when the first row (or a
  // benchmark that wants the roofline) asks: bench itself reads no probe file.
  bench::Sink sink(format, stdout, report::hold_rows_against(report::probed_chip));
  bench::Progress progress(!g.no_progress);
  bench::Context ctx(b.name, sink, progress);
  ctx.find_chip = report::probed_chip;
  ctx.grid = grid;
  ctx.quick = g.quick;
  ctx.threads = get_num_threads();
  ctx.options = opt;
  ctx.warmup_given = g.warmup.has_value();
  ctx.trace_file = g.trace_file;
  // Under mpirun every rank must run the same sweep with the same options (--threads is each rank's own);
  // the sweep is compared axis by axis, whether it came from --set or --grid-file.
  ctx.fingerprint = cli::command_line_fingerprint({"--threads", "--set", "--grid-file"});
  for (const auto& [key, values] : grid.axes()) {
    std::string v;
    for (const auto& x : values) v += (v.empty() ? "" : ",") + x;
    ctx.fingerprint.emplace_back("--set " + key, "'" + v + "'");
  }

  if (!g.trace_file.empty()) {
    trace::set_thread_name("main");
    trace::start_recording();
  }
  if (!g.memory_file.empty()) memory::record_history(static_cast<size_t>(g.memory_entries));
  {
    RIDGE_RANGE("bench " + b.name);
    b.run(ctx);
  }
  progress.finish();
  sink.finish();
  if (!g.memory_file.empty()) {
    memory::dump_snapshot(g.memory_file);
    const auto tl = memory::replay(memory::history());
    memory::stop_recording();
    fmt::print(stderr,
               "memory: peak {} live through ridge's allocator ({} allocations), process peak RSS {} -> {}\n",
               units::format_bytes(static_cast<double>(tl.peak_bytes)), tl.allocs,
               units::format_bytes(static_cast<double>(memory::peak_rss_bytes())), g.memory_file);
  }
  if (!g.trace_file.empty() && ctx.trace_written) {
    trace::stop_recording();
  } else if (!g.trace_file.empty()) {
    trace::stop_recording();
    trace::write(g.trace_file);
    fmt::print(stderr, "trace: {} events -> {} (open in https://ui.perfetto.dev or chrome://tracing)\n",
               trace::event_count(), g.trace_file);
  }
}

void setup(CLI::App& root) {
  auto* cmd = root.add_subcommand("bench", "run a benchmark over a sweep: table, JSON lines or CSV");
  cmd->require_subcommand(1);
  static bool list_json = false;
  auto* list = cmd->add_subcommand("list", "the registered benchmarks");
  list->add_flag("--json", list_json, "print one JSON document");
  list->callback([] {
    const auto all = bench::benchmarks();
    if (list_json) {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& b : all) j.push_back({{"name", b.name}, {"description", b.description}});
      cli::print_json(j);
      return;
    }
    size_t w = 4;
    for (const auto& b : all) w = std::max(w, b.name.size());
    for (const auto& b : all) fmt::print("{:<{}}  {}\n", b.name, w, b.description);
  });
  for (const auto& b : bench::benchmarks()) {
    auto* sub = cmd->add_subcommand(b.name, b.description);
    add_common(sub);
    if (b.add_options) b.add_options(*sub);
    const std::string name = b.name;
    // The sweep grid's errors are about its items and axes ("grid n"); the user typed --set.
    sub->callback([name, sub] {
      cli::with_flags({{"items", "--set"}, {"grid", "--set"}}, [&] { run(name, input_files(*sub)); });
    });
  }
}

}  // namespace

RIDGE_COMMAND(bench, setup);
