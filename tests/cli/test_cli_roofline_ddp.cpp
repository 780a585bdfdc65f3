// `ridge roofline ddp`: the analyzer's data-parallel table checked against the ring formulas computed
// here from the model's sizes, and one clear line with exit 2 for bad input. Also `ridge bench
// allreduce` / `ddp` refusing to run as a lone process.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "run.hpp"

using nlohmann::json;
using ridge::test::run;

namespace {

// CS336 "small" at vocab 10000: V D (embedding) + L (4 D^2 + 3 D F + 2 D) + D + V D (lm_head).
double small_params() {
  const double V = 10000, D = 768, F = 3072, L = 12;
  return 2 * V * D + L * (4 * D * D + 3 * D * F + 2 * D) + D;
}

const json* find_mode(const json& doc, const std::string& label) {
  for (const auto& m : doc["modes"])
    if (m["setting"] == label) return &m;
  return nullptr;
}

}  // namespace

TEST(CliRooflineDdp, SmallOnEightH100sOverNvlink) {
  const auto r = run("roofline ddp --size small --ranks 8 --link nvlink --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json doc = json::parse(r.out);
  const double P = small_params();
  EXPECT_DOUBLE_EQ(doc["params"].get<double>(), P);
  EXPECT_DOUBLE_EQ(doc["gradient_bytes"].get<double>(), 4 * P);
  // flat: one ring all-reduce of the fp32 gradients: 8.4 us + 2(8-1) x 3.4 us + 2 (7/8) 4P / 450 GB/s.
  const json* flat = find_mode(doc, "flat");
  ASSERT_NE(flat, nullptr);
  const double want = 8.4e-6 + 14 * 3.4e-6 + 2.0 * 7 / 8 * 4 * P / 450e9;
  EXPECT_NEAR((*flat)["comm_s"].get<double>(), want, 1e-9);
  EXPECT_NEAR((*flat)["exposed_s"].get<double>(), want, 1e-9);
  for (const char* label : {"naive", "flat", "overlap", "bucketed 25 MB", "zero1"}) {
    const json* m = find_mode(doc, label);
    ASSERT_NE(m, nullptr) << label;
    // Everything issued is either hidden behind backward or exposed after it.
    EXPECT_NEAR((*m)["hidden_s"].get<double>() + (*m)["exposed_s"].get<double>(),
                (*m)["comm_s"].get<double>(), 1e-12);
    EXPECT_NEAR((*m)["step_s"].get<double>(),
                (*m)["compute_s"].get<double>() + (*m)["exposed_s"].get<double>(), 1e-12);
  }
  // zero1 on the best bucket size: its reduce-scatters hide behind backward like the buckets' all-reduces.
  const std::string zb =
      "zero1 (bucketed " + fmt::format("{:g}", doc["best_bucket_mb"].get<double>()) + " MB)";
  const json* z = find_mode(doc, zb);
  ASSERT_NE(z, nullptr) << zb;
  EXPECT_GT((*z)["hidden_s"].get<double>(), 0) << zb;
  EXPECT_LE((*z)["exposed_s"].get<double>(), find_mode(doc, "zero1")->at("exposed_s").get<double>() + 1e-12);
  // Overlap cannot expose more than flat does here (every gradient is final by the end of backward).
  EXPECT_LE(find_mode(doc, "bucketed 25 MB")->at("exposed_s").get<double>(), want + 1e-12);
  // The best bucket is one of the candidates and no candidate beats it.
  const double best = doc["best_bucket_mb"];
  double best_step = 0, min_step = 1e30;
  for (const auto& b : doc["buckets"]) {
    if (b["bucket_mb"] == best) best_step = b["step_s"];
    min_step = std::min(min_step, b["step_s"].get<double>());
  }
  EXPECT_EQ(best_step, min_step);
  EXPECT_EQ(doc["buckets"].size(), 9u);
  // fp32: 4P parameters + 4P gradients + 8P AdamW; sharded over 8: 4P + 4P + P.
  EXPECT_DOUBLE_EQ(doc["memory_per_rank"]["total"].get<double>(), 16 * P);
  EXPECT_DOUBLE_EQ(doc["memory_per_rank"]["sharded_total"].get<double>(), 9 * P);
}

TEST(CliRooflineDdp, InfinibandIsSlowerAndTextNamesTheBestBucket) {
  const auto nv = run("roofline ddp --size small --ranks 16 --link nvlink --json");
  const auto ib = run("roofline ddp --size small --ranks 16 --link ib --json");
  ASSERT_EQ(nv.code, 0) << nv.err;
  ASSERT_EQ(ib.code, 0) << ib.err;
  EXPECT_GT(find_mode(json::parse(ib.out), "flat")->at("comm_s").get<double>(),
            find_mode(json::parse(nv.out), "flat")->at("comm_s").get<double>() * 8);  // 450 vs 50 GB/s
  const auto t =
      run("roofline ddp --size tiny --ranks 2 --precision bf16 --link-gbps 100 --link-latency-us 2");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("best bucket:"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("fp32 master copies"), std::string::npos) << t.out;  // bf16 has master copies
  EXPECT_NE(t.out.find("--link-gbps 100"), std::string::npos) << t.out;
}

TEST(CliRooflineDdp, BadInputIsOneLineExitTwo) {
  for (const std::string args : {"--ranks 0", "--ranks x", "--link ethernet", "--link-gbps -1",
                                 "--link-gbps nan", "--link-latency-us -3", "--buckets 1,x", "--buckets 0",
                                 "--size huge", "--precision fp8", "--hw nosuchchip"}) {
    SCOPED_TRACE(args);
    const auto r = run("roofline ddp " + args);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("ridge: ", 0), 0u) << r.err;
  }
}

TEST(CliRooflineDdp, DistBenchmarksRefuseALoneProcess) {
  for (const char* b : {"allreduce", "ddp"}) {
    const auto r = run(std::string("bench ") + b + " --quick");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
#ifdef RIDGE_HAVE_DISTRIBUTED
    EXPECT_NE(r.err.find("mpirun -np 2"), std::string::npos) << r.err;
#endif
  }
}

// `roofline model` and `roofline ddp` declare the model flags from one definition (cli::ModelFlags): the
// same help line for each shared flag (--batch says what a batch is in each), and the same overrides
// giving the same model, whose parameter count is worked out here from its shapes.
TEST(CliRooflineDdp, ModelFlagsAreOneDefinitionSharedWithRooflineModel) {
  const auto help_model = run("roofline model --help"), help_ddp = run("roofline ddp --help");
  ASSERT_EQ(help_model.code, 0);
  ASSERT_EQ(help_ddp.code, 0);
  auto line_of = [](const std::string& help, const std::string& flag) {
    const auto at = help.find("  " + flag + " ");
    if (at == std::string::npos) return std::string("(missing)");
    return help.substr(at, help.find('\n', at) - at);
  };
  for (const char* flag : {"--size", "--vocab", "--context", "--d-model", "--d-ff", "--layers", "--heads",
                           "--precision", "--attention"}) {
    EXPECT_NE(line_of(help_model.out, flag), "(missing)") << flag;
    EXPECT_EQ(line_of(help_model.out, flag), line_of(help_ddp.out, flag)) << flag;
  }
  EXPECT_NE(line_of(help_model.out, "--batch"), "(missing)");
  EXPECT_NE(line_of(help_ddp.out, "--batch").find("sequences per rank"), std::string::npos);

  const std::string flags =
      " --size tiny --d-model 128 --layers 3 --heads 4 --d-ff 384 --vocab 512 --context 64 "
      "--batch 2 --precision bf16 --json";
  const auto m = run("roofline model" + flags), d = run("roofline ddp --ranks 2" + flags);
  ASSERT_EQ(m.code, 0) << m.err;
  ASSERT_EQ(d.code, 0) << d.err;
  const json jm = json::parse(m.out), jd = json::parse(d.out);
  const double V = 512, D = 128, F = 384, L = 3;
  const double params = 2 * V * D + L * (4 * D * D + 3 * D * F + 2 * D) + D;
  EXPECT_EQ(jm["params"].get<double>(), params);
  EXPECT_EQ(jd["params"].get<double>(), params);
  EXPECT_EQ(jm["shape"]["batch"], 2);
  EXPECT_EQ(jd["batch_per_rank"], 2);
  EXPECT_EQ(jm["shape"]["seq"], 64);
  EXPECT_EQ(jd["context"], 64);
  EXPECT_EQ(jd["precision"], "bf16");
  EXPECT_EQ(jd["model"], "tiny (modified)");
  // A bad value of a shared flag is the same one line from both.
  const auto bm = run("roofline model --heads 5"), bd = run("roofline ddp --heads 5");
  EXPECT_EQ(bm.code, 2);
  EXPECT_EQ(bd.code, 2);
  EXPECT_EQ(bm.err, bd.err);
  EXPECT_NE(bm.err.find("--heads"), std::string::npos) << bm.err;
}
