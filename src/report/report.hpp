// ridge report: the layer that joins measurements, chips and plots. roofline is arithmetic on
// figures it is given and bench measures and prints rows; everything that puts the two together
// lives here: the roof a measured row is held against, this machine's probe result, the standard
// benchmark shapes of bench/shapes/, benchmark rows read back as points, the plot (Python through a
// subprocess, never a shell) and the tables of `ridge report`. docs/report.md says who calls what.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/result.hpp"
#include "ridge/roofline.hpp"

namespace ridge::report {

using roofline::Chip;

// ---------------------------------------------------------------------------------------------
// The roof a measurement is held against.

// The memory level a measurement is held against: the outermost for "cold" (and unstated) rows;
// for "warm" rows, the innermost level whose capacity holds the working set, else the outermost.
// "" for a chip without memory levels.
std::string memory_level_for(const Chip& chip, const std::string& cache, double working_set_bytes);

// A point more than this fraction above its roof is flagged (timing noise stays below it).
inline constexpr double kAboveRoofTolerance = bench::Row::kAboveRoofTolerance;

// Fills a bench row's bound fields from `chip`: bound_level (kept when the benchmark set it, else
// memory_level_for(chip, cache, bytes)), bound_gbps, and for rows with flops bound_gflops =
// min(peak(dtype), flops / bytes x bandwidth) (kept when the benchmark chose its own compute roof)
// and pct_of_bound. False when the chip gives the row no bound.
bool hold_row(bench::Row& row, const Chip& chip);
// hold_row for an fp8 GEMM row: the compute roof is the chip's fp8 peak, or its bf16 peak when it
// has no fp8 arithmetic (the fp8 GEMM then runs on the bf16 units), or its fp32 peak when it has
// neither (AVX2: widened to fp32 FMA; bf16 rows likewise); extra["compute_roof"] says
// which. A chip without either peak or memory levels leaves the row without a bound.
void hold_fp8_row(bench::Row& row, const Chip& chip);
// Where a chip comes from when it is wanted: probed_chip, or a lambda returning a chip the caller holds.
using ChipSource = std::function<const Chip*()>;
// A bench::Sink row hook that holds every row against chip(), asked at each row (nothing when it
// gives null). The chip must outlive the sink.
bench::RowHook hold_rows_against(ChipSource chip);

// This machine's probe result (`ridge probe`, roofline::probe_result_path()), loaded once per
// process; nullptr when there is none. A probe file that cannot be read or parsed gives one warning
// line on stderr naming it, not silence, and then counts as none.
const Chip* probed_chip();

// ---------------------------------------------------------------------------------------------
// The standard benchmark shapes.

// An operation with a label and a group ("dense", "decode", "attention-flash", ...), for reports.
struct NamedCost {
  std::string group;
  std::string label;
  roofline::Cost cost;
};
// The benchmark shapes of bench/shapes/ (gemm-shapes.json and attention-shapes.json, copied from
// the project's shared benchmark list) as bf16 costs: dense and decode GEMMs D[m,n] = A[m,k]B[n,k]^T,
// the M-grouped MoE GEMMs, naive attention (head_dim 64), flash attention (bf16, head_dim 64,
// causal) and the forward+backward leaderboard shape. `dir` empty = shapes_location().
std::vector<NamedCost> standard_ops(const std::string& dir = "");
// $RIDGE_SHAPES_DIR, the source tree's bench/shapes, or ./bench/shapes: the first that holds
// gemm-shapes.json; ridge::Error saying to set RIDGE_SHAPES_DIR when none does.
std::string shapes_location();

// ---------------------------------------------------------------------------------------------
// Measured points: benchmark rows placed on a roofline.

struct MeasuredPoint {
  std::string label;  // "gemm m=128 n=7168 k=2048"
  std::string benchmark, dtype;
  nlohmann::json case_;
  double gflops = 0;       // achieved GFLOP/s
  double intensity = 0;    // FLOPs per byte
  std::string cache;       // the row's "cache" ("cold", "warm" or "")
  double working_set = 0;  // the row's "bytes"; 0 when absent
  // Filled by hold_against: the roof at this point's intensity on a chip, and whether the point
  // lies above it.
  double bound_flops = 0, pct_of_bound = 0;
  std::string roof_dtype, bound_level;
  bool above_roof = false;
};

// Holds a measured point against `chip`: the compute roof of its dtype (fp8 on a chip without fp8
// arithmetic runs on the bf16 units, so bf16), the memory level memory_level_for picks, bound =
// min(peak, intensity x bandwidth), and above_roof when achieved > bound x (1 + kAboveRoofTolerance).
// A dtype the chip has no peak for leaves bound_flops 0.
void hold_against(MeasuredPoint& p, const Chip& chip);
// Reads a JSON-lines results file (rows of the bench result schema: benchmark, case, dtype, gflops,
// and flops + bytes or intensity); skips rows without gflops (pure bandwidth rows). Errors are about
// the argument `path` and name the file and the line.
std::vector<MeasuredPoint> read_measured(const std::string& path);
// The same for rows in memory (a live run's bench::Sink::rows()); rows without flops are skipped.
std::vector<MeasuredPoint> measured_points(const std::vector<bench::Row>& rows);

// ---------------------------------------------------------------------------------------------
// The plot.

// The JSON document tools/plot_roofline.py draws: roofs (per chip, dtype and memory level),
// predicted points (each op on each chip at min(peak, I * bw)) and measured points, numbered from 1
// in the order given.
nlohmann::json plot_spec(const std::vector<Chip>& chips, const std::vector<NamedCost>& ops,
                         const std::vector<MeasuredPoint>& measured, const std::string& title);
// Writes `spec` beside `out` and runs tools/plot_roofline.py (found through $RIDGE_TOOLS_DIR or the
// source tree) with the first python3 that has matplotlib ($RIDGE_PYTHON, PATH, /usr/bin), producing
// out.png and out.svg (`out` without extension). Returns the paths written. Errors about the output
// path are about the argument `out`; a missing python3 or matplotlib is a ridge::Error naming what to
// install. The spec is written (through ridge::files) only once the plot succeeded: a failed plot
// leaves an old out.json as it was.
std::vector<std::string> render_plot(const nlohmann::json& spec, const std::string& out);
// The files render_plot(spec, out) writes: out.png, out.svg, out.json (".png"/".svg" on `out` dropped).
std::vector<std::string> plot_outputs(const std::string& out);
// ridge::Error about the argument `out` when a file the plot writes is one of `inputs`.
void check_plot_outputs(const std::string& out, const std::vector<std::string>& inputs);
// ridge::Error about `out` when a file the plot writes has a name longer than NAME_MAX (255 bytes):
// `roofline plot` checks it before plotting (`report` notes a plot it could not write instead).
void check_plot_names(const std::string& out);

// ---------------------------------------------------------------------------------------------
// `ridge report`: this machine beside a GPU.

// A short live run of the registered GEMM and attention benchmarks (no peers, a few iterations;
// well under a minute) with `chip` as the benchmarks' chip and each row's bound, as measured points.
// `progress` gets one line per run ("measuring gemm set=dense ...").
std::vector<MeasuredPoint> measure_kernels(const Chip& chip,
                                           const std::function<void(const std::string&)>& progress = {});

struct Report {
  nlohmann::json json;  // this, this_source, gpu, this_key, shapes, measured, roofs (+ plot)
  std::string text;     // what `ridge report` prints (+ the plot line)
  nlohmann::json spec;  // plot_spec of both chips, the shapes and the points, for render_plot
};
// Joins this machine's chip (`me`, found as `how` says), a GPU's, the standard shapes and the
// measured points: both chips' figures, every shape's bound on both, and the points held against
// `me` (hold_against). The caller draws r.spec with render_plot and then adds the outcome.
Report make_report(const Chip& me, const std::string& how, const Chip& gpu, const std::vector<NamedCost>& ops,
                   std::vector<MeasuredPoint> measured);
// The plot's files (render_plot's result) into the JSON and the text's last line.
void add_plot(Report& r, const std::vector<std::string>& files);
// Why the plot is missing (a python3 without matplotlib, say): the numbers stand without it.
void add_plot_error(Report& r, const std::string& why);

}  // namespace ridge::report
