// Named benchmarks that `ridge bench NAME` runs over a sweep grid. A benchmark file in bench/
// registers itself at static-initialisation time:
//
//   void run_stream(ridge::bench::Context& ctx) {
//     for (int64_t n : ctx.grid.counts("n", {1 << 20, 1 << 24})) { ...; ctx.emit(row); ctx.progress.tick(); }
//   }
//   RIDGE_BENCHMARK(stream, "stream", "STREAM copy/scale/add/triad over array sizes", run_stream);
//
// A benchmark with its own flags passes a fifth argument, a function that adds them to its CLI11
// subcommand (keep the values in statics of the benchmark file, the way apps/ridge commands do):
//
//   void gemm_options(CLI::App& app) { app.add_option("--dtype", g_dtype, "fp32|bf16|fp8"); }
//   RIDGE_BENCHMARK(gemm, "gemm", "GEMM against OpenBLAS and oneDNN", run_gemm, gemm_options);
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ridge/bench/measure.hpp"
#include "bench/result.hpp"
#include "core/json.hpp"

namespace CLI {
class App;
}

namespace ridge::roofline {
struct Chip;  // bench only passes it on: the caller (the CLI) finds it, the benchmark reads it
}

namespace ridge::bench {

// A sweep: named axes, each with a list of values, in the order given. On the command line:
// `--set n=1M,4M,16M --set kernel=copy,triad` (repeatable; `--grid` is the same flag); in a JSON
// file (`--grid-file F`): {"n": ["1M", "4M"], "kernel": "copy"} (a scalar is a one-value axis).
// Errors are about arguments (ridge::Error::argument): parse's "items", from_file's "path" (from_json's
// `origin`), and "grid KEY" for a bad value of an axis; the CLI names its flags in their place.
class Grid {
 public:
  Grid() = default;
  // "key=v1,v2,..." items; a repeated key replaces the earlier one. ridge::Error on bad syntax.
  static Grid parse(const std::vector<std::string>& items);
  static Grid from_json(const nlohmann::json& doc, const std::string& origin);
  static Grid from_file(const std::string& path);
  // Axes of `other` replace or extend this grid's.
  void merge(const Grid& other);

  bool has(const std::string& key) const;
  bool empty() const { return axes_.empty(); }
  // Raw values of an axis, or `fallback` when the grid does not set it.
  std::vector<std::string> values(const std::string& key, std::vector<std::string> fallback = {}) const;
  // Values parsed as counts ("4096", "4k", "1M" = 2^20: numbers::kCount), byte sizes ("64KiB", "1GB",
  // numbers::parse_bytes) or reals ("0.5", "1e-3"; numbers::parse_real);
  // ridge::Error naming the axis on a bad value.
  std::vector<int64_t> counts(const std::string& key, std::vector<int64_t> fallback = {}) const;
  std::vector<int64_t> bytes(const std::string& key, std::vector<int64_t> fallback = {}) const;
  std::vector<double> numbers(const std::string& key, std::vector<double> fallback = {}) const;
  // Values parsed as on/off switches: 1, true, on, yes or 0, false, off, no (any case).
  std::vector<bool> switches(const std::string& key, std::vector<bool> fallback = {}) const;
  // ridge::Error naming the first axis not in `known` and listing the known ones, so a typo in
  // --set is reported instead of silently ignored.
  void check_keys(const std::vector<std::string>& known, const std::string& benchmark) const;
  // Every combination of the axes (the last axis varies fastest), each as a JSON object of strings.
  std::vector<nlohmann::json> cases() const;
  const std::vector<std::pair<std::string, std::vector<std::string>>>& axes() const { return axes_; }
  nlohmann::json to_json() const;

 private:
  std::vector<std::pair<std::string, std::vector<std::string>>> axes_;
};

// Progress of a sweep on stderr: "[3/12] 4.1 s elapsed, ~12 s left: stream n=4M". Silent until
// the sweep has run for `quiet_s` seconds, so short runs print nothing; rewrites one line on a
// terminal and prints whole lines otherwise.
class Progress {
 public:
  explicit Progress(bool enabled = true, double quiet_s = 1.0);
  ~Progress();
  void start(size_t total);     // total 0: unknown (no ETA)
  void add_total(size_t more);  // when the sweep grows as it goes
  void tick(const std::string& what = "");
  void finish();
  size_t done() const { return done_; }
  size_t total() const { return total_; }

 private:
  bool enabled_, tty_, printed_ = false;
  double quiet_s_;
  size_t total_ = 0, done_ = 0;
  std::chrono::steady_clock::time_point t0_;
};

// What a benchmark's run function gets.
struct Context {
  std::string benchmark;  // the registered name
  Grid grid;              // the sweep asked for (empty: the benchmark's defaults)
  bool quick = false;     // --quick: a short sweep that still exercises every path
  int threads = 1;        // ridge::get_num_threads() after --threads was applied
  Options options;        // measure() options from --warmup/--iters/--min-time/--max-time
  // True when --warmup was given: a benchmark whose own default differs from Options' (CS336's 5 steps
  // for the model) applies it only when this is false, so an explicit value is always the one used.
  bool warmup_given = false;
  // This machine's roofline as the caller finds it (`ridge bench` passes report::probed_chip, asked
  // only when a benchmark wants it); unset or null when there is none. A benchmark that picks its
  // own roof (fp8 on the bf16 units) or prints a % of peak reads chip(), never a file.
  std::function<const roofline::Chip*()> find_chip;
  Sink& sink;
  Progress& progress;
  // The --trace file ("" when not tracing; recording is already on). A benchmark that writes the trace
  // itself (several MPI ranks merged into one file) sets trace_written and `ridge bench` leaves it be.
  std::string trace_file;
  bool trace_written = false;
  // What every rank of an MPI benchmark must be given alike (the CLI's command line as typed, the sweep
  // axis by axis as "--set KEY"): the benchmark passes it to distributed::agree_to_start before its first
  // collective. {name, value} pairs, as distributed::Fingerprint.
  std::vector<std::pair<std::string, std::string>> fingerprint;

  Context(std::string name, Sink& s, Progress& p) : benchmark(std::move(name)), sink(s), progress(p) {}
  // Sets row.benchmark when empty, then hands the row to the sink.
  void emit(Row row);
  const roofline::Chip* chip() const { return find_chip ? find_chip() : nullptr; }
};

using RunFn = void (*)(Context&);
using OptionsFn = void (*)(CLI::App&);

struct Benchmark {
  std::string name, description;
  RunFn run = nullptr;
  OptionsFn add_options = nullptr;  // may be null
};

// Sorted by name.
std::vector<Benchmark> benchmarks();
// ridge::Error listing the registered names when absent.
const Benchmark& find_benchmark(const std::string& name);
void register_benchmark(Benchmark b);

struct Registrar {
  Registrar(const char* name, const char* description, RunFn run, OptionsFn add_options = nullptr) {
    register_benchmark(Benchmark{name, description, run, add_options});
  }
};

}  // namespace ridge::bench

#define RIDGE_BENCHMARK(id, name, description, ...) \
  static const ::ridge::bench::Registrar ridge_benchmark_registration_##id(name, description, __VA_ARGS__)
