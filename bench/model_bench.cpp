// `ridge bench model`: the CS336 Transformer LM's forward, forward+backward and full training step
// (CS336's protocol: w warm-up steps, n timed steps, mean, std and median), tokens/s and model FLOPs
// utilisation against the probed peak, PyTorch on the same model, weights, batch, threads and precision
// in the same run (tools/torch_model_peer.py; eager and torch.compile), and with --predict the step
// time predicted from the roofline before it is measured.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "model/fused.hpp"
#include "model/linear.hpp"
#include "ridge/attention.hpp"
#include "ridge/bench.hpp"
#include "ridge/build_paths.h"  // RIDGE_SOURCE_DIR (generated)
#include "ridge/core.hpp"
#include "ridge/model/model.hpp"
#include "ridge/model/optim.hpp"
#include "ridge/model/roofline.hpp"
#include "ridge/model/safetensors.hpp"
#include "ridge/model/train.hpp"
#include "ridge/roofline.hpp"
#include "core/check.hpp"
#include "bench/registry.hpp"
#include "roofline/json.hpp"
#include "model/json.hpp"
#include "bench/json.hpp"

namespace ridge {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

bool g_no_torch = false, g_no_compile = false, g_predict = false, g_refit = false;
std::string g_python = "python3";
int64_t g_vocab = 10000;

// ---------------------------------------------------------------- efficiencies (--predict)
// T_predicted(op) = roofline bound on the probed roofs / efficiency of the op's class. The
// efficiencies come from kernel benchmarks whose shapes no model size here uses, so the prediction
// is made before the model runs, not fitted to it.
struct Efficiency {
  std::map<std::string, double> eff;  // class -> measured / bound, (0, 1]
  json shapes = json::object();       // class -> what was timed
  std::string path;
};

std::string gemm_class(const roofline::ModelOp& op) {
  const bool dw = op.name.find(" dW") != std::string::npos, dx = op.name.find(" dX") != std::string::npos;
  const std::string layout = dw ? "tn" : dx ? "nn" : "nt";
  return fmt::format("gemm {} {}", layout, op.cost.flops < 2e9L ? "<2GF" : ">=2GF");
}
// The exp-heavy elementwise layers (SwiGLU's sigmoid, the loss's softmax) do enough arithmetic per byte
// that a plain stream's efficiency overstates them: they get a class of their own.
bool exp_heavy(const roofline::ModelOp& op) {
  return op.kind == "elementwise" && (op.name.rfind("swiglu", 0) == 0 || op.name.rfind("loss", 0) == 0);
}
std::string op_class(const roofline::ModelOp& op, const std::string& precision) {
  if (op.kind == "gemm") return precision + " " + gemm_class(op);
  if (op.kind == "attention") return precision + " attention";
  if (exp_heavy(op)) return "elementwise exp";
  return op.kind;  // elementwise, optimizer: fp32 streams whatever the precision
}

// The lowest of three rounds' medians: this VM sometimes stalls a 2-thread kernel of a few ms to a
// near-constant 8 ms for a whole round, and an efficiency is the rate the kernel runs at unstalled (the
// model's steps, hundreds of ms each, average such stalls out).
double time_ms(const std::function<void()>& fn) {
  bench::Options o;
  o.warmup = 2;
  o.iters = 5;
  double best = std::numeric_limits<double>::infinity();
  for (int round = 0; round < 3; ++round) best = std::min(best, bench::measure(fn, o).median_ms());
  return best;
}

template <typename O>
void fit_gemms(const roofline::Chip& chip, const std::string& prec, Efficiency& e) {
  // Shapes in the model's aspect that no preset produces: 1536 tokens (batch 4 x context 384; the
  // presets' contexts are powers of two), a d_model-like side of 640, a d_ff-like side of 2816 and an
  // lm_head-like 12000, each layout the way the model calls it (nt: Y = X W^T, M = tokens; nn:
  // dX = dY W, M = tokens; tn: dW = dY^T X, K = tokens). A class's efficiency is its shapes' summed
  // bound over their summed time.
  constexpr int64_t kT = 1536, kD = 640, kF = 2816, kV = 12000;
  const std::vector<std::array<int64_t, 3>> rows = {{kT, kD, kD}, {kT, kF, kD}, {kT, kD, kF}, {kT, kV, kD}};
  const std::vector<std::array<int64_t, 3>> dw = {{kD, kD, kT}, {kF, kD, kT}, {kD, kF, kT}, {kV, kD, kT}};
  const DType t = std::is_same_v<O, bf16> ? DType::bf16 : DType::f32;
  std::map<std::string, std::pair<double, double>> sums;  // class -> (bound ms, measured ms)
  for (const char* layout : {"nt", "nn", "tn"}) {
    const std::string l = layout;
    for (const auto& [m, n, k] : l == "tn" ? dw : rows) {
      Buffer<O> a(static_cast<size_t>(m * k), "calib.a"), b(static_cast<size_t>(n * k), "calib.b");
      Buffer<float> d(static_cast<size_t>(m * n), "calib.d");
      for (size_t i = 0; i < a.size(); ++i) a[i] = O(static_cast<float>(i % 7) * 0.1f);
      for (size_t i = 0; i < b.size(); ++i) b[i] = O(static_cast<float>(i % 5) * 0.1f);
      const double ms = time_ms([&] {
        if (l == "nt")
          model::linear::nt(a.data(), b.data(), d.data(), m, n, k, k, k, n, false);
        else if (l == "nn")
          model::linear::nn(a.data(), b.data(), d.data(), m, n, k, k, n, n, false);
        else
          model::linear::tn(a.data(), b.data(), d.data(), m, n, k, m, n, n, true);
      });
      roofline::ModelOp op;
      op.kind = "gemm";
      op.name = l == "tn" ? "calib dW" : l == "nn" ? "calib dX" : "calib";
      roofline::MatmulDtypes dt;
      dt.x = dt.w = t;
      dt.out = DType::f32;
      op.cost = roofline::matmul(m, k, n, dt);
      const double bound_ms = roofline::bound(op.cost, chip).t_lower * 1e3;
      const std::string cls = prec + " " + gemm_class(op);
      sums[cls].first += bound_ms;
      sums[cls].second += ms;
      std::string what = e.shapes.value(cls, std::string());
      what += fmt::format("{}{} M={} N={} K={}: {:.3f} ms measured, {:.3f} ms bound", what.empty() ? "" : "; ", l,
                          m, n, k, ms, bound_ms);
      e.shapes[cls] = what;
    }
  }
  for (const auto& [cls, bm] : sums) e.eff[cls] = std::min(1.0, bm.first / bm.second);
}

template <typename O>
void fit_attention(const roofline::Chip& chip, const std::string& prec, Efficiency& e) {
  const int64_t B = 1, H = 6, T = 384, Dh = 64;  // no preset has 6 heads or context 384
  const size_t n = static_cast<size_t>(B * H * T * Dh);
  Buffer<O> q(n, "calib.q"), k(n, "calib.k"), v(n, "calib.v"), o(n, "calib.o"), d_o(n, "calib.do"),
      dq(n, "calib.dq"), dk(n, "calib.dk"), dv(n, "calib.dv");
  Buffer<float> lse(static_cast<size_t>(B * H * T), "calib.lse");
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (auto* buf : {&q, &k, &v, &d_o})
    for (auto& x : *buf) x = O(nd(rng));
  auto view = [&](Buffer<O>& b) { return TensorView<O>::contiguous(b.data(), {B, H, T, Dh}); };
  const auto L = TensorView<float>::contiguous(lse.data(), {B, H, T});
  attention::Options opt;
  opt.causal = true;
  const double ms = time_ms([&] {
    attention::flash_attention_forward<O>(view(q), view(k), view(v), view(o), L, opt);
    attention::flash_attention_backward<O>(view(q), view(k), view(v), view(o), view(d_o), L, view(dq),
                                           view(dk), view(dv), opt);
  });
  roofline::AttentionShape s;
  s.batch = B;
  s.heads = H;
  s.seq_q = s.seq_kv = T;
  s.head_dim = Dh;
  s.dtype = std::is_same_v<O, bf16> ? DType::bf16 : DType::f32;
  s.causal = true;
  s.backward = true;
  const double bound_ms = roofline::bound(roofline::attention_flash(s), chip).t_lower * 1e3;
  e.eff[prec + " attention"] = std::min(1.0, bound_ms / ms);
  e.shapes[prec + " attention"] =
      fmt::format("flash fwd+bwd causal B={} H={} T={} d={}: {:.3f} ms measured, {:.3f} ms bound", B, H, T,
                  Dh, ms, bound_ms);
}

void fit_streams(const roofline::Chip& chip, Efficiency& e) {
  // Elementwise: a residual add over 6M floats (72 MB moved, out of every cache).
  const int64_t n = 6'000'000;
  Buffer<float> x(static_cast<size_t>(n), "calib.x"), y(static_cast<size_t>(n), "calib.y"),
      z(static_cast<size_t>(n), "calib.z");
  std::fill(x.begin(), x.end(), 1.0f);
  std::fill(y.begin(), y.end(), 2.0f);
  const int nt = get_num_threads();
  const double ms = time_ms([&] {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
  });
  const double bound_ms = roofline::bound(roofline::elementwise(n, DType::f32, 2, 1), chip).t_lower * 1e3;
  e.eff["elementwise"] = std::min(1.0, bound_ms / ms);
  e.shapes["elementwise"] =
      fmt::format("x + y over {} fp32: {:.3f} ms measured, {:.3f} ms bound", n, ms, bound_ms);
  // Exp-heavy elementwise: SwiGLU forward and backward (the model's vector path) over 1536 x 1792
  // (no preset's d_ff), fp32, against the memory roof of the bytes they move. Skipped where the
  // active ISA has no vector path (those ops then use the stream's efficiency).
  {
    const int64_t rows = 1536, f = 1792, nf = rows * f;
    Buffer<float> ab(static_cast<size_t>(2 * nf), "calib.ab"), saved(static_cast<size_t>(2 * nf), "calib.saved"),
        g(static_cast<size_t>(nf), "calib.g"), dab(static_cast<size_t>(2 * nf), "calib.dab");
    for (size_t i = 0; i < ab.size(); ++i) ab[i] = static_cast<float>(i % 11) * 0.3f - 1.5f;
    bool vector_path = true;
    const double sms = time_ms([&] {
      vector_path = model::fused::swiglu_forward(ab.data(), rows, f, saved.data(), g.data()) &&
                    model::fused::swiglu_backward(g.data(), saved.data(), rows, f, dab.data());
    });
    if (vector_path) {
      roofline::Cost sc;
      sc.op = "swiglu fwd+bwd";
      sc.compute = "fp32";
      sc.flops = 30.0L * nf;
      // forward reads a|b and writes their saved copy and g; backward reads dg and a|b, writes da|db.
      for (const auto& [elems, write] : std::vector<std::pair<int64_t, bool>>{
               {2 * nf, false}, {2 * nf, true}, {nf, true}, {nf, false}, {2 * nf, false}, {2 * nf, true}})
        sc.memory.push_back({"word", "fp32", static_cast<long double>(elems), 4.0L * elems, write});
      const double sbound = roofline::bound(sc, chip).t_lower * 1e3;
      e.eff["elementwise exp"] = std::min(1.0, sbound / sms);
      e.shapes["elementwise exp"] = fmt::format("SwiGLU forward + backward over {} x {} fp32: {:.3f} ms measured, "
                                                "{:.3f} ms bound", rows, f, sms, sbound);
    }
  }
  // Optimizer: AdamW over 7M parameters (no preset has that many).
  const int64_t p = 7'000'000;
  Buffer<float> params(static_cast<size_t>(p), "calib.params"), grads(static_cast<size_t>(p), "calib.grads");
  std::fill(params.begin(), params.end(), 0.5f);
  std::fill(grads.begin(), grads.end(), 0.01f);
  model::AdamW<float> adam(p, model::AdamWConfig{});
  const double ams = time_ms([&] { adam.step(params.span(), grads.span()); });
  roofline::Cost c;
  c.op = "adamw";
  c.compute = "fp32";
  c.flops = 16.0L * p;
  for (int i = 0; i < 7; ++i)
    c.memory.push_back({"word", "fp32", static_cast<long double>(p), 4.0L * p, i >= 4});
  const double abound = roofline::bound(c, chip).t_lower * 1e3;
  e.eff["optimizer"] = std::min(1.0, abound / ams);
  e.shapes["optimizer"] =
      fmt::format("AdamW over {} fp32 parameters: {:.3f} ms measured, {:.3f} ms bound", p, ams, abound);
}

// Loaded from beside the probe's chip file when it was fitted for this chip and thread count, else
// measured now and saved there.
Efficiency efficiencies(const roofline::Chip& chip, int threads) {
  Efficiency e;
  const fs::path probe = roofline::probe_result_path();
  e.path = (probe.parent_path() / fmt::format("this.efficiency.t{}.json", threads)).string();
  if (!g_refit && fs::is_regular_file(e.path)) {
    try {
      std::ifstream in(e.path);
      const json j = json::parse(in);
      if (j.at("chip_file_mtime").get<int64_t>() ==
          static_cast<int64_t>(fs::last_write_time(probe).time_since_epoch().count())) {
        e.eff = j.at("efficiency").get<std::map<std::string, double>>();
        e.shapes = j.at("shapes");
        return e;
      }
    } catch (const std::exception&) {  // a stale or damaged file is refitted
    }
  }
  RIDGE_RANGE("fit efficiencies");
  fit_gemms<float>(chip, "fp32", e);
  fit_gemms<bf16>(chip, "bf16", e);
  fit_attention<float>(chip, "fp32", e);
  fit_attention<bf16>(chip, "bf16", e);
  fit_streams(chip, e);
  const json doc = {
      {"chip", chip.id},
      {"threads", threads},
      {"chip_file_mtime", static_cast<int64_t>(fs::last_write_time(probe).time_since_epoch().count())},
      {"efficiency", e.eff},
      {"shapes", e.shapes},
      {"note",
       "efficiency = roofline bound on the probed roofs / measured time, per op class; "
       "shapes disjoint from every model preset"}};
  try {
    files::write_text(e.path, doc.dump(2) + "\n", "efficiency cache");
  } catch (const Error&) {  // a cache that cannot be written is refitted on the next run
  }
  return e;
}

// ---------------------------------------------------------------- the PyTorch peer
struct TorchResult {
  std::map<std::string, json> modes;  // "eager", "compile" -> {median_ms, mean_ms, std_ms}
  std::string why;                    // version, or why absent
};

TorchResult torch_peer(const std::string& weights, const model::ModelConfig& cfg, int64_t batch, int64_t seq,
                       const std::string& precision, const std::string& pass, const std::string& attention,
                       int threads, int warmup, int iters) {
  TorchResult r;
  const std::string cmd = fmt::format(
      "{} {}/tools/torch_model_peer.py --weights {} --vocab {} --d-model {} --d-ff {} --layers {} --heads {} "
      "--rope-theta {} --batch {} --seq {} --precision {} --pass {} --attention {} --threads {} --warmup {} "
      "--iters {} {} 2>&1",
      g_python, RIDGE_SOURCE_DIR, weights, cfg.vocab_size, cfg.d_model, cfg.d_ff, cfg.num_layers,
      cfg.num_heads, cfg.rope_theta, batch, seq, precision,
      pass == "forward+backward" ? "forward_backward" : pass, attention, threads, warmup, iters,
      g_no_compile ? "--no-compile" : "");
  std::FILE* f = popen(cmd.c_str(), "r");
  if (!f) {
    r.why = "PyTorch peer: cannot start python";
    return r;
  }
  std::string text;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, f)) text.append(buf, n);
  const int rc = pclose(f);
  const auto nl = text.find_last_of('\n', text.size() >= 2 ? text.size() - 2 : 0);
  json j;
  try {
    j = json::parse(text.substr(nl == std::string::npos ? 0 : nl + 1));
  } catch (const std::exception&) {
    r.why = fmt::format("PyTorch peer failed (exit {}): {}", rc, text.substr(0, 160));
    return r;
  }
  if (j.contains("error")) {
    r.why = j["error"].get<std::string>();
    return r;
  }
  for (const char* m : {"eager", "compile"})
    if (j.contains(m)) r.modes[m] = j[m];
  r.why = "torch " + j.value("torch", std::string("?"));
  if (j.contains("compile_error")) r.why += "; torch.compile: " + j["compile_error"].get<std::string>();
  return r;
}

// ---------------------------------------------------------------- the trace summary
// Time of the timed steps per operation type, from the leaf ranges the model records: total = the
// forward, backward and optimizer ranges; by["gemm" | "attention" | "optimizer" | "elementwise"] the
// ranges of that type (elementwise: the named norm, rope, SwiGLU, loss, embedding and cast ranges).
struct OpTimes {
  double total = 0;
  std::map<std::string, double> by;
};
OpTimes op_times(double since_us) {
  const json doc = trace::to_json();
  OpTimes t;
  for (const auto& e : doc["traceEvents"]) {
    if (e.value("ph", "") != "X" || e.value("ts", 0.0) < since_us) continue;
    const std::string n = e.value("name", "");
    const double d = e.value("dur", 0.0);
    if (n == "forward" || n == "backward" || n == "optimizer") t.total += d;
    if (n == "optimizer")
      t.by["optimizer"] += d;
    else if (n.rfind("gemm", 0) == 0)
      t.by["gemm"] += d;
    else if (n == "attention" || n == "attention backward")
      t.by["attention"] += d;
    else if (n == "norm" || n == "norm backward" || n == "rope" || n == "swiglu" || n == "swiglu backward" ||
             n == "loss" || n == "loss backward" || n == "embedding" || n == "embedding backward" ||
             n == "final norm" || n == "final norm backward" || n == "cast weights")
      t.by["elementwise"] += d;
  }
  return t;
}

// Shares of the timed steps' time per operation type, as printed after the table.
json trace_summary(double since_us) {
  const OpTimes t = op_times(since_us);
  json j = json::object();
  if (t.total <= 0) return j;
  const std::map<std::string, std::string> label = {
      {"gemm", "GEMMs"}, {"attention", "attention"}, {"elementwise", "elementwise"}, {"optimizer", "optimizer"}};
  double named = 0;
  for (const auto& [k, v] : t.by) {
    j[label.at(k)] = 100.0 * v / t.total;
    named += v;
  }
  j["other (residual adds, casts)"] = 100.0 * std::max(0.0, t.total - named) / t.total;
  return j;
}

// Measured time per op kind (gemm, attention, elementwise, optimizer) of the timed steps as shares of
// their sum; what --predict holds each kind's prediction against. Everything in the passes that is
// not a GEMM, attention or the optimizer (norms, rope, SwiGLU, the loss, casts, residual adds) is
// elementwise, as the analyzer counts it.
std::map<std::string, double> trace_kind_shares(double since_us) {
  OpTimes t = op_times(since_us);
  std::map<std::string, double> share;
  if (t.total <= 0) return share;
  t.by["elementwise"] = std::max(0.0, t.total - t.by["gemm"] - t.by["attention"] - t.by["optimizer"]);
  for (const auto& [k, v] : t.by) share[k] = v / t.total;
  return share;
}

double last_marker_ts(const std::string& name) {
  const json doc = trace::to_json();
  double ts = 0;
  for (const auto& e : doc["traceEvents"])
    if (e.value("name", "") == name) ts = std::max(ts, e.value("ts", 0.0));
  return ts;
}

// ---------------------------------------------------------------- the analytic memory count
// What a step must hold: fp32 parameters, gradients and AdamW m and v; the operand copy of the
// weights (bf16, or fp16 stored as fp32 on this CPU); per layer the saved activations; the final
// norm's output and the fp32 logits; the workspace the backward pass reuses.
json analytic_memory(const model::ModelConfig& c, int64_t B, int64_t T, model::Precision p) {
  const double P = static_cast<double>(c.param_count()), N = static_cast<double>(B * T),
               D = static_cast<double>(c.d_model), F = static_cast<double>(c.d_ff),
               V = static_cast<double>(c.vocab_size), H = static_cast<double>(c.num_heads);
  const double o = p == model::Precision::bf16 ? 2 : 4;
  const double layer = 4 * (2 * N * D + 2 * N + H * N) + o * (6 * N * D + 3 * N * F);
  const double fin = 4 * (N * D + 2 * N + N * V) + o * N * D;
  const double work = 4 * (N * std::max({3 * D, 2 * F}) + N * D + N * std::max(F, D) + 3 * N * D) +
                      o * (N * std::max({V, 3 * D, 2 * F}) + 3 * N * D + N * D);
  return {{"parameters", 4 * P},
          {"gradients", 4 * P},
          {"optimizer state", 8 * P},
          {"parameters/operand copy",
           p == model::Precision::fp32 ? 0.0 : (p == model::Precision::bf16 ? 2 : 4) * P},
          {"activations (per layer)", layer},
          {"activations (all layers + final)", layer * static_cast<double>(c.num_layers) + fin},
          {"workspace", work}};
}

// ---------------------------------------------------------------- one case
struct Case {
  std::string size;
  model::ModelConfig cfg;
  int64_t batch = 4, seq = 256;
  std::string precision = "fp32", pass = "step", attention = "flash";
  int threads = 1;
};

// Runs the case at its own thread count and puts the run's back afterwards.
struct ThreadsScope {
  int saved;
  explicit ThreadsScope(int n) : saved(get_num_threads()) { set_num_threads(n); }
  ~ThreadsScope() { set_num_threads(saved); }
  ThreadsScope(const ThreadsScope&) = delete;
  ThreadsScope& operator=(const ThreadsScope&) = delete;
};

// What --predict found for one case: the step's miss and, per op kind, measured against predicted
// with the efficiency it ran at (bound / measured) beside the one fitted (bound / predicted).
struct KindCheck {
  double bound_ms = 0, predicted_ms = 0, measured_ms = 0;
  double error_pct() const { return measured_ms > 0 ? 100.0 * (predicted_ms - measured_ms) / measured_ms : 0; }
  double ran_eff() const { return measured_ms > 0 ? bound_ms / measured_ms : 0; }
  double fitted_eff() const { return predicted_ms > 0 ? bound_ms / predicted_ms : 0; }
};
struct PredictionCheck {
  double predicted_ms = 0, measured_ms = 0;
  std::map<std::string, KindCheck> kinds;
};

// A hint per kind, from the case and the fit's shapes, for why its efficiency moved.
std::string kind_hint(const std::string& kind, const Case& c, const KindCheck& k) {
  const bool slower = k.ran_eff() < k.fitted_eff();
  const int64_t dh = c.cfg.d_model / c.cfg.num_heads;
  if (kind == "attention")
    return fmt::format("{} at head_dim {}, T={} causal; fitted on head_dim 64, T=384{}", c.attention, dh, c.seq,
                       slower ? ": the exp/softmax work per tile weighs more than the roof's FLOPs count"
                              : "");
  if (kind == "gemm")
    return fmt::format("M=batch*context={}, sides {}..{}; fitted on 1536 tokens x sides 640..12000{}", c.batch * c.seq,
                       std::min(c.cfg.d_model, c.cfg.d_ff), std::max<int64_t>(c.cfg.vocab_size, c.cfg.d_ff),
                       slower ? ": packing and small-k/odd-edge tiles cost more at these shapes" : "");
  if (kind == "elementwise")
    return slower ? "norms, RoPE and casts ran below the stream the fit timed (short rows, reductions)"
                  : "operands stay in cache between the fused passes";
  if (kind == "optimizer") return "AdamW over the flat fp32 buffers; fitted on 7M parameters";
  return "";
}

std::vector<std::string> explain_misses(const Case& c, const PredictionCheck& p, double limit_pct) {
  std::vector<std::string> out;
  const double step_err = 100.0 * (p.predicted_ms - p.measured_ms) / p.measured_ms;
  // The kind that carries most of the step's error.
  std::string worst;
  double worst_abs = -1;
  for (const auto& [k, v] : p.kinds)
    if (std::abs(v.predicted_ms - v.measured_ms) > worst_abs) {
      worst_abs = std::abs(v.predicted_ms - v.measured_ms);
      worst = k;
    }
  const std::string label = fmt::format("{} ctx={} {} {}", c.size, c.seq, c.precision, c.pass);
  if (std::abs(step_err) > limit_pct && !worst.empty()) {
    const auto& w = p.kinds.at(worst);
    out.push_back(fmt::format(
        "{} (whole): predicted {:.1f} ms, measured {:.1f} ms ({:+.1f}%); {} carries {:+.1f} of the {:+.1f} ms: it ran "
        "at {:.1f}% of its roof vs fitted {:.1f}% ({})",
        label, p.predicted_ms, p.measured_ms, step_err, worst, w.predicted_ms - w.measured_ms,
        p.predicted_ms - p.measured_ms, 100 * w.ran_eff(), 100 * w.fitted_eff(), kind_hint(worst, c, w)));
  }
  for (const auto& [k, v] : p.kinds) {
    if (std::abs(v.error_pct()) <= limit_pct || v.measured_ms <= 0) continue;
    out.push_back(fmt::format("{} {}: predicted {:.1f} ms, measured {:.1f} ms ({:+.1f}%, {:.0f}% of the step): ran "
                              "at {:.1f}% of its roof vs fitted {:.1f}% ({})",
                              label, k, v.predicted_ms, v.measured_ms, v.error_pct(),
                              100 * v.measured_ms / p.measured_ms, 100 * v.ran_eff(), 100 * v.fitted_eff(),
                              kind_hint(k, c, v)));
  }
  return out;
}

void run_case(const Case& c, bench::Context& ctx, const roofline::Chip* chip, const Efficiency* eff,
              int idx, std::vector<std::string>& misses) {
  ThreadsScope threads_scope(c.threads);
  memory::reset_peak();
  const int64_t base_bytes = memory::current_bytes();
  model::TrainConfig tc;
  tc.batch = c.batch;
  tc.seq = c.seq;
  tc.precision = model::parse_precision(c.precision);
  tc.attention = model::parse_attention_path(c.attention);
  tc.seed = 1;
  // The full step needs the Trainer (it holds AdamW's state); forward and forward+backward time the
  // model alone, initialised as the Trainer initialises it, so their memory peak holds no optimizer
  // state (CS336 times those passes on the bare model too).
  std::optional<model::Trainer> trainer;
  std::optional<model::TransformerLM<float>> bare;
  if (c.pass == "step") {
    trainer.emplace(c.cfg, tc);
  } else {
    bare.emplace(c.cfg, tc.precision, tc.attention);
    bare->init(tc.seed);
  }
  auto& m = trainer ? trainer->model() : *bare;
  std::vector<int32_t> in(static_cast<size_t>(c.batch * c.seq)), tg(in.size());
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.cfg.vocab_size - 1));
  for (size_t i = 0; i < in.size(); ++i) in[i] = tok(rng), tg[i] = tok(rng);

  // The PyTorch peer gets the same weights and batch through a safetensors file.
  std::string weights;
  if (!g_no_torch) {
    weights = (fs::temp_directory_path() / fmt::format("ridge_model_peer_{}_{}.safetensors", ::getpid(), idx))
                  .string();
    model::SafetensorsWriter w;
    auto P = m.params();
    for (const auto& t : m.tensors()) w.add(t.name, DType::f32, t.shape, P.data() + t.offset);
    w.add("batch.inputs", DType::i32, {c.batch, c.seq}, in.data());
    w.add("batch.targets", DType::i32, {c.batch, c.seq}, tg.data());
    w.write(weights);
  }

  bench::Options opt = ctx.options;
  const std::string marker = fmt::format("model case {}", idx);
  std::function<void()> fn;
  if (c.pass == "forward")
    fn = [&] {
      RIDGE_RANGE("forward");
      bench::do_not_optimize(m.forward(in.data(), tg.data(), c.batch, c.seq));
    };
  else if (c.pass == "forward+backward")
    fn = [&] {
      m.zero_grad();
      {
        RIDGE_RANGE("forward");
        m.forward(in.data(), tg.data(), c.batch, c.seq);
      }
      RIDGE_RANGE("backward");
      m.backward();
    };
  else
    fn = [&] { bench::do_not_optimize(trainer->step(in.data(), tg.data()).loss); };
  // --predict holds each op kind against its measured time, so it records the ranges even when no
  // --trace file was asked for (the model's ranges cost well under 1% of a step).
  const bool own_trace = eff && chip && !trace::recording();
  if (own_trace) trace::start_recording();
  // Warm-up untimed, then the marker, so the trace summary covers the timed steps only.
  for (int i = 0; i < opt.warmup; ++i) fn();
  opt.warmup = 0;
  if (trace::recording()) trace::mark(marker);
  const auto meas = bench::measure(fn, opt);
  json shares;
  std::map<std::string, double> kind_share;
  if (trace::recording()) kind_share = trace_kind_shares(last_marker_ts(marker));
  if (own_trace) {
    trace::stop_recording();
    trace::clear();
  }
  if (trace::recording()) {
    shares = trace_summary(last_marker_ts(marker));
    std::fprintf(stderr, "trace summary, %s ctx=%lld %s %s (share of the timed steps):\n", c.size.c_str(),
                 static_cast<long long>(c.seq), c.precision.c_str(), c.pass.c_str());
    for (const auto& [k, v] : shares.items())
      std::fprintf(stderr, "  %-30s %5.1f%%\n", k.c_str(), v.get<double>());
  }

  bench::Row row;
  row.case_ = {
      {"size", c.size}, {"context", c.seq}, {"batch", c.batch}, {"pass", c.pass}, {"attention", c.attention}};
  row.dtype = c.precision;
  row.threads = c.threads;
  row.set_time(meas);
  const auto shape = model::model_shape(c.cfg, c.batch, c.seq, tc.precision, tc.attention);
  const double fwd = roofline::model_matmul_flops(shape, "forward");
  row.flops = c.pass == "forward" ? fwd : fwd + roofline::model_matmul_flops(shape, "backward");
  const double tokens = static_cast<double>(c.batch * c.seq);
  row.extra["mean_ms"] = meas.stats.mean * 1e3;
  row.extra["std_ms"] = meas.stats.stddev * 1e3;
  row.extra["steps_timed"] = meas.stats.n;
  row.extra["warmup"] = ctx.options.warmup;
  row.extra["tokens_per_s"] = tokens / meas.stats.median;
  std::string note;
  if (chip) {
    const auto sr = model::step_roofline(c.size, shape, *chip);
    std::vector<std::string> passes = {"forward"};
    if (c.pass != "forward") passes.push_back("backward");
    if (c.pass == "step") passes.push_back("optimizer");
    double bound_s = 0, bytes = 0, pred_s = 0;
    std::map<std::string, double> pred_by;
    PredictionCheck pc;
    for (const auto& e : sr.ops) {
      if (std::find(passes.begin(), passes.end(), e.op.pass) == passes.end()) continue;
      bound_s += e.t_lower;
      bytes += e.bound.memory_bytes * static_cast<double>(e.op.count);
      if (eff) {
        const std::string cls = op_class(e.op, c.precision == "bf16" ? "bf16" : "fp32");
        auto it = eff->eff.find(cls);
        if (it == eff->eff.end() && exp_heavy(e.op)) it = eff->eff.find("elementwise");
        const double ef = it != eff->eff.end() && it->second > 0 ? it->second : 1.0;
        pred_s += e.t_lower / ef;
        pred_by[e.op.kind] += e.t_lower / ef * 1e3;
        pc.kinds[e.op.kind].bound_ms += e.t_lower * 1e3;
        pc.kinds[e.op.kind].predicted_ms += e.t_lower / ef * 1e3;
      }
    }
    row.bytes = bytes;
    row.extra["roofline_ms"] = bound_s * 1e3;
    const std::string pk = roofline::peak_key(shape.operand);
    const double peak = chip->has_peak(pk) ? chip->peak(pk) : chip->peak("fp32");
    row.extra["mfu_pct"] = 100.0 * row.flops / meas.stats.median / peak;
    if (eff) {
      row.extra["predicted_ms"] = pred_s * 1e3;
      row.extra["prediction_error_pct"] = 100.0 * (pred_s - meas.stats.median) / meas.stats.median;
      pc.predicted_ms = pred_s * 1e3;
      pc.measured_ms = meas.stats.median * 1e3;
      // Measured per kind: the trace's shares of the timed steps, scaled to the median step.
      json by_kind = json::object();
      for (auto& [k, v] : pc.kinds) {
        const auto it = kind_share.find(k);
        v.measured_ms = it != kind_share.end() ? it->second * pc.measured_ms : 0;
        by_kind[k] = {{"predicted_ms", v.predicted_ms},
                      {"measured_ms", v.measured_ms},
                      {"bound_ms", v.bound_ms},
                      {"prediction_error_pct", v.error_pct()},
                      {"ran_efficiency", v.ran_eff()},
                      {"fitted_efficiency", v.fitted_eff()}};
      }
      const auto found = kind_share.empty() ? std::vector<std::string>{} : explain_misses(c, pc, 10.0);
      misses.insert(misses.end(), found.begin(), found.end());
      if (ctx.sink.format() == bench::Format::json) {
        row.extra["predicted_ms_by_kind"] = pred_by;
        row.extra["prediction_by_kind"] = by_kind;
        row.extra["prediction_misses"] = found;
      }
    }
  } else {
    note = "no probe result: run 'ridge probe' for MFU and --predict";
  }
  if (!shares.empty() && ctx.sink.format() == bench::Format::json) row.extra["trace_share_pct"] = shares;
  {
    // Measured: the peak of ridge's allocator over the case (the model, its activations, the optimizer);
    // analytic: the count above. The step holds everything at once, so the two should meet; the
    // difference is 64-byte alignment of each array and the bench's own buffers. Forward and
    // forward+backward run on the bare model: no optimizer state on either side.
    const auto mem = analytic_memory(c.cfg, c.batch, c.seq, tc.precision);
    double total = 0;
    for (const auto& [k, v] : mem.items())
      if (k != "activations (per layer)" && (c.pass == "step" || k != "optimizer state"))
        total += v.get<double>();
    const double measured = static_cast<double>(memory::peak_bytes() - base_bytes);
    row.extra["analytic_mib"] = total / (1 << 20);
    row.extra["memory_peak_mib"] = measured / (1 << 20);
    row.extra["memory_diff_pct"] = 100.0 * (measured - total) / total;
    if (ctx.sink.format() == bench::Format::json) row.extra["analytic_memory_bytes"] = mem;
    if (memory::recording()) {
      std::fprintf(stderr, "memory, %s ctx=%lld %s %s: measured peak %.1f MiB, analytic %.1f MiB (%+.1f%%):",
                   c.size.c_str(), static_cast<long long>(c.seq), c.precision.c_str(), c.pass.c_str(),
                   measured / (1 << 20), total / (1 << 20), 100.0 * (measured - total) / total);
      for (const auto& [k, v] : mem.items())
        std::fprintf(stderr, " %s %.1f MiB;", k.c_str(), v.get<double>() / (1 << 20));
      std::fprintf(stderr, "\n");
    }
  }
  if (!g_no_torch) {
    const auto t = torch_peer(weights, c.cfg, c.batch, c.seq, c.precision, c.pass, c.attention, c.threads,
                              ctx.options.warmup, ctx.options.iters);
    std::error_code ec;
    fs::remove(weights, ec);
    for (const auto& [mode, j] : t.modes) {
      row.add_peer("pytorch " + mode, j.at("median_ms").get<double>());
      row.extra["pytorch_" + mode + "_std_ms"] = j.value("std_ms", 0.0);
    }
    note += std::string(note.empty() ? "" : "; ") + (t.modes.empty() ? "PyTorch absent: " : "") + t.why;
  } else {
    note += (note.empty() ? "" : "; ") + std::string("PyTorch peer skipped (--no-torch)");
  }
  row.note = note;
  ctx.emit(std::move(row));
  ctx.progress.tick(fmt::format("model {} ctx={} {} {}", c.size, c.seq, c.precision, c.pass));
}

void run_model(bench::Context& ctx) {
  const auto& g = ctx.grid;
  g.check_keys(
      {"size", "context", "batch", "precision", "pass", "attention", "d_model", "d_ff", "layers", "heads", "threads"},
      "model");
  std::vector<std::string> sizes = g.values("size", {"tiny", "small"});
  std::vector<int64_t> ctxs = g.counts("context", {256});
  std::vector<std::string> precs = g.values("precision", {"fp32", "bf16"});
  std::vector<std::string> passes = g.values("pass", {"step"});
  if (!ctx.quick && !g.has("pass")) passes = {"forward", "forward+backward", "step"};
  // CS336's protocol unless asked otherwise: 5 warm-up steps (--quick: 1); --warmup always wins.
  if (!ctx.quick && !ctx.warmup_given) ctx.options.warmup = 5;
  for (const auto& p : passes)
    check(p == "forward" || p == "forward+backward" || p == "step",
          "bench model: pass '{}' (accepted: forward, forward+backward, step)", p);
  const std::vector<int64_t> thread_counts = g.counts("threads", {ctx.threads});
  for (int64_t t : thread_counts)
    check(t >= 1 && t <= env::kMaxThreads, "bench model: threads {} is not accepted (expected 1 .. {})", t,
          env::kMaxThreads);
  std::vector<Case> cases;
  for (const int64_t th : thread_counts)
  for (const auto& s : sizes)
    for (int64_t T : ctxs)
      for (int64_t B : g.counts("batch", {4}))
        for (const auto& pr : precs)
          for (const auto& at : g.values("attention", {"flash"}))
            for (const auto& ps : passes) {
              Case c;
              c.size = s;
              c.cfg = model::preset(s, g_vocab, T);
              if (g.has("d_model")) c.cfg.d_model = g.counts("d_model")[0], c.size += "*";
              if (g.has("d_ff")) c.cfg.d_ff = g.counts("d_ff")[0], c.size += "*";
              if (g.has("layers")) c.cfg.num_layers = g.counts("layers")[0], c.size += "*";
              if (g.has("heads")) c.cfg.num_heads = g.counts("heads")[0], c.size += "*";
              c.cfg.validate();
              check(B >= 1, "bench model: batch {} must be >= 1", B);
              // Refused before anything is allocated: a case past the machine's memory would
              // otherwise die in the allocator (or swap for minutes) halfway through the sweep.
              double need = 0;
              const json mem = analytic_memory(c.cfg, B, T, model::parse_precision(pr));
              for (auto it = mem.begin(); it != mem.end(); ++it)
                if (it.key() != "activations (per layer)") need += it.value().get<double>();
              const double avail = static_cast<double>(memory::available_bytes());
              check(avail <= 0 || need < 0.9 * avail,
                    "--set size/context/batch/d_model/d_ff/layers/heads, --vocab: the case {} context {} batch {} needs "
                    "about {} but {} is available",
                    c.size, T, B, units::format_bytes(need), units::format_bytes(avail));
              model::parse_precision(pr);
              model::parse_attention_path(at);
              c.batch = B;
              c.seq = T;
              c.precision = pr;
              c.attention = at;
              c.pass = ps;
              c.threads = static_cast<int>(th);
              cases.push_back(c);
            }
  const roofline::Chip* chip = ctx.chip();
  // Efficiencies are fitted per thread count (each count its own file beside the chip file).
  std::map<int, Efficiency> effs;
  if (g_predict) {
    check(chip != nullptr, "--predict: no probe result; run 'ridge probe' first");
    for (const int64_t th : thread_counts) {
      ThreadsScope scope(static_cast<int>(th));
      Efficiency& e = effs[static_cast<int>(th)] = efficiencies(*chip, static_cast<int>(th));
      std::fprintf(stderr, "efficiencies (bound / measured, %s):\n", e.path.c_str());
      for (const auto& [k, v] : e.eff)
        std::fprintf(stderr, "  %-24s %5.1f%%  %s\n", k.c_str(), 100 * v, e.shapes.value(k, "").c_str());
    }
  }
  ctx.progress.start(cases.size());
  int idx = 0;
  std::vector<std::string> misses;
  for (const auto& c : cases) {
    const auto e = effs.find(c.threads);
    run_case(c, ctx, chip, e != effs.end() ? &e->second : nullptr, idx++, misses);
  }
  if (g_predict) {
    std::fprintf(stderr, "prediction misses > 10%% (per step and per op kind, with the kind's efficiency as run "
                 "vs as fitted): %s\n", misses.empty() ? "none" : "");
    for (const auto& m : misses) std::fprintf(stderr, "  %s\n", m.c_str());
  }
}

void model_options(CLI::App& app) {
  app.add_flag("--no-torch", g_no_torch, "skip the PyTorch peer");
  app.add_flag("--no-compile", g_no_compile, "PyTorch eager only (skip torch.compile)");
  app.add_flag(
      "--predict", g_predict,
      "predict each case from the roofline and per-class efficiencies (fitted on disjoint kernel shapes, "
      "saved beside the probe's chip file)");
  app.add_flag("--refit", g_refit, "with --predict: measure the efficiencies again");
  // Decimal only, as every count of the CLI (cli::decimal_integer): CLI11 alone reads "010" as 8.
  app.add_option("--vocab", g_vocab, "vocabulary size (default 10000, as CS336)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            const bool ok = !v.empty() && v.size() <= 10 && v.find_first_not_of("0123456789") == std::string::npos &&
                            v[0] != '0' && std::stoll(v) < (int64_t{1} << 31);
            return ok ? std::string() : "'" + v + "' is not a vocabulary size (a decimal count, 1 .. 2^31 - 1)";
          },
          ""));
  app.add_option("--python", g_python, "python interpreter for the PyTorch peer (default python3)");
}

}  // namespace
}  // namespace ridge

RIDGE_BENCHMARK(
    model, "model",
    "the CS336 Transformer LM: forward, forward+backward, training step vs PyTorch (eager, compile)",
    ridge::run_model, ridge::model_options);
