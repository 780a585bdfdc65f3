// The roofline CLI: exit codes, one-line errors, JSON documents with the worked numbers.
#include "ridge/build_paths.h"  // RIDGE_SOURCE_DIR, RIDGE_BINARY (generated)
#include <unistd.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "run.hpp"
#include "core/json.hpp"

namespace {

using ridge::test::run;
using ridge::test::RunResult;

nlohmann::json json_of(const RunResult& r) {
  EXPECT_EQ(r.code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

void expect_user_error(const std::string& args, const std::string& mention) {
  const auto r = run(args);
  EXPECT_EQ(r.code, 2) << args << "\n" << r.out << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  EXPECT_EQ(r.err.rfind("ridge: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(mention), std::string::npos) << args << ": " << r.err;
}

}  // namespace

TEST(CliRoofline, HwListAndShow) {
  const auto r = run("hw list");
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* id : {"v100", "a100", "h100", "h200", "b200", "tpu-v5e", "tpu-v5p", "tpu-v6e",
                         "xeon-8480plus", "epyc-9654"})
    EXPECT_NE(r.out.find(id), std::string::npos) << id;
  const auto j = json_of(run("hw list --json"));
  EXPECT_GE(j["chips"].size(), 10u);
  const auto h = json_of(run("hw show h100 --json"));
  EXPECT_DOUBLE_EQ(h["peak_flops"]["bf16"]["value"].get<double>(), 9.89e14);
  const auto s = run("hw show a100");
  EXPECT_EQ(s.code, 0);
  EXPECT_NE(s.out.find("312 TFLOP/s"), std::string::npos) << s.out;
  expect_user_error("hw show h1000", "h1000");
}

TEST(CliRoofline, MatmulOnH100) {
  const auto j = json_of(run("roofline matmul --b 4096 --d 8192 --f 8192 --dtype bf16 --hw h100 --json"));
  EXPECT_DOUBLE_EQ(j["flops"].get<double>(), 2.0 * 4096 * 8192 * 8192);
  EXPECT_DOUBLE_EQ(j["memory_bytes"].get<double>(), 2.0 * (4096.0 * 8192 * 2 + 8192.0 * 8192));
  ASSERT_EQ(j["bounds"].size(), 1u);
  const auto& b = j["bounds"][0];
  EXPECT_EQ(b["binding"], "compute");
  EXPECT_NEAR(b["t_math_s"].get<double>(), 2.0 * 4096 * 8192 * 8192 / 9.89e14, 1e-12);
  EXPECT_LE(b["t_upper_s"].get<double>(), 2 * b["t_lower_s"].get<double>());
  // Readable by default, with units.
  const auto t = run("roofline matmul --b 4096 --d 8192 --f 8192 --dtype bf16 --hw h100");
  EXPECT_EQ(t.code, 0);
  EXPECT_NE(t.out.find("T_lower"), std::string::npos);
  EXPECT_NE(t.out.find("FLOP/B"), std::string::npos);
}

TEST(CliRoofline, PerOperandDtypesAndSeveralChips) {
  const auto j = json_of(
      run("roofline matmul --b 64 --d 1024 --f 2048 --x-dtype bf16 --w-dtype int8 --hw tpu-v5e,h100 --json"));
  EXPECT_EQ(j["compute_dtype"], "bf16");
  EXPECT_DOUBLE_EQ(j["memory_bytes"].get<double>(), 2.0 * 64 * 1024 + 1024.0 * 2048 + 2.0 * 64 * 2048);
  EXPECT_EQ(j["bounds"].size(), 2u);
}

TEST(CliRoofline, CriticalBatchTpuV5e) {
  const auto j = json_of(run("roofline critical-batch --hw tpu-v5e --dtype bf16 --json"));
  EXPECT_NEAR(j["batch"]["asymptotic_batch"].get<double>(), 1.97e14 / 8.19e11, 1e-6);
  EXPECT_GT(j["batch"]["exact_batch"].get<int64_t>(), 240);
  EXPECT_NEAR(j["split"]["threshold_d"].get<double>(), 2 * 1.97e14 / 4.5e10, 1e-6);
  EXPECT_EQ(j["split"]["exact_d"].get<int64_t>(), 8756);
}

TEST(CliRoofline, AllReduce) {
  const auto j = json_of(run("roofline allreduce --bytes 1GiB --chips 8 --hw h100 --json"));
  const auto& b = j["bounds"][0];
  EXPECT_EQ(b["binding"], "link");
  EXPECT_NEAR(b["t_link_s"].get<double>(), 2.0 * 7 / 8 * 1073741824.0 / 4.5e11, 1e-12);
  const auto g = json_of(run("roofline allgather --bytes 1GiB --chips 8 --hw h100 --link inter_node --json"));
  EXPECT_NEAR(g["bounds"][0]["t_link_s"].get<double>(), 7.0 / 8 * 1073741824.0 / 5e10, 1e-12);
}

TEST(CliRoofline, EveryOpPrintsJson) {
  for (const char* args :
       {"dot --n 1000", "elementwise --n 1M", "softmax --rows 8 --cols 4096",
        "attention --impl naive --seq 4096", "attention --impl flash --seq 4096 --causal --backward",
        "fp8-gemm --m 128 --n 7168 --k 2048", "grouped-gemm --layout contiguous --groups 4",
        "grouped-gemm --layout masked --groups 2 --m-per-group 512 --valid 100,0",
        "reducescatter --bytes 64MiB --chips 4", "send --bytes 1MiB", "per-example --b 8",
        "batched-matmul --batch 4 --b 128", "split-matmul --b 16 --d 16384 --f 4096"}) {
    const auto r = run(std::string("roofline ") + args + " --json");
    ASSERT_EQ(r.code, 0) << args << ": " << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_TRUE(j.contains("bounds")) << args;
    const auto t = run(std::string("roofline ") + args);
    EXPECT_EQ(t.code, 0) << args;
    EXPECT_NE(t.out.find("bound by"), std::string::npos) << args;
  }
  const auto d = json_of(run("roofline dot --n 1000000 --json"));
  EXPECT_NEAR(d["intensity"].get<double>(), 0.5, 1e-6);
}

TEST(CliRoofline, BadInputIsOneLineExit2) {
  expect_user_error("roofline matmul --b 0 --hw h100", "--b");
  expect_user_error("roofline matmul --b -4 --hw h100", "--b");
  expect_user_error("roofline matmul --b 1e30 --hw h100", "--b");
  expect_user_error("roofline matmul --b 1e3 --hw h100", "is not a decimal integer");  // a size is an integer
  expect_user_error("roofline matmul --b 1099511627776 --d 1099511627776", "2^60");
  expect_user_error("roofline matmul --dtype bf17", "bf17");
  expect_user_error("roofline matmul --hw v100", "bf16");
  expect_user_error("roofline matmul --hw nosuchchip", "nosuchchip");
  expect_user_error("roofline allreduce --bytes -1GiB", "--bytes");
  expect_user_error("roofline allreduce --bytes 2EiB", "--bytes");
  expect_user_error("roofline allreduce --chips 1", "--chips");
  expect_user_error("roofline attention --impl slow", "--impl");
  expect_user_error("roofline allreduce --hw tpu-v5e --link inter_node", "inter-node");
}

TEST(CliRoofline, MalformedChipFileNamesFileAndField) {
  const auto p =
      std::filesystem::temp_directory_path() / ("ridge_cli_bad_chip." + std::to_string(::getpid()) + ".json");
  std::ofstream(p) << R"({"id": "bad", "name": "Bad", "kind": "gpu",
    "peak_flops": {"bf16": {"value": -1, "source": "x"}},
    "memory": [{"level": "hbm", "bandwidth": {"value": 1e12, "source": "x"}}]})";
  expect_user_error("roofline matmul --hw " + p.string(), p.string());
  expect_user_error("hw show " + p.string(), "peak_flops.bf16.value");
}

// The report with a given chip file instead of a probe (tests must not time the machine), a
// measured row through --results, and the chart when matplotlib is there.
TEST(CliRoofline, ReportPlacesShapesAndMeasuredRowsOnBothChips) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("ridge_cli_report." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto rows = dir / "rows.jsonl";
  std::ofstream(rows)
      << R"({"benchmark": "gemm", "case": {"m": 128, "n": 7168, "k": 2048}, "dtype": "bf16", "gflops": 50000, "flops": 3758096384, "bytes": 31719424})"
      << "\n"
      << R"({"benchmark": "stream", "case": {"bytes": 1024}, "dtype": "fp32", "gbps": 30})"
      << "\n";
  const auto out = (dir / "chart").string();
  const auto r =
      run("report --this " + std::string(RIDGE_SOURCE_DIR) + "/hardware/tpu-v5e.json --hw h100 --out " + out +
          " --results " + rows.string() + " --no-measure --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["gpu"], "h100");
  EXPECT_GT(j["shapes"].size(), 40u);
  const auto& first = j["shapes"][0];
  EXPECT_TRUE(first["h100"].is_object());
  EXPECT_TRUE(first["tpu-v5e"].is_object());
  ASSERT_EQ(j["measured"].size(), 1u);  // the bandwidth-only row has no place on a FLOP/s axis
  // bf16 bound on v5e at intensity 118.5: min(197e12, 118.5 * 8.19e11).
  EXPECT_NEAR(j["measured"][0]["bound_flops"].get<double>(), 3758096384.0 / 31719424 * 8.19e11, 1e3);
  if (j["plot"].contains("error")) {
    EXPECT_NE(j["plot"]["error"].get<std::string>().find("matplotlib"), std::string::npos) << j["plot"];
    GTEST_SKIP() << "no matplotlib: " << j["plot"]["error"];
  }
  EXPECT_GT(std::filesystem::file_size(out + ".png"), 10000u);
  EXPECT_GT(std::filesystem::file_size(out + ".svg"), 10000u);
}

TEST(CliRoofline, PlotNeedsAChipAndReadsResults) {
  expect_user_error("roofline plot --hw nosuch", "nosuch");
  const auto bad = std::filesystem::temp_directory_path() /
                   ("ridge_cli_bad_rows." + std::to_string(::getpid()) + ".jsonl");
  std::ofstream(bad) << "{\"gflops\": 1}\nnot json\n";
  expect_user_error("roofline plot --hw h100 --results " + bad.string(), "line 1");
}

TEST(CliRoofline, ModelStepOnAnyChip) {
  const auto j =
      json_of(run("roofline model --size tiny --context 128 --batch 2 --precision bf16 --hw h100 --json"));
  EXPECT_EQ(j["chip"], "h100");
  EXPECT_EQ(j["shape"]["operand"], "bf16");
  // The per-pass sums add up to the step, and the step's bound is the sum of the ops' bounds.
  double passes = 0, ops = 0;
  for (const auto& [k, p] : j["passes"].items()) passes += p["t_lower_s"].get<double>();
  for (const auto& o : j["ops"]) ops += o["t_lower_step_s"].get<double>();
  EXPECT_NEAR(passes, j["step"]["t_lower_s"].get<double>(), 1e-12);
  EXPECT_NEAR(ops, j["step"]["t_lower_s"].get<double>(), 1e-12);
  EXPECT_GT(j["step"]["tokens_per_s_bound"].get<double>(), 0);
  // A size that does not fit here (2.7B) is still analysed.
  const auto r = run("roofline model --size 2.7B --context 1024 --hw tpu-v5e --brief");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("step time >="), std::string::npos);
}

TEST(CliRoofline, ModelBadInput) {
  expect_user_error("roofline model --size huge", "huge");
  expect_user_error("roofline model --precision fp8", "fp8");
  expect_user_error("roofline model --attention sparse", "sparse");
  expect_user_error("roofline model --heads 5", "--heads");
  expect_user_error("roofline model --kv-heads 5", "--kv-heads");  // small: 12 heads
  expect_user_error("roofline model --kv-heads 0", "--kv-heads");
  expect_user_error("roofline ddp --kv-heads 7", "--kv-heads");
  expect_user_error("roofline model --batch 0", "--batch");
}

// Grouped-query attention (--kv-heads): the shape says so, k and v shrink the parameters and the step's
// FLOPs by the closed form (2 (D - Dkv) D per layer in k_proj and v_proj), and the text names the kv heads.
TEST(CliRoofline, ModelWithKvHeads) {
  const std::string base = "roofline model --size small --context 256 --batch 2 --hw h100 --json";
  const auto mha = json_of(run(base));
  const auto gqa = json_of(run(base + " --kv-heads 4"));
  EXPECT_EQ(mha["shape"]["kv_heads"], 12);
  EXPECT_EQ(gqa["shape"]["kv_heads"], 4);
  EXPECT_EQ(gqa["size"], "small (modified)");
  // small: D 768, 12 heads of 64, 12 layers; Dkv = 4 * 64 = 256.
  const double per_layer = 2.0 * (768 - 256) * 768;
  EXPECT_DOUBLE_EQ(mha["params"].get<double>() - gqa["params"].get<double>(), 12 * per_layer);
  // Forward and backward GEMMs: 6 FLOPs per parameter per token; attention's FLOPs do not change.
  EXPECT_DOUBLE_EQ(mha["model_flops"].get<double>() - gqa["model_flops"].get<double>(),
                   6.0 * 512 * 12 * per_layer);
  const auto t = run("roofline model --size small --kv-heads 4 --brief");
  EXPECT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("12 heads (4 kv heads)"), std::string::npos) << t.out;
  const auto d = run("roofline ddp --size small --kv-heads 4");
  EXPECT_EQ(d.code, 0) << d.err;
  EXPECT_NE(d.out.find("12 heads (4 kv heads)"), std::string::npos) << d.out;
}
