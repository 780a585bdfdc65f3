// `ridge roofline decode`: the JSON document against the closed forms, the table, a model from a config file,
// the batch sweep, and one line with exit code 2 for bad input.
#include <unistd.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "run.hpp"

namespace {

using ridge::test::run;
using ridge::test::RunResult;

nlohmann::json json_of(const std::string& args) {
  const auto r = run(args);
  EXPECT_EQ(r.code, 0) << args << "\n" << r.err;
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

// The "small" preset (D 768, F 3072, 12 layers, 12 heads, vocab 10000) at batch 4, context 256, bf16, on
// h100.
TEST(CliRooflineDecode, JsonAgainstTheClosedForms) {
  const auto j = json_of("roofline decode --size small --batch 4 --context-length 256 --hw h100 --json");
  EXPECT_EQ(j["model"], "small");
  EXPECT_EQ(j["chip"], "h100");
  const auto& d = j["decode"];
  const double B = 4, C = 256, L = 12, D = 768, F = 3072, V = 10000;
  const double linears = L * (4 * D * D + 3 * D * F);
  EXPECT_DOUBLE_EQ(d["flops"].get<double>(), 2 * B * linears + 2 * B * D * V + 4 * B * D * C * L);
  EXPECT_DOUBLE_EQ(d["bytes"]["kv_read"].get<double>(), B * C * L * 2 * D * 2);
  EXPECT_DOUBLE_EQ(d["bytes"]["kv_write"].get<double>(), B * L * 2 * D * 2);
  EXPECT_DOUBLE_EQ(d["bytes"]["weights"].get<double>(),
                   2 * linears + 4 * (2 * L + 1) * D + 2 * V * D + 2 * B * D);
  const double total = d["bytes"]["total"].get<double>();
  EXPECT_DOUBLE_EQ(total, d["bytes"]["weights"].get<double>() + d["bytes"]["kv_read"].get<double>() +
                              d["bytes"]["kv_write"].get<double>() + d["bytes"]["activations"].get<double>());
  EXPECT_NEAR(d["t_memory_s"].get<double>(), total / 3.35e12, 1e-15);
  EXPECT_NEAR(d["t_math_s"].get<double>(), d["flops"].get<double>() / 9.89e14, 1e-15);
  EXPECT_EQ(d["binding"], "memory");
  EXPECT_NEAR(d["tokens_per_s"].get<double>(), B / d["t_lower_s"].get<double>(), 1e-6);
  EXPECT_EQ(d["level"], "hbm");
  EXPECT_EQ(j["dtypes"]["kv"], "bf16");
  EXPECT_TRUE(j["prefill"].is_null());
  EXPECT_TRUE(j["sweep"].empty());
  // The critical batch at this context: the limit intensity sits below the ridge point, so never.
  const auto& c = j["critical_batch"];
  EXPECT_TRUE(c["batch"].is_null());
  EXPECT_LT(c["limit_intensity"].get<double>(), c["ridge_intensity"].get<double>());
  EXPECT_EQ(c["batch_weights_only"].get<int64_t>(), 296);
}

TEST(CliRooflineDecode, TableSweepAndPrefill) {
  const auto r =
      run("roofline decode --size 2.7B --context 1024 --context-length 16 --batch 8 --prompt-length 512 --hw "
          "h100 "
          "--sweep-batch");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* s :
       {"decode step: batch 8, context 16", "prefill: batch 8 prompts of 512 tokens", "T_lower", "tokens/s",
        "KV cache read", "critical batch at context 16", "compute-bound from B =", "batch sweep"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  const auto j = json_of(
      "roofline decode --size 2.7B --context 1024 --context-length 16 --batch 8 --prompt-length 512 --hw "
      "h100 "
      "--sweep-batch --json");
  const int64_t critical = j["critical_batch"]["batch"].get<int64_t>();
  const auto& sweep = j["sweep"];
  ASSERT_GE(sweep.size(), 2u);
  // Rows at 1, 2, 4, ...: memory-bound below the critical batch, compute-bound from the first row at or past
  // it.
  for (size_t i = 0; i < sweep.size(); ++i) {
    const int64_t b = sweep[i]["batch"].get<int64_t>();
    EXPECT_EQ(b, int64_t{1} << i);
    EXPECT_EQ(sweep[i]["binding"], b >= critical ? "compute" : "memory") << b;
  }
  EXPECT_GE(sweep.back()["batch"].get<int64_t>(), critical);
  EXPECT_LT(sweep[sweep.size() - 2]["batch"].get<int64_t>(), critical);
  EXPECT_EQ(j["prefill"]["prompt"], 512);
  EXPECT_EQ(j["prefill"]["phase"], "prefill");
}

TEST(CliRooflineDecode, Fp8WeightsGqaAndAConfigFile) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("ridge_cli_decode." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto cfg = dir / "model.json";
  std::ofstream(cfg) << R"({"vocab_size": 1000, "context_length": 512, "d_model": 256, "num_layers": 2,
                           "num_heads": 8, "num_kv_heads": 2, "d_ff": 768})";
  const auto j = json_of("roofline decode --config " + cfg.string() + " --weights fp8 --hw h100 --json");
  EXPECT_EQ(j["shape"]["kv_heads"], 2);
  EXPECT_EQ(j["dtypes"]["weights"], "fp8_e4m3");
  EXPECT_EQ(j["dtypes"]["head"], "bf16");
  EXPECT_EQ(j["decode"]["context"], 512);  // the model's context by default
  // K/V: 2 kv heads x d_head 32 = 64 values each per layer and token, bf16.
  EXPECT_DOUBLE_EQ(j["decode"]["bytes"]["kv_read"].get<double>(), 1.0 * 512 * 2 * 2 * 64 * 2);
  double scales = -1;
  for (const auto& t : j["decode"]["memory"])
    if (t["name"] == "layer linear scales (128x128)") scales = t["bytes"].get<double>();
  // Per layer: q, o [256,256] 2x2; k, v [64,256] 1x2; w1, w3 [768,256] 6x2; w2 [256,768] 2x6: 48 fp32.
  EXPECT_DOUBLE_EQ(scales, 2 * 48 * 4);
  // --kv-heads overrides the file; --size and --config together are refused.
  EXPECT_EQ(json_of("roofline decode --config " + cfg.string() + " --kv-heads 8 --json")["shape"]["kv_heads"],
            8);
  expect_user_error("roofline decode --config " + cfg.string() + " --size small", "--config");
  expect_user_error("roofline decode --config " + cfg.string() + " --kv-heads 3", "--kv-heads");
  std::ofstream(dir / "bad.json") << R"({"vocab_size": 1000})";
  expect_user_error("roofline decode --config " + (dir / "bad.json").string(), "--config");
  std::filesystem::remove_all(dir);
}

TEST(CliRooflineDecode, AChipFileWithCacheLevels) {
  // A CPU chip whose l3 holds the tiny model: --level auto bounds there, the default at dram.
  const auto dir =
      std::filesystem::temp_directory_path() / ("ridge_cli_decode_chip." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto chip = dir / "cpu.json";
  std::ofstream(chip) << R"({"id": "cpu", "name": "A CPU", "kind": "cpu",
    "peak_flops": {"fp32": {"value": 5e11, "source": "test"}, "bf16": {"value": 1e12, "source": "test"}},
    "memory": [{"level": "dram", "bandwidth": {"value": 5e10, "source": "test"}, "capacity": {"value": 1e11, "source": "test"}},
               {"level": "l3", "bandwidth": {"value": 2e11, "source": "test"}, "capacity": {"value": 1e8, "source": "test"}}]})";
  const std::string base = "roofline decode --size tiny --context 128 --weights fp8 --hw " + chip.string();
  const auto dram = json_of(base + " --json");
  EXPECT_EQ(dram["decode"]["level"], "dram");
  EXPECT_EQ(dram["decode"]["fits_level"], "l3");
  EXPECT_EQ(dram["decode"]["flops_parts"][0]["compute_dtype"], "bf16");  // no fp8 peak: a note says so
  const auto l3 = json_of(base + " --level auto --json");
  EXPECT_EQ(l3["decode"]["level"], "l3");
  EXPECT_EQ(l3["critical_batch"]["level"], "l3");
  const auto t = run(base);
  EXPECT_NE(t.out.find("no fp8 peak"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("fit in l3"), std::string::npos) << t.out;
  std::filesystem::remove_all(dir);
}

TEST(CliRooflineDecode, BadInputIsOneLineExit2) {
  expect_user_error("roofline decode --batch 0", "--batch");
  expect_user_error("roofline decode --batch -3", "--batch");
  expect_user_error("roofline decode --context-length 0", "--context-length");
  expect_user_error("roofline decode --context-length 300", "--context-length");  // beyond --context 256
  expect_user_error("roofline decode --prompt-length 4096", "--prompt-length");
  expect_user_error("roofline decode --weights fp16", "--weights");
  expect_user_error("roofline decode --head int8", "--head");
  expect_user_error("roofline decode --embedding fp8", "--embedding");
  expect_user_error("roofline decode --kv fp8", "--kv");
  expect_user_error("roofline decode --kv-heads 5", "--kv-heads");
  expect_user_error("roofline decode --kv-heads 0x4", "--kv-heads");
  expect_user_error("roofline decode --size huge", "huge");
  expect_user_error("roofline decode --heads 5", "--heads");
  expect_user_error("roofline decode --level l3", "--level");
  expect_user_error("roofline decode --hw nosuchchip", "nosuchchip");
  expect_user_error("roofline decode --config /nonexistent/model.json", "--config");
  expect_user_error("roofline decode --context 1000000 --context-length 1000000 --batch 1000000000",
                    "--batch/--context-length");
}
