// The step prediction (ridge/predict.hpp): op classes, the efficiency file, the prediction of a step,
// the attribution of a recorded trace to kinds of work, and the explanations of a miss. The references
// are written here: the classes and lines by hand, a real trace's kinds summed from its raw events.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/json.hpp"
#include "common/tmpdir.hpp"
#include "ridge/bench/trace.hpp"
#include "ridge/model/ranges.hpp"
#include "ridge/model/train.hpp"
#include "ridge/predict.hpp"

namespace rp = ridge::predict;
namespace rm = ridge::model;
namespace rr = ridge::roofline;

namespace {

rm::ModelConfig small_config() {
  rm::ModelConfig c;
  c.vocab_size = 256;
  c.context_length = 32;
  c.d_model = 64;
  c.num_layers = 2;
  c.num_heads = 4;
  c.d_ff = 176;
  return c;
}

// The op named `name` in `pass` of the model's step at `batch` x `seq`.
rr::ModelOp step_op(const rm::ModelConfig& c, int64_t batch, int64_t seq, const std::string& pass,
                    const std::string& name) {
  const auto shape = rm::model_shape(c, batch, seq, rm::Precision::fp32, rm::AttentionPath::flash);
  for (const auto& op : rr::model_step_ops(shape))
    if (op.pass == pass && op.name == name) return op;
  ADD_FAILURE() << "no op " << pass << " " << name;
  return {};
}

rr::ModelOp op_of(const std::string& kind, const std::string& name, double flops = 0) {
  rr::ModelOp op;
  op.kind = kind;
  op.name = name;
  op.cost.flops = flops;
  return op;
}

// The ridge::Error `fn` throws, or a failure naming `what` when it throws none.
template <typename F>
std::string error_of(F&& fn, const std::string& what) {
  try {
    fn();
  } catch (const ridge::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << what << ": no ridge::Error";
  return "";
}

}  // namespace

// ---------------------------------------------------------------- op classes

TEST(PredictClasses, KnownOpsOfTheModelsStep) {
  const auto c = small_config();
  const auto fp32 = rm::Precision::fp32, bf16 = rm::Precision::bf16, fp16 = rm::Precision::fp16;
  // A small step: every GEMM is far below 2 GFLOP.
  EXPECT_EQ(rp::op_class(step_op(c, 2, 32, "forward", "gemm qkv"), fp32), "fp32 gemm nt <2GF");
  EXPECT_EQ(rp::op_class(step_op(c, 2, 32, "backward", "gemm w2 dW"), bf16), "bf16 gemm tn <2GF");
  EXPECT_EQ(rp::op_class(step_op(c, 2, 32, "backward", "gemm out dX"), bf16), "bf16 gemm nn <2GF");
  EXPECT_EQ(rp::op_class(step_op(c, 2, 32, "backward", "gemm out dX"), fp16), "fp32 gemm nn <2GF");
  EXPECT_EQ(rp::op_class(step_op(c, 2, 32, "forward", "attention"), fp32), "fp32 attention");
  EXPECT_EQ(rp::op_class(step_op(c, 2, 32, "backward", "attention backward"), bf16), "bf16 attention");
  EXPECT_EQ(rp::op_class(step_op(c, 2, 32, "forward", "swiglu"), bf16), "elementwise exp");
  EXPECT_EQ(rp::op_class(step_op(c, 2, 32, "backward", "swiglu backward"), fp32), "elementwise exp");
  EXPECT_EQ(rp::op_class(step_op(c, 2, 32, "forward", "loss"), fp32), "elementwise exp");
  EXPECT_EQ(rp::op_class(step_op(c, 2, 32, "backward", "loss backward"), bf16), "elementwise exp");
  EXPECT_EQ(rp::op_class(step_op(c, 2, 32, "forward", "rope"), bf16), "elementwise");
  EXPECT_EQ(rp::op_class(step_op(c, 2, 32, "backward", "embedding backward"), fp32), "elementwise");
  EXPECT_EQ(rp::op_class(step_op(c, 2, 32, "optimizer", "adamw"), bf16), "optimizer");
  EXPECT_EQ(rp::op_class(step_op(c, 2, 32, "optimizer", "zero grad"), fp32), "optimizer");
  // 4096 tokens x 64 x 40000: 2 * 4096 * 64 * 40000 = 21 GFLOP for the lm_head.
  rm::ModelConfig big = c;
  big.vocab_size = 40000;
  EXPECT_EQ(rp::op_class(step_op(big, 4, 1024, "forward", "gemm lm_head"), fp32), "fp32 gemm nt >=2GF");
  EXPECT_EQ(rp::op_class(step_op(big, 4, 1024, "backward", "gemm lm_head dW"), bf16), "bf16 gemm tn >=2GF");
  // The MoE experts' grouped GEMMs have classes of their own, whatever their size; the router and the
  // shared experts are dense GEMMs.
  rm::ModelConfig moe = c;
  moe.num_experts = 4;
  moe.top_k = 2;
  moe.num_shared_experts = 1;
  EXPECT_EQ(rp::op_class(step_op(moe, 2, 32, "forward", "gemm experts w1 w3"), fp32), "fp32 grouped gemm nt");
  EXPECT_EQ(rp::op_class(step_op(moe, 2, 32, "backward", "gemm experts w2 dX"), bf16),
            "bf16 grouped gemm nn");
  EXPECT_EQ(rp::op_class(step_op(moe, 2, 32, "backward", "gemm experts w1 w3 dW"), bf16),
            "bf16 grouped gemm tn");
  EXPECT_EQ(rp::op_class(step_op(moe, 2, 32, "forward", "gemm router"), fp32), "fp32 gemm nt <2GF");
  EXPECT_EQ(rp::op_class(step_op(moe, 2, 32, "forward", "gemm shared w2"), fp32), "fp32 gemm nt <2GF");
  EXPECT_TRUE(rp::grouped_gemm(step_op(moe, 2, 32, "forward", "gemm experts w2")));
  EXPECT_FALSE(rp::grouped_gemm(step_op(moe, 2, 32, "forward", "gemm shared w1 w3")));
  EXPECT_TRUE(rp::exp_heavy(step_op(c, 2, 32, "forward", "swiglu")));
  EXPECT_FALSE(rp::exp_heavy(step_op(c, 2, 32, "forward", "norm (ln1)")));
}

TEST(PredictClasses, SizeThresholdIsTwoGigaflops) {
  EXPECT_EQ(rp::op_class(op_of("gemm", "x", 2e9), rm::Precision::fp32), "fp32 gemm nt >=2GF");
  EXPECT_EQ(rp::op_class(op_of("gemm", "x", 1.999e9), rm::Precision::fp32), "fp32 gemm nt <2GF");
  EXPECT_EQ(rp::op_class(op_of("gemm", "x dW", 1.999e9), rm::Precision::bf16), "bf16 gemm tn <2GF");
}

TEST(PredictClasses, EfficiencyOfAnOpFallsBackAsDocumented) {
  rp::Efficiencies e;
  e.by_class = {{"fp32 gemm nt <2GF", 0.5}, {"elementwise", 0.25}, {"bf16 attention", 0}};
  EXPECT_EQ(e.of(op_of("gemm", "gemm qkv", 1e6), rm::Precision::fp32), 0.5);
  EXPECT_EQ(e.of(op_of("gemm", "gemm qkv", 1e6), rm::Precision::bf16), 1.0);   // no class: the bound
  EXPECT_EQ(e.of(op_of("attention", "attention"), rm::Precision::bf16), 1.0);  // not positive: the bound
  EXPECT_EQ(e.of(op_of("elementwise", "swiglu"), rm::Precision::fp32), 0.25);  // exp-heavy: the stream's
  EXPECT_EQ(e.of(op_of("elementwise", "norm"), rm::Precision::fp32), 0.25);
  EXPECT_EQ(e.of(op_of("optimizer", "adamw"), rm::Precision::fp32), 1.0);
  e.by_class["elementwise exp"] = 0.125;
  EXPECT_EQ(e.of(op_of("elementwise", "loss backward"), rm::Precision::fp32), 0.125);
}

// ---------------------------------------------------------------- the prediction of a step

TEST(PredictStep, SumsTheChosenPassesOverTheirEfficiencies) {
  rm::StepRoofline sr;
  auto add = [&](const std::string& pass, const std::string& kind, const std::string& name, int64_t count,
                 double t_one, double bytes_one) {
    rm::OpBound b;
    b.op = op_of(kind, name, 1e6);
    b.op.pass = pass;
    b.op.count = count;
    b.bound.t_lower = t_one;
    b.bound.memory_bytes = bytes_one;
    b.t_lower = t_one * static_cast<double>(count);
    sr.ops.push_back(b);
  };
  add("forward", "gemm", "gemm qkv", 2, 0.001, 100);
  add("forward", "elementwise", "norm", 2, 0.0005, 10);
  add("backward", "gemm", "gemm qkv dX", 2, 0.002, 200);
  add("optimizer", "optimizer", "adamw", 1, 0.004, 1000);
  rp::Efficiencies e;
  e.by_class = {{"fp32 gemm nt <2GF", 0.5}, {"fp32 gemm nn <2GF", 0.25}, {"elementwise", 0.5}};

  const auto p = rp::predict_step(sr, {"forward", "backward"}, rm::Precision::fp32, &e);
  EXPECT_DOUBLE_EQ(p.bound_s, 0.002 + 0.001 + 0.004);
  EXPECT_DOUBLE_EQ(p.bytes, 2 * 100 + 2 * 10 + 2 * 200);
  EXPECT_DOUBLE_EQ(p.predicted_s, 0.002 / 0.5 + 0.001 / 0.5 + 0.004 / 0.25);
  ASSERT_EQ(p.kinds.size(), 2u);  // no optimizer: not among the passes
  EXPECT_DOUBLE_EQ(p.kinds.at("gemm").bound_ms, 6);
  EXPECT_DOUBLE_EQ(p.kinds.at("gemm").predicted_ms, 4 + 16);
  EXPECT_DOUBLE_EQ(p.kinds.at("elementwise").predicted_ms, 2);

  const auto bare = rp::predict_step(sr, {"forward", "backward", "optimizer"}, rm::Precision::fp32, nullptr);
  EXPECT_DOUBLE_EQ(bare.predicted_s, bare.bound_s);
  EXPECT_DOUBLE_EQ(bare.kinds.at("optimizer").predicted_ms, 4);

  // Held against a step of 50 ms: gemm took 60% of it, elementwise 40%.
  const auto check = rp::check_prediction(p, 0.05, {{"gemm", 0.6}, {"elementwise", 0.4}, {"attention", 0}});
  EXPECT_DOUBLE_EQ(check.measured_ms, 50);
  EXPECT_DOUBLE_EQ(check.predicted_ms, 1e3 * p.predicted_s);
  EXPECT_DOUBLE_EQ(check.kinds.at("gemm").measured_ms, 30);
  EXPECT_DOUBLE_EQ(check.kinds.at("elementwise").measured_ms, 20);
  EXPECT_EQ(check.kinds.count("attention"), 0u);  // a share for a kind the prediction has no ops of
  EXPECT_DOUBLE_EQ(check.kinds.at("gemm").ran_eff(), 6.0 / 30);
  EXPECT_DOUBLE_EQ(check.kinds.at("gemm").fitted_eff(), 6.0 / 20);
}

// ---------------------------------------------------------------- a recorded trace, by kind

TEST(PredictTrace, SyntheticTraceAttributesEachRangeByItsTableKind) {
  const nlohmann::json doc = {
      {"traceEvents",
       {
           {{"ph", "X"}, {"name", "gemm qkv"}, {"ts", 1.0}, {"dur", 500.0}},  // before the marker
           {{"ph", "i"}, {"name", "timed"}, {"ts", 10.0}},
           {{"ph", "X"}, {"name", "forward"}, {"ts", 10.0}, {"dur", 100.0}},
           {{"ph", "X"}, {"name", "layer"}, {"ts", 11.0}, {"dur", 60.0}},  // a block: no work of its own
           {{"ph", "X"}, {"name", "gemm qkv"}, {"ts", 12.0}, {"dur", 30.0}},
           {{"ph", "X"}, {"name", "gemm lm_head"}, {"ts", 50.0}, {"dur", 5.0}},
           {{"ph", "X"}, {"name", "attention"}, {"ts", 43.0}, {"dur", 7.0}},
           {{"ph", "X"}, {"name", "norm"}, {"ts", 11.0}, {"dur", 1.0}},
           {{"ph", "X"}, {"name", "cast weights"}, {"ts", 10.0}, {"dur", 0.5}},
           {{"ph", "X"}, {"name", "backward"}, {"ts", 200.0}, {"dur", 200.0}},
           {{"ph", "X"}, {"name", "attention backward"}, {"ts", 210.0}, {"dur", 20.0}},
           {{"ph", "X"}, {"name", "swiglu backward"}, {"ts", 250.0}, {"dur", 2.0}},
           {{"ph", "X"}, {"name", "reduce gradients"}, {"ts", 300.0}, {"dur", 50.0}},  // communication
           {{"ph", "X"}, {"name", "optimizer"}, {"ts", 400.0}, {"dur", 40.0}},
           {{"ph", "X"}, {"name", "gemm made up"}, {"ts", 410.0}, {"dur", 9.0}},  // not the model's
           {{"ph", "b"}, {"name", "gemm w2"}, {"ts", 420.0}},                     // async: not a leaf
       }}};
  const auto t = rp::trace_times(doc.dump(), "timed");
  EXPECT_DOUBLE_EQ(t.total, 100 + 200 + 40);
  const std::map<std::string, double> by = {
      {"gemm", 35}, {"attention", 27}, {"elementwise", 3.5}, {"optimizer", 40}};
  EXPECT_EQ(t.by, by);
  // No marker of that name: every range counts.
  EXPECT_DOUBLE_EQ(rp::trace_times(doc.dump(), "no such marker").by.at("gemm"), 535);

  const auto summary = rp::trace_summary(t);
  const std::map<std::string, double> want_summary = {
      {"GEMMs", 100 * 35 / 340.0},
      {"attention", 100 * 27 / 340.0},
      {"elementwise", 100 * 3.5 / 340.0},
      {"optimizer", 100 * 40 / 340.0},
      {"other (residual adds, casts)", 100 * (340 - 105.5) / 340.0}};
  ASSERT_EQ(summary.size(), want_summary.size());
  for (const auto& [k, v] : want_summary) EXPECT_DOUBLE_EQ(summary.at(k), v) << k;
  // The shares: elementwise is all of the passes that is not a GEMM, attention or the optimizer.
  const auto shares = rp::kind_shares(t);
  ASSERT_EQ(shares.size(), 4u);
  EXPECT_DOUBLE_EQ(shares.at("gemm"), 35 / 340.0);
  EXPECT_DOUBLE_EQ(shares.at("attention"), 27 / 340.0);
  EXPECT_DOUBLE_EQ(shares.at("optimizer"), 40 / 340.0);
  EXPECT_DOUBLE_EQ(shares.at("elementwise"), (340 - 35 - 27 - 40) / 340.0);

  // A trace without the model's phases has no shares; a forward-only one no optimizer entry.
  EXPECT_TRUE(rp::kind_shares(rp::TraceTimes{}).empty());
  EXPECT_TRUE(rp::trace_summary(rp::TraceTimes{}).empty());
  rp::TraceTimes fwd;
  fwd.total = 10;
  fwd.by["gemm"] = 4;
  EXPECT_EQ(rp::trace_summary(fwd).count("optimizer"), 0u);
  EXPECT_DOUBLE_EQ(rp::kind_shares(fwd).at("optimizer"), 0);
}

TEST(PredictTrace, NotATraceIsAnErrorNamingTheArgument) {
  for (const char* text : {"not json", "[1, 2]", "{\"events\": []}", "{\"traceEvents\": 3}"}) {
    const std::string msg = error_of([&] { rp::trace_times(text, "m"); }, text);
    EXPECT_NE(msg.find("trace_json"), std::string::npos) << text << ": " << msg;
  }
}

// A real step's trace: each kind's time is the sum of that kind's leaf ranges after the marker, summed
// here from the raw events and the range table.
TEST(PredictTrace, RecordedTrainerStepsMatchTheirRawLeafEvents) {
  rm::ModelConfig c = small_config();
  c.vocab_size = 61;
  rm::TrainConfig tc;
  tc.batch = 2;
  tc.seq = 16;
  rm::Trainer trainer(c, tc);
  std::vector<int32_t> in(32), tg(32);
  for (int i = 0; i < 32; ++i) {
    in[static_cast<size_t>(i)] = (i * 7) % 61;
    tg[static_cast<size_t>(i)] = (i * 5 + 3) % 61;
  }
  ridge::trace::start_recording();
  trainer.step(in.data(), tg.data());  // before the marker: left out
  ridge::trace::mark("timed steps");
  trainer.step(in.data(), tg.data());
  trainer.step(in.data(), tg.data());
  const std::string text = ridge::trace::to_json_text();
  const nlohmann::json doc = ridge::trace::to_json();
  ridge::trace::stop_recording();
  ridge::trace::clear();

  double since = -1;
  for (const auto& e : doc["traceEvents"])
    if (e.value("name", "") == "timed steps") since = e.value("ts", 0.0);
  ASSERT_GE(since, 0);
  double total = 0, all_total = 0;
  std::map<rm::ranges::Kind, double> leaves;
  int phases = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const auto* r = rm::ranges::find(e.value("name", ""));
    ASSERT_NE(r, nullptr) << e.dump();
    const double d = e.value("dur", 0.0);
    if (r->kind == rm::ranges::Kind::phase) all_total += d;
    if (e.value("ts", 0.0) < since) continue;
    if (r->kind == rm::ranges::Kind::phase) {
      total += d;
      ++phases;
    }
    leaves[r->kind] += d;
  }
  EXPECT_EQ(phases, 6);  // forward, backward, optimizer, twice
  double optimizer = 0;
  for (const auto& e : doc["traceEvents"])
    if (e.value("name", "") == "optimizer" && e.value("ts", 0.0) >= since) optimizer += e.value("dur", 0.0);

  const auto t = rp::trace_times(text, "timed steps");
  EXPECT_DOUBLE_EQ(t.total, total);
  EXPECT_LT(t.total, all_total);  // the step before the marker is left out
  ASSERT_EQ(t.by.size(), 4u);
  EXPECT_DOUBLE_EQ(t.by.at("gemm"), leaves[rm::ranges::Kind::gemm]);
  EXPECT_DOUBLE_EQ(t.by.at("attention"), leaves[rm::ranges::Kind::attention]);
  EXPECT_DOUBLE_EQ(t.by.at("elementwise"), leaves[rm::ranges::Kind::elementwise]);
  EXPECT_DOUBLE_EQ(t.by.at("optimizer"), optimizer);
  for (const auto& [k, v] : t.by) EXPECT_GT(v, 0) << k;
  // Leaves nest inside the phases: together they take no more than the step.
  EXPECT_LE(t.by.at("gemm") + t.by.at("attention") + t.by.at("elementwise") + t.by.at("optimizer"), t.total);
  double sum = 0;
  for (const auto& [k, v] : rp::kind_shares(t)) sum += v;
  EXPECT_NEAR(sum, 1.0, 1e-12);
}

// ---------------------------------------------------------------- misses and their reasons

TEST(PredictExplain, LinesForASyntheticCheck) {
  rp::Case c;
  c.label = "tiny ctx=32 fp32 step";
  c.config = small_config();  // d_model 64, 4 heads (head_dim 16), d_ff 176, vocab 256
  c.batch = 2;
  c.seq = 32;
  c.attention = "flash";
  rp::PredictionCheck p;
  p.predicted_ms = 12;
  p.measured_ms = 25;
  p.kinds["gemm"] = {2, 4, 11.9};          // -66.4%: ran at 16.8%, fitted 50%
  p.kinds["attention"] = {1, 5, 4};        // +25%: ran at 25%, fitted 20% (faster than fitted)
  p.kinds["elementwise"] = {0.5, 1, 7.5};  // -86.7%
  p.kinds["optimizer"] = {1, 2, 1.6};      // +25%
  const std::vector<std::string> want = {
      "tiny ctx=32 fp32 step (whole): predicted 12.0 ms, measured 25.0 ms (-52.0%); gemm carries -7.9 of the "
      "-13.0 "
      "ms: it ran at 16.8% of its roof vs fitted 50.0% (M=batch*context=64, sides 64..256; fitted on 1536 "
      "tokens x "
      "sides 640..12000: packing and small-k/odd-edge tiles cost more at these shapes)",
      "tiny ctx=32 fp32 step attention: predicted 5.0 ms, measured 4.0 ms (+25.0%, 16% of the step): ran at "
      "25.0% of "
      "its roof vs fitted 20.0% (flash at head_dim 16, T=32 causal; fitted on head_dim 64, T=384)",
      "tiny ctx=32 fp32 step elementwise: predicted 1.0 ms, measured 7.5 ms (-86.7%, 30% of the step): ran "
      "at 6.7% "
      "of its roof vs fitted 50.0% (norms, RoPE and casts ran below the stream the fit timed (short rows, "
      "reductions))",
      "tiny ctx=32 fp32 step gemm: predicted 4.0 ms, measured 11.9 ms (-66.4%, 48% of the step): ran at "
      "16.8% of its "
      "roof vs fitted 50.0% (M=batch*context=64, sides 64..256; fitted on 1536 tokens x sides 640..12000: "
      "packing "
      "and small-k/odd-edge tiles cost more at these shapes)",
      "tiny ctx=32 fp32 step optimizer: predicted 2.0 ms, measured 1.6 ms (+25.0%, 6% of the step): ran at "
      "62.5% of "
      "its roof vs fitted 50.0% (AdamW over the flat fp32 buffers; fitted on 7M parameters)",
  };
  EXPECT_EQ(rp::explain_misses(c, p, 10.0), want);
  // Above a limit of 70% only the elementwise kind misses; the step (-52%) does not.
  const auto few = rp::explain_misses(c, p, 70.0);
  ASSERT_EQ(few.size(), 1u);
  EXPECT_EQ(few[0], want[2]);
  EXPECT_TRUE(rp::explain_misses(c, p, 1000.0).empty());
  // A kind that ran faster than fitted, and a kind not measured at all (no line).
  EXPECT_EQ(rp::kind_hint("elementwise", c, {1, 2, 1}), "operands stay in cache between the fused passes");
  EXPECT_EQ(rp::kind_hint("gemm", c, {1, 2, 1}),
            "M=batch*context=64, sides 64..256; fitted on 1536 tokens x sides 640..12000");
  p.kinds["optimizer"].measured_ms = 0;
  EXPECT_EQ(rp::explain_misses(c, p, 10.0).size(), 4u);
}

// ---------------------------------------------------------------- the efficiency file

TEST(PredictEfficiencyFile, RoundTrip) {
  ridge::test::TempDir dir;
  rp::Efficiencies e;
  e.by_class = {{"fp32 gemm nt <2GF", 0.375}, {"bf16 attention", 0.0625}, {"optimizer", 1.0}};
  e.shapes = {{"fp32 gemm nt <2GF", "nt M=1 N=2 K=3"}, {"optimizer", "AdamW over 7 parameters"}};
  e.chip = "test chip";
  e.threads = 3;
  e.chip_file_mtime = 1234567890123;
  const std::string path = dir.file("this.efficiency.t3.json");
  rp::write_efficiencies(path, e);
  const auto back = rp::read_efficiencies(path);
  EXPECT_EQ(back.by_class, e.by_class);
  EXPECT_EQ(back.shapes, e.shapes);
  EXPECT_EQ(back.chip, e.chip);
  EXPECT_EQ(back.threads, e.threads);
  EXPECT_EQ(back.chip_file_mtime, e.chip_file_mtime);
  EXPECT_EQ(back.version, rp::kFitVersion);
  // The document's keys (what earlier runs wrote, and what is read back).
  const auto doc = nlohmann::json::parse(ridge::test::read_bytes(path));
  std::vector<std::string> keys;
  for (const auto& [k, v] : doc.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"chip", "chip_file_mtime", "efficiency", "note", "shapes",
                                            "threads", "version"}));
  // A file with only the fields a fit needs (as the CLI tests write) is read too.
  ridge::test::write_bytes(path, R"({"chip_file_mtime": 5, "efficiency": {}, "shapes": {}})");
  const auto minimal = rp::read_efficiencies(path);
  EXPECT_EQ(minimal.chip_file_mtime, 5);
  EXPECT_TRUE(minimal.by_class.empty());
  EXPECT_EQ(minimal.version, 1);  // no version: a fit from before the grouped GEMMs' classes
}

TEST(PredictEfficiencyFile, BadFilesAreOneErrorNamingThePath) {
  ridge::test::TempDir dir;
  const std::string path = dir.file("eff.json");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"garbled", "{\"chip_file_mtime\": 5, \"efficiency\": {"},
      {"not an object", "[1, 2, 3]"},
      {"foreign (a chip file)", R"({"id": "x", "peak_flops": {"fp32": 1e12}, "memory": []})"},
      {"no shapes", R"({"chip_file_mtime": 5, "efficiency": {}})"},
      {"efficiency above 1", R"({"chip_file_mtime": 5, "efficiency": {"optimizer": 1.5}, "shapes": {}})"},
      {"efficiency 0", R"({"chip_file_mtime": 5, "efficiency": {"optimizer": 0}, "shapes": {}})"},
      {"efficiency a string", R"({"chip_file_mtime": 5, "efficiency": {"optimizer": "x"}, "shapes": {}})"},
      {"mtime a string", R"({"chip_file_mtime": "5", "efficiency": {}, "shapes": {}})"},
      {"shape a number", R"({"chip_file_mtime": 5, "efficiency": {}, "shapes": {"optimizer": 1}})"},
  };
  for (const auto& [what, text] : bad) {
    ridge::test::write_bytes(path, text);
    const std::string msg = error_of([&] { rp::read_efficiencies(path); }, what);
    EXPECT_NE(msg.find(path), std::string::npos) << what << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << what << ": " << msg;
  }
  const std::string missing = dir.file("absent.json");
  const std::string msg = error_of([&] { rp::read_efficiencies(missing); }, "missing");
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
}

TEST(PredictEfficiencyFile, SavedFitForTheChipFileIsReusedNotRefitted) {
  ridge::test::TempDir dir;
  const std::string chip_file = dir.file("this.json");
  ridge::test::write_bytes(chip_file, "{}");
  EXPECT_EQ(rp::efficiency_path(chip_file, 4), dir.file("this.efficiency.t4.json"));
  rp::Efficiencies saved;
  saved.by_class = {{"optimizer", 0.3}};
  saved.chip_file_mtime = rp::efficiency_file_mtime(chip_file);
  rp::FitOptions o;
  o.chip_file = chip_file;
  o.path = rp::efficiency_path(chip_file, 4);
  rp::write_efficiencies(o.path, saved);
  // Values no fit would produce on this machine's kernels: returned as saved.
  const auto e = rp::efficiencies(rr::Chip{}, o);
  EXPECT_EQ(e.by_class, saved.by_class);
  const std::string msg =
      error_of([&] { rp::efficiency_file_mtime(dir.file("absent.json")); }, "absent chip file");
  EXPECT_NE(msg.find("chip_file"), std::string::npos) << msg;
}
