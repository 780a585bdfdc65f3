// The step prediction: a Transformer LM step's time predicted from the roofline before it runs, and
// held against a recorded trace afterwards. What `ridge bench model --predict` prints.
//
//   T_predicted(op) = the op's roofline bound on the probed roofs / the efficiency of the op's class
//
// The efficiencies come from kernel benchmarks whose shapes no model preset uses (fit()), so the
// prediction is made before the model runs, not fitted to it. A recorded trace's time is attributed to
// the same kinds of work through the model's range table (ridge/model/ranges.hpp), and each kind's miss
// is explained from the case's shapes against the shapes the fit timed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ridge/model/config.hpp"
#include "ridge/model/model.hpp"
#include "ridge/model/roofline.hpp"
#include "ridge/roofline.hpp"

namespace ridge::predict {

// ---------------------------------------------------------------- op classes
// The class whose efficiency predicts `op` (one of roofline::model_step_ops) run at `precision`:
// "<prec> gemm <nt|nn|tn> <<2GF|>=2GF>" (layout from the op's name: " dW" tn, " dX" nn, else nt; size
// from its FLOPs), "<prec> grouped gemm <nt|nn|tn>" for the MoE experts' grouped GEMMs, "<prec> attention",
// "elementwise exp", "elementwise" or "optimizer", where <prec> is "bf16" for bf16 operands and "fp32"
// otherwise (fp16 is stored as fp32 on a CPU).
std::string op_class(const roofline::ModelOp& op, model::Precision precision);
// The routed experts' grouped GEMMs ("gemm experts ..."): E short GEMMs, one per expert, whose
// efficiency follows the rows each expert gets, not their summed size.
bool grouped_gemm(const roofline::ModelOp& op);
// The exp-heavy elementwise layers (SwiGLU's sigmoid, the loss's softmax): enough arithmetic per byte
// that a plain stream's efficiency overstates them, so they have a class of their own.
bool exp_heavy(const roofline::ModelOp& op);

// ---------------------------------------------------------------- efficiencies
// The classes fit() measures, as a number: 2 added the grouped GEMMs. A saved fit of another version is
// fitted again (its classes would be missing, and a missing class predicts at the bound).
inline constexpr int kFitVersion = 2;
struct Efficiencies {
  std::map<std::string, double> by_class;     // class -> roofline bound / measured time, (0, 1]
  std::map<std::string, std::string> shapes;  // class -> what was timed
  std::string chip;                           // the chip's id ("" when a file did not say)
  int threads = 0;                            // the thread count fitted at (0 when a file did not say)
  int64_t chip_file_mtime = 0;                // the chip file's modification time (efficiency_file_mtime)
  int version = kFitVersion;                  // which classes fit() measures (a saved older fit is redone)

  // The efficiency `op` runs at: its class's, an exp-heavy op without a class of its own the plain
  // stream's, and 1 (the bound itself) for a class the fit has no (positive) number for.
  double of(const roofline::ModelOp& op, model::Precision precision) const;
};

// Measures every class on this machine at the current thread count and bounds it on `chip`'s roofs.
// Takes seconds: a few kernels, three rounds each.
Efficiencies fit(const roofline::Chip& chip);

// The efficiency file (JSON): written atomically; read back, or ridge::Error naming the path for a
// file that is missing, not JSON, or not an efficiency file (no "chip_file_mtime", "efficiency" and
// "shapes", or an efficiency outside (0, 1]).
void write_efficiencies(const std::string& path, const Efficiencies& e);
Efficiencies read_efficiencies(const std::string& path);

// Where the fit for `chip_file` at `threads` threads is kept: beside it, "this.efficiency.t<threads>.json".
std::string efficiency_path(const std::string& chip_file, int threads);
// The stamp a fit carries of the chip file it was made against; ridge::Error naming `chip_file` when it
// cannot be read.
int64_t efficiency_file_mtime(const std::string& chip_file);

struct FitOptions {
  std::string chip_file;  // the chip file `chip` was loaded from (a fit is reused while it is unchanged)
  std::string path;       // the efficiency file: efficiency_path(chip_file, threads)
  bool refit = false;     // fit again even when `path` holds a fit for this chip file
};
// The fit saved at `options.path` when it was made against this chip file, else fit() now, saved there.
// A saved fit that is stale or damaged is made again; one that cannot be saved is still returned (and
// made again next time).
Efficiencies efficiencies(const roofline::Chip& chip, const FitOptions& options);

// ---------------------------------------------------------------- the prediction of a step
// One kind of work (gemm, attention, elementwise, optimizer): its summed roofline bound, the
// prediction, and once held against a trace the measured time.
struct KindCheck {
  double bound_ms = 0, predicted_ms = 0, measured_ms = 0;
  double error_pct() const {
    return measured_ms > 0 ? 100.0 * (predicted_ms - measured_ms) / measured_ms : 0;
  }
  double ran_eff() const { return measured_ms > 0 ? bound_ms / measured_ms : 0; }       // as it ran
  double fitted_eff() const { return predicted_ms > 0 ? bound_ms / predicted_ms : 0; }  // as fitted
};

struct StepPrediction {
  double bound_s = 0;                      // sum of the ops' roofline bounds (each run of each op)
  double bytes = 0;                        // bytes the ops move
  double predicted_s = 0;                  // the bounds, each over its class's efficiency
  std::map<std::string, KindCheck> kinds;  // per op kind: bound_ms and predicted_ms
};

// The ops of `step` in `passes` ("forward", "backward", "optimizer") predicted with `eff` at
// `precision`; without efficiencies (nullptr) every op runs at its bound.
StepPrediction predict_step(const model::StepRoofline& step, const std::vector<std::string>& passes,
                            model::Precision precision, const Efficiencies* eff);

// ---------------------------------------------------------------- a recorded trace, by kind
// Time (µs) of the ranges a trace recorded: total = the phase ranges (forward, backward, optimizer);
// by["gemm" | "attention" | "elementwise"] the leaf ranges of that kind in the model's range table,
// by["optimizer"] the optimizer range. A kind without a range in the trace has no entry. Blocks and
// communication hold no work of their own; ranges outside the table are not the model's.
struct TraceTimes {
  double total = 0;
  std::map<std::string, double> by;
};
// `trace_json`: a Chrome trace document (trace::to_json_text()); only ranges that start at or after the
// last event named `after_marker` count (all of them when there is none). ridge::Error naming
// `trace_json` when it is not a trace document.
TraceTimes trace_times(const std::string& trace_json, const std::string& after_marker);

// Percent of the total per kind, labelled as printed ("GEMMs", "attention", "elementwise",
// "optimizer"), and "other (residual adds, casts)" for the rest; empty when the total is 0.
std::map<std::string, double> trace_summary(const TraceTimes& t);
// Shares of the total per kind (gemm, attention, optimizer, and elementwise: everything else in the
// passes, as the analyzer counts it), summing to 1; empty when the total is 0.
std::map<std::string, double> kind_shares(const TraceTimes& t);

// ---------------------------------------------------------------- misses and their reasons
// A prediction held against a measured step.
struct PredictionCheck {
  double predicted_ms = 0, measured_ms = 0;
  std::map<std::string, KindCheck> kinds;
};
// `prediction` against the step's measured time `measured_s`, each kind measured as its share of it.
PredictionCheck check_prediction(const StepPrediction& prediction, double measured_s,
                                 const std::map<std::string, double>& shares);

// What the explanations name: the case and its shapes.
struct Case {
  std::string label;  // how the lines name the case ("tiny ctx=256 fp32 step")
  model::ModelConfig config;
  int64_t batch = 0, seq = 0;
  std::string attention;  // "flash" or "math"
};
// Why `kind`'s efficiency moved, from the case's shapes against the ones the fit timed.
std::string kind_hint(const std::string& kind, const Case& c, const KindCheck& k);
// One line for the step when it misses by more than `limit_pct` (naming the kind that carries most of the
// miss), and one per kind that misses by more.
std::vector<std::string> explain_misses(const Case& c, const PredictionCheck& p, double limit_pct);

}  // namespace ridge::predict
