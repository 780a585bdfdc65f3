// `ridge bench model`: the CS336 Transformer LM's forward, forward+backward and full training step
// (CS336's protocol: w warm-up steps, n timed steps, mean, std and median), tokens/s and model FLOPs
// utilisation against the probed peak, PyTorch on the same model, weights, batch, threads and precision
// in the same run (tools/torch_model_peer.py; eager and torch.compile), and with --predict the step
// time predicted from the roofline before it is measured (the prediction is ridge/predict.hpp's; this
// file runs the cases and prints).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/json.hpp"
#include "bench/registry.hpp"
#include "cli.hpp"
#include "peer_python.hpp"
#include "core/check.hpp"
#include "core/json.hpp"
#include "ridge/bench.hpp"
#include "ridge/build_paths.h"  // RIDGE_SOURCE_DIR (generated)
#include "ridge/core.hpp"
#include "ridge/model/model.hpp"
#include "ridge/model/moe.hpp"
#include "ridge/model/ranges.hpp"
#include "ridge/model/roofline.hpp"
#include "ridge/model/safetensors.hpp"
#include "ridge/model/train.hpp"
#include "ridge/predict.hpp"
#include "ridge/roofline.hpp"

namespace ridge {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// The command line's options (registered by model_options).
struct Flags {
  bool no_torch = false, no_compile = false, predict = false, refit = false;
  std::string python;  // "": bench_peers::python()
  int64_t vocab = 10000;
};
Flags g_flags;

// ---------------------------------------------------------------- the PyTorch peer
struct TorchResult {
  std::map<std::string, json> modes;  // "eager", "compile" -> {median_ms, mean_ms, std_ms}
  std::string why;                    // version, or why absent
};

TorchResult torch_peer(const Flags& flags, const std::string& weights, const model::ModelConfig& cfg,
                       int64_t batch, int64_t seq, const std::string& precision, const std::string& pass,
                       const std::string& attention, int threads, int warmup, int iters) {
  TorchResult r;
  auto s = [](const auto& v) { return fmt::format("{}", v); };
  std::vector<std::string> argv = {bench_peers::python(flags.python),
                                   std::string(RIDGE_SOURCE_DIR) + "/tools/torch_model_peer.py",
                                   "--weights",
                                   weights,
                                   "--vocab",
                                   s(cfg.vocab_size),
                                   "--d-model",
                                   s(cfg.d_model),
                                   "--d-ff",
                                   s(cfg.d_ff),
                                   "--layers",
                                   s(cfg.num_layers),
                                   "--heads",
                                   s(cfg.num_heads),
                                   "--kv-heads",
                                   s(cfg.kv_heads()),
                                   "--rope-theta",
                                   s(cfg.rope_theta),
                                   "--batch",
                                   s(batch),
                                   "--seq",
                                   s(seq),
                                   "--precision",
                                   precision,
                                   "--pass",
                                   pass == "forward+backward" ? "forward_backward" : pass,
                                   "--attention",
                                   attention,
                                   "--threads",
                                   s(threads),
                                   "--warmup",
                                   s(warmup),
                                   "--iters",
                                   s(iters)};
  if (flags.no_compile) argv.push_back("--no-compile");
  if (cfg.is_moe())
    argv.insert(argv.end(),
                {"--experts", s(cfg.num_experts), "--top-k", s(cfg.top_k), "--shared-experts",
                 s(cfg.num_shared_experts), "--d-expert", s(cfg.expert_width()), "--moe-layers",
                 model::moe_layers_text(cfg), "--router", model::moe::gate_name(cfg.router), "--balance",
                 model::moe::balance_name(cfg.balance), "--aux-coef", s(cfg.aux_loss_coef)});
  json j;
  std::string why;
  if (!bench_peers::run_json(argv, j, why)) {
    r.why = "PyTorch peer: " + why;
    return r;
  }
  for (const char* m : {"eager", "compile"})
    if (j.contains(m)) r.modes[m] = j[m];
  r.why = "torch " + j.value("torch", std::string("?"));
  if (j.contains("compile_error")) r.why += "; torch.compile: " + j["compile_error"].get<std::string>();
  return r;
}

// ---------------------------------------------------------------- the analytic memory count
// What a step must hold (model::step_memory, from the buffers the model allocates), by part.
json analytic_memory(const model::ModelConfig& c, int64_t B, int64_t T, model::Precision p) {
  const roofline::ModelMemory m = model::step_memory(c, B, T, p);
  return {{"parameters", m.parameters},
          {"gradients", m.gradients},
          {"optimizer state", m.optimizer_state},
          {"parameters/operand copy", m.operand_copy},
          {"activations (per layer)", m.per_layer},
          {"activations (all layers + final)", m.activations()},
          {"workspace", m.workspace}};
}

// ---------------------------------------------------------------- one case
struct Case {
  std::string size;
  model::ModelConfig cfg;
  int64_t batch = 4, seq = 256;
  std::string precision = "fp32", pass = "step", attention = "flash";
  int threads = 1;
  // --set doc_mask=true: the batch packs documents (lengths drawn uniformly from 1 .. seq/2, each
  // closed by token 0) and the model masks attention at them (`ridge train --doc-mask`); the same
  // model is timed interleaved without the mask (plain causal over whole rows) as the row's peer.
  bool doc_mask = false;
};

// Runs the case at its own thread count and puts the run's back afterwards.
struct ThreadsScope {
  int saved;
  explicit ThreadsScope(int n) : saved(get_num_threads()) { set_num_threads(n); }
  ~ThreadsScope() { set_num_threads(saved); }
  ThreadsScope(const ThreadsScope&) = delete;
  ThreadsScope& operator=(const ThreadsScope&) = delete;
};

void run_case(const Flags& flags, const Case& c, bench::Context& ctx, const roofline::Chip* chip,
              const predict::Efficiencies* eff, int idx, std::vector<std::string>& misses) {
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
  constexpr int32_t kEot = 0;
  int64_t documents = 0;
  if (c.doc_mask) {
    std::uniform_int_distribution<int64_t> len(1, std::max<int64_t>(1, c.seq / 2));
    for (auto& t : in)
      if (t == kEot) t = 1;
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t t = len(rng) - 1; t < c.seq; t += len(rng), ++documents) in[b * c.seq + t] = kEot;
    documents += c.batch;  // each row's last document, closed by the row's end
  }

  // The PyTorch peer gets the same weights and batch through a safetensors file.
  std::string weights;
  if (!flags.no_torch && !c.doc_mask) {
    weights = (fs::temp_directory_path() / fmt::format("ridge_model_peer_{}_{}.safetensors", ::getpid(), idx))
                  .string();
    model::SafetensorsWriter w;
    auto P = m.params();
    for (const auto& t : m.tensors()) w.add(t.name, DType::f32, t.shape, P.data() + t.offset);
    for (const auto& t : m.state_tensors()) w.add(t.name, DType::f32, t.shape, m.state().data() + t.offset);
    w.add("batch.inputs", DType::i32, {c.batch, c.seq}, in.data());
    w.add("batch.targets", DType::i32, {c.batch, c.seq}, tg.data());
    w.write(weights);
  }

  bench::Options opt = ctx.options;
  const std::string marker = fmt::format("model case {}", idx);
  std::function<void()> fn;
  if (c.pass == "forward")
    fn = [&] {
      RIDGE_RANGE(model::ranges::forward.text);
      bench::do_not_optimize(m.forward(in.data(), tg.data(), c.batch, c.seq));
    };
  else if (c.pass == "forward+backward")
    fn = [&] {
      m.zero_grad();
      {
        RIDGE_RANGE(model::ranges::forward.text);
        m.forward(in.data(), tg.data(), c.batch, c.seq);
      }
      RIDGE_RANGE(model::ranges::backward.text);
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
  // Doc mask: ridge with the mask against itself without it, round by round.
  std::optional<bench::Measurement> plain;
  bench::Measurement meas;
  if (c.doc_mask) {
    auto with = [&] {
      m.set_document_mask(kEot);
      fn();
    };
    auto without = [&] {
      m.set_document_mask(-1);
      fn();
    };
    const auto ms = bench::measure_interleaved({with, without}, {opt}, 3);
    meas = ms[0];
    plain = ms[1];
    m.set_document_mask(-1);
  } else {
    meas = bench::measure(fn, opt);
  }
  predict::TraceTimes times;
  std::map<std::string, double> shares, kind_share;
  if (trace::recording()) {
    times = predict::trace_times(trace::to_json_text(), marker);
    kind_share = predict::kind_shares(times);
  }
  if (own_trace) {
    trace::stop_recording();
    trace::clear();
  }
  if (trace::recording()) {
    shares = predict::trace_summary(times);
    std::fprintf(stderr, "trace summary, %s ctx=%lld %s %s (share of the timed steps):\n", c.size.c_str(),
                 static_cast<long long>(c.seq), c.precision.c_str(), c.pass.c_str());
    for (const auto& [k, v] : shares) std::fprintf(stderr, "  %-30s %5.1f%%\n", k.c_str(), v);
  }

  bench::Row row;
  row.case_ = {
      {"size", c.size}, {"context", c.seq}, {"batch", c.batch}, {"pass", c.pass}, {"attention", c.attention}};
  if (c.cfg.kv_heads() != c.cfg.num_heads) row.case_["kv_heads"] = c.cfg.kv_heads();  // grouped-query
  if (c.doc_mask) row.case_["doc_mask"] = true;
  row.dtype = c.precision;
  row.threads = c.threads;
  row.set_time(meas);
  const auto shape = model::model_shape(c.cfg, c.batch, c.seq, tc.precision, tc.attention);
  // A doc-masked row owes the scores its documents attend to, not those of whole causal rows.
  const double share = model::document_attention_share(in.data(), c.batch, c.seq, c.doc_mask ? kEot : -1);
  row.flops = c.pass == "forward" ? model::forward_flops(c.cfg, c.batch, c.seq, share)
                                  : model::training_flops(c.cfg, c.batch, c.seq, share);
  if (c.doc_mask) row.extra["attention_share"] = share;
  const double tokens = static_cast<double>(c.batch * c.seq);
  row.extra["mean_ms"] = meas.stats.mean * 1e3;
  row.extra["std_ms"] = meas.stats.stddev * 1e3;
  row.extra["steps_timed"] = meas.stats.n;
  row.extra["warmup"] = ctx.options.warmup;
  row.extra["tokens_per_s"] = tokens / meas.stats.median;
  std::string note;
  if (c.cfg.is_moe()) {
    // The routing of the last timed step: max / mean tokens per expert, the worst MoE layer's and the
    // mean over the layers (1 at a perfect balance). MFU counts the active FLOPs (each token's top_k
    // experts), as training_flops does.
    double worst = 0, sum = 0;
    const auto stats = m.moe_stats();
    for (const auto& l : stats) worst = std::max(worst, l.load_imbalance), sum += l.load_imbalance;
    row.extra["expert_load_max"] = worst;
    row.extra["expert_load_mean"] = stats.empty() ? 0.0 : sum / static_cast<double>(stats.size());
    note = fmt::format(
        "expert load max/mean {:.2f} (worst layer), {:.2f} (mean of {} layers); MFU on active FLOPs", worst,
        stats.empty() ? 0.0 : sum / static_cast<double>(stats.size()), stats.size());
  }
  if (chip) {
    const auto sr = model::step_roofline(c.size, shape, *chip);
    std::vector<std::string> passes = {"forward"};
    if (c.pass != "forward") passes.push_back("backward");
    if (c.pass == "step") passes.push_back("optimizer");
    const auto pred = predict::predict_step(sr, passes, tc.precision, eff);
    row.bytes = pred.bytes;
    row.extra["roofline_ms"] = pred.bound_s * 1e3;
    const double peak = model::mfu_peak(*chip, tc.precision);
    row.extra["mfu_pct"] = 100.0 * row.flops / meas.stats.median / peak;
    if (eff) {
      row.extra["predicted_ms"] = pred.predicted_s * 1e3;
      row.extra["prediction_error_pct"] = 100.0 * (pred.predicted_s - meas.stats.median) / meas.stats.median;
      // Measured per kind: the trace's shares of the timed steps, scaled to the median step.
      const auto pc = predict::check_prediction(pred, meas.stats.median, kind_share);
      std::map<std::string, double> pred_by;
      json by_kind = json::object();
      for (const auto& [k, v] : pc.kinds) {
        pred_by[k] = v.predicted_ms;
        by_kind[k] = {{"predicted_ms", v.predicted_ms}, {"measured_ms", v.measured_ms},
                      {"bound_ms", v.bound_ms},         {"prediction_error_pct", v.error_pct()},
                      {"ran_efficiency", v.ran_eff()},  {"fitted_efficiency", v.fitted_eff()}};
      }
      const predict::Case pcase{fmt::format("{} ctx={} {} {}", c.size, c.seq, c.precision, c.pass), c.cfg,
                                c.batch, c.seq, c.attention};
      const auto found =
          kind_share.empty() ? std::vector<std::string>{} : predict::explain_misses(pcase, pc, 10.0);
      misses.insert(misses.end(), found.begin(), found.end());
      if (ctx.sink.format() == bench::Format::json) {
        row.extra["predicted_ms_by_kind"] = pred_by;
        row.extra["prediction_by_kind"] = by_kind;
        row.extra["prediction_misses"] = found;
      }
    }
  } else {
    note +=
        std::string(note.empty() ? "" : "; ") + "no probe result: run 'ridge probe' for MFU and --predict";
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
  if (plain) {
    row.add_peer("ridge plain causal", *plain);
    row.extra["documents"] = documents;
    row.extra["time_over_plain"] = meas.median_ms() / plain->median_ms();
    note += fmt::format("{}doc mask: {} documents in {} rows; {:.2f}x the time of plain causal",
                        note.empty() ? "" : "; ", documents, c.batch, meas.median_ms() / plain->median_ms());
  }
  if (c.doc_mask) {
    note += "; PyTorch peer skipped on doc-mask rows (its model has no document mask)";
  } else if (!flags.no_torch) {
    const auto t = torch_peer(flags, weights, c.cfg, c.batch, c.seq, c.precision, c.pass, c.attention,
                              c.threads, ctx.options.warmup, ctx.options.iters);
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
  g.check_keys({"size", "context", "batch", "precision", "pass", "attention", "d_model", "d_ff", "layers",
                "heads", "kv_heads", "threads", "doc_mask"},
               "model");
  const std::vector<std::string> doc_masks = g.values("doc_mask", {"false"});
  for (const auto& dm : doc_masks)
    check(dm == "true" || dm == "false", "bench model: doc_mask '{}' (accepted: true, false)", dm);
  std::vector<std::string> sizes = g.values("size", {"tiny", "small", "moe-tiny"});
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
              for (const auto& ps : passes)
                for (const auto& dm : doc_masks) {
                  Case c;
                  c.doc_mask = dm == "true";
                  c.size = s;
                  c.cfg = model::preset(s, g_flags.vocab, T);
                  if (g.has("d_model")) c.cfg.d_model = g.counts("d_model")[0], c.size += "*";
                  if (g.has("d_ff")) c.cfg.d_ff = g.counts("d_ff")[0], c.size += "*";
                  if (g.has("layers")) c.cfg.num_layers = g.counts("layers")[0], c.size += "*";
                  if (g.has("heads")) c.cfg.num_heads = g.counts("heads")[0], c.size += "*";
                  if (g.has("kv_heads")) c.cfg.num_kv_heads = g.counts("kv_heads")[0], c.size += "*";
                  check(c.cfg.num_heads % c.cfg.kv_heads() == 0,
                        "bench model: kv_heads {} does not divide heads {} (accepted: a divisor of {})",
                        c.cfg.num_kv_heads, c.cfg.num_heads, c.cfg.num_heads);
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
                        "--set size/context/batch/d_model/d_ff/layers/heads/kv_heads, --vocab: the case {} "
                        "context {} "
                        "batch {} needs "
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
  // Loaded from beside the probe's chip file when fitted for it, else measured now and saved there.
  std::map<int, predict::Efficiencies> effs;
  if (g_flags.predict) {
    check(chip != nullptr, "--predict: no probe result; run 'ridge probe' first");
    predict::FitOptions fit;
    fit.chip_file = roofline::probe_result_path();
    fit.refit = g_flags.refit;
    for (const int64_t th : thread_counts) {
      ThreadsScope scope(static_cast<int>(th));
      fit.path = predict::efficiency_path(fit.chip_file, static_cast<int>(th));
      const predict::Efficiencies& e = effs[static_cast<int>(th)] = predict::efficiencies(*chip, fit);
      std::fprintf(stderr, "efficiencies (bound / measured, %s):\n", fit.path.c_str());
      for (const auto& [k, v] : e.by_class) {
        const auto what = e.shapes.find(k);
        std::fprintf(stderr, "  %-24s %5.1f%%  %s\n", k.c_str(), 100 * v,
                     what != e.shapes.end() ? what->second.c_str() : "");
      }
    }
  }
  ctx.progress.start(cases.size());
  int idx = 0;
  std::vector<std::string> misses;
  for (const auto& c : cases) {
    const auto e = effs.find(c.threads);
    run_case(g_flags, c, ctx, chip, e != effs.end() ? &e->second : nullptr, idx++, misses);
  }
  if (g_flags.predict) {
    std::fprintf(stderr,
                 "prediction misses > 10%% (per step and per op kind, with the kind's efficiency as run "
                 "vs as fitted): %s\n",
                 misses.empty() ? "none" : "");
    for (const auto& m : misses) std::fprintf(stderr, "  %s\n", m.c_str());
  }
}

void model_options(CLI::App& app) {
  app.add_flag("--no-torch", g_flags.no_torch, "skip the PyTorch peer");
  app.add_flag("--no-compile", g_flags.no_compile, "PyTorch eager only (skip torch.compile)");
  app.add_flag(
      "--predict", g_flags.predict,
      "predict each case from the roofline and per-class efficiencies (fitted on disjoint kernel shapes, "
      "saved beside the probe's chip file)");
  app.add_flag("--refit", g_flags.refit, "with --predict: measure the efficiencies again");
  app.add_option("--vocab", g_flags.vocab, "vocabulary size (default 10000, as CS336)")
      ->transform(cli::integer_in(1, std::numeric_limits<int32_t>::max()));
  app.add_option("--python", g_flags.python,
                 "python interpreter for the PyTorch peer (default: the checkout's .venv, else python3)");
}

}  // namespace
}  // namespace ridge

RIDGE_BENCHMARK(
    model, "model",
    "the CS336 Transformer LM: forward, forward+backward, training step vs PyTorch (eager, compile)",
    ridge::run_model, ridge::model_options);
