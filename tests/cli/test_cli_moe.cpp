// The MoE flags (issue 40), declared once for `ridge roofline model`, `roofline decode`, `roofline ddp`,
// `ridge train` and `ridge generate`: what they make of the model (the JSON documents against counts made
// here), the routing histogram of `roofline decode`, `roofline ddp --expert-parallel`, and every bad input's
// one line with exit code 2 naming the flag.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../common/tmpdir.hpp"
#include "../model/checkpoint_edit.hpp"
#include "run.hpp"

namespace {

using namespace ridge::test;  // run, TempDir, write_bytes, read_bytes, edit_meta, ojson
const auto expect_user_error = ridge::test::expect_refused_in_one_line;

nlohmann::json json_of(const std::string& args) {
  const auto r = run(args);
  EXPECT_EQ(r.code, 0) << args << "\n" << r.err;
  return r.code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
}

}  // namespace

// `roofline decode` of moe-tiny (D 256, 4 layers, 4 heads, 8 experts of 256, top-2, vocab 10000) at batch 4:
// the expected experts, the weight bytes by hand, the critical batch beside the dense equivalent.
TEST(CliMoe, DecodeJsonAgainstCountsByHand) {
  const auto j = json_of("roofline decode --size moe-tiny --context 256 --batch 4 --hw h100 --json");
  const double E = 8, k = 2, B = 4, D = 256, L = 4, V = 10000, De = 256;
  const double experts = E * (1 - std::pow(1 - k / E, B));
  EXPECT_NEAR(j["decode"]["experts_read"].get<double>(), experts, 1e-9);
  EXPECT_EQ(j["shape"]["experts"], 8);
  EXPECT_EQ(j["shape"]["top_k"], 2);
  EXPECT_EQ(j["shape"]["moe_layers"], "all");
  EXPECT_EQ(j["moe"]["routing"], "uniform");
  EXPECT_TRUE(j["moe"]["expert_shares"].is_null());
  EXPECT_EQ(j["moe"]["params_total"].get<double>(), 12470528);
  EXPECT_EQ(j["moe"]["params_active"].get<double>(), 7751936);
  EXPECT_EQ(j["moe"]["expert_bytes"].get<double>(), 3 * D * De * 2);
  // Weights: attention 4 D^2 per layer, its router E D (fp32), the experts read, norms, lm_head and 4 rows.
  const double weights = L * 4 * D * D * 2 + L * E * D * 4 + L * experts * 3 * D * De * 2 +
                         (2 * L + 1) * D * 4 + V * D * 2 + B * D * 2;
  EXPECT_NEAR(j["decode"]["bytes"]["weights"].get<double>(), weights, 1e-3);
  // FLOPs: 2 per multiply-add of every active weight per token, and attention over 256 keys.
  const double flops = 2 * B * (L * (4 * D * D + E * D + k * 3 * D * De) + D * V) + 4 * B * D * 256 * L;
  EXPECT_NEAR(j["decode"]["flops"].get<double>(), flops, 1e-3);
  EXPECT_NEAR(j["decode"]["bytes_per_token"].get<double>(), j["decode"]["bytes"]["total"].get<double>() / B,
              1e-6);
  const auto& c = j["critical_batch"];
  EXPECT_EQ(c["expert_bytes_all"].get<double>(), L * E * 3 * D * De * 2);
  EXPECT_TRUE(j["moe"]["dense_equivalent_critical_batch"].contains("batch_weights_only"));
  // A dense size's document has none of these keys.
  const auto d = json_of("roofline decode --size tiny --context 256 --batch 4 --hw h100 --json");
  EXPECT_FALSE(d.contains("moe"));
  EXPECT_FALSE(d["decode"].contains("experts_read"));
  EXPECT_FALSE(d["shape"].contains("experts"));

  // The text: total and active parameters, the experts read, the dense model beside.
  const auto t =
      run("roofline decode --size moe-small --context 1024 --context-length 64 --kv-heads 4 "
          "--hw epyc-9654");
  ASSERT_EQ(t.code, 0) << t.err;
  for (const char* s :
       {"1415 M parameters, 119.8 M active per token", "experts read   3 per MoE layer",
        "compute-bound from B = ", "the dense model of the same active size", "MoE's critical batch is"})
    EXPECT_NE(t.out.find(s), std::string::npos) << s << "\n" << t.out;
}

// The MoE flags make a dense size MoE (label "(modified)"), reach every roofline command, and --experts 0
// makes an MoE size dense again.
TEST(CliMoe, FlagsReachEveryRooflineCommand) {
  const auto m = json_of(
      "roofline model --size small --experts 16 --top-k 2 --d-expert 512 --shared-experts 1 "
      "--moe-layers 1,3-5 --hw h100 --json");
  EXPECT_EQ(m["size"], "small (modified)");
  EXPECT_EQ(m["shape"]["experts"], 16);
  EXPECT_EQ(m["shape"]["moe_layers"], nlohmann::json::array({1, 3, 4, 5}));
  // Active: small's count with 4 layers' FFN (3 D F) replaced by a router, one shared and two routed experts.
  const double D = 768, F = 3072, small = 128625408;
  const double total = small + 4 * (16 * D + 3 * D * 512 + 16 * 3 * D * 512 - 3 * D * F);
  const double active = small + 4 * (16 * D + 3 * 3 * D * 512 - 3 * D * F);
  EXPECT_EQ(m["params"].get<double>(), total);
  EXPECT_EQ(m["params_active"].get<double>(), active);
  // MFU's FLOPs: forward GEMMs 2 N x (active weights); backward twice; attention aside.
  double gemm_forward = 0;
  for (const auto& op : m["ops"])
    if (op["pass"] == "forward" && op["kind"] == "gemm")
      gemm_forward += op["flops"].get<double>() * op["count"].get<double>();
  EXPECT_NEAR(gemm_forward, 2 * 1024 * (active - 2 * 10000 * D - D * (2 * 12 + 1) + 10000 * D), 1e-3);

  const auto d = json_of("roofline decode --size small --experts 16 --top-k 2 --context 256 --json");
  EXPECT_EQ(d["shape"]["params_active"].get<double>(), small + 12 * (16 * D - 3 * D * F + 2 * 3 * D * F));
  const auto dd = json_of("roofline ddp --size moe-tiny --json");
  EXPECT_EQ(dd["params"].get<double>(), 12470528);
  EXPECT_EQ(dd["params_active"].get<double>(), 7751936);
  // --experts 0: moe-small without its experts is a dense model of small's shape.
  const auto z = json_of("roofline model --size moe-small --experts 0 --json --brief");
  EXPECT_EQ(z["params"].get<double>(), small);
  EXPECT_FALSE(z.contains("params_active"));
  // The router and balance flags are read (their model is the same size).
  EXPECT_EQ(run("roofline decode --size moe-tiny --router sigmoid --balance bias").code, 0);
}

TEST(CliMoe, ExpertHistogramFile) {
  TempDir dir;
  const std::string h = dir.file("h.json");
  // Counts for 8 experts (top-2): two experts take half the choices each, never more than 1/k.
  write_bytes(h, "[500, 500, 0, 0, 0, 0, 0, 0]");
  const auto j = json_of("roofline decode --size moe-tiny --batch 64 --expert-histogram " + h + " --json");
  EXPECT_EQ(j["moe"]["routing"], "histogram");
  EXPECT_EQ(j["moe"]["expert_shares"][0].get<double>(), 0.5);
  EXPECT_NEAR(j["decode"]["experts_read"].get<double>(), 2.0, 1e-12);  // the same two, whatever the batch
  const auto u = json_of("roofline decode --size moe-tiny --batch 64 --json");
  EXPECT_GT(u["decode"]["experts_read"].get<double>(), 7.9);

  const std::string base = "roofline decode --size moe-tiny --expert-histogram ";
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"{\"counts\": [1, 2]}", "--expert-histogram '" + h + "': expected a JSON array"},
           {"[1, 2, 3]", "--expert-histogram '" + h + "': 3 values for 8 experts"},
           {"[0.6, 0.1, 0.1, 0.1, 0.1, 0, 0, 0]", "expert 0 has 0.6 of the choices, more than 1/top_k = 0.5"},
           {"[1, 1, 1, 1, 1, 1, 1, -1]", "expert 7's value -1"},
           {"[1, 1, 1, 1, 1, 1, 1, \"a\"]", "entry 7 is \"a\""},
           {"[0, 0, 0, 0, 0, 0, 0, 0]", "sum to 0"},
           {"[1, 1", "--expert-histogram"}}) {
    write_bytes(h, text);
    expect_user_error(base + h, says);
  }
  expect_user_error(base + dir.file("missing.json"), "--expert-histogram");
  write_bytes(h, "[1, 1]");
  expect_user_error("roofline decode --size tiny --expert-histogram " + h,
                    "--expert-histogram: the model is dense");
}

TEST(CliMoe, ExpertParallelAllToAll) {
  const auto j =
      json_of("roofline ddp --size moe-small --precision bf16 --ranks 8 --expert-parallel 4 --json");
  const auto& e = j["expert_parallel"];
  EXPECT_EQ(e["ranks"], 4);
  EXPECT_EQ(e["experts_per_rank"], 16);
  // A rank holds 16 of the 64 routed experts (12 layers x w1, w2, w3 of 768 x 768): 3/4 of them are
  // elsewhere.
  const double routed = 12.0 * 64 * 3 * 768 * 768;
  EXPECT_EQ(e["params_per_rank"].get<double>(), j["params"].get<double>() - routed * 3 / 4);
  EXPECT_DOUBLE_EQ(j["memory_per_rank"]["grads"].get<double>(), 4 * e["params_per_rank"].get<double>());
  EXPECT_EQ(e["all_to_alls"], 48);  // 4 per MoE layer, 12 layers
  // 4 x 256 tokens x top-3 x d_model 768: the dispatch in bf16, the combine in fp32; 3/4 leave the rank.
  EXPECT_EQ(e["dispatch_bytes"].get<double>(), 4 * 256 * 3 * 768 * 2.0);
  EXPECT_EQ(e["combine_bytes"].get<double>(), 4 * 256 * 3 * 768 * 4.0);
  EXPECT_EQ(e["leaving"].get<double>(), 0.75);
  // H100's NVLink (450 GB/s one way), the nvlink preset's latencies: 8.4 us + 3 x 3.4 us per all-to-all.
  const double d = 8.4e-6 + 3 * 3.4e-6 + 0.75 * e["dispatch_bytes"].get<double>() / 450e9,
               c = 8.4e-6 + 3 * 3.4e-6 + 0.75 * e["combine_bytes"].get<double>() / 450e9;
  EXPECT_NEAR(e["dispatch_s"].get<double>(), d, 1e-12);
  EXPECT_NEAR(e["combine_s"].get<double>(), c, 1e-12);
  EXPECT_NEAR(e["step_s"].get<double>(), 12 * 2 * (d + c), 1e-12);
  // moe-small's shared expert hides each dispatch, or as much of it as its compute lasts.
  const double sf = e["shared_forward_s"].get<double>(), sb = e["shared_backward_s"].get<double>();
  EXPECT_GT(sf, 0);
  EXPECT_NEAR(e["hidden_s"].get<double>(), 12 * (std::min(d, sf) + std::min(d, sb)), 1e-12);
  EXPECT_NEAR(e["exposed_s"].get<double>(), e["step_s"].get<double>() - e["hidden_s"].get<double>(), 1e-15);
  EXPECT_EQ(e["replicas"], 2);
  // Every mode's step carries the exposed exchange and the replica reduction; no sharded mode is priced.
  for (const auto& mode : j["modes"]) {
    EXPECT_EQ(mode["sharding"], "none");
    EXPECT_GE(mode["exposed_s"].get<double>(),
              e["exposed_s"].get<double>() + e["replica_reduce_s"].get<double>());
  }
  EXPECT_FALSE(json_of("roofline ddp --size moe-small --json").contains("expert_parallel"));
  const auto t = run("roofline ddp --size moe-small --ranks 8 --expert-parallel 8");
  EXPECT_NE(t.out.find("expert parallel: the 64 experts sharded over groups of 8"), std::string::npos)
      << t.out;
  // Without a shared expert nothing hides it.
  const auto s = json_of(
      "roofline ddp --size moe-small --shared-experts 0 --precision bf16 --ranks 8 --expert-parallel 8 "
      "--json");
  EXPECT_EQ(s["expert_parallel"]["hidden_s"].get<double>(), 0);
  EXPECT_EQ(s["expert_parallel"]["shared_forward_s"].get<double>(), 0);
  expect_user_error("roofline ddp --size moe-small --ranks 6 --expert-parallel 3", "--expert-parallel");
  expect_user_error("roofline ddp --size moe-small --ranks 8 --expert-parallel 3", "--expert-parallel: 3");
  expect_user_error("roofline ddp --size moe-tiny --ranks 16 --expert-parallel 16",
                    "--expert-parallel: 16 ranks do not share out 8 experts");
  expect_user_error("roofline ddp --size small --expert-parallel 2", "--expert-parallel: the model is dense");
  expect_user_error("roofline ddp --size moe-small --expert-parallel 0", "--expert-parallel");
  expect_user_error("roofline ddp --size moe-small --expert-parallel 2x", "--expert-parallel");
}

// Every bad input is one line naming the flag, on each of the five commands ({K}: the experts' top-k flag,
// `ridge generate`'s --expert-top-k).
TEST(CliMoe, BadFlagsAreOneLineExit2OnEveryCommand) {
  TempDir dir;
  const std::string txt = dir.file("t.txt");
  write_bytes(txt, std::string(300, 'a') + std::string(300, 'b'));
  const std::vector<std::pair<std::string, std::string>> commands = {
      {"roofline model", "--top-k"},
      {"roofline decode", "--top-k"},
      {"roofline ddp", "--top-k"},
      {"train --threads 1 --steps 1 --batch 2 --context 16 --text " + txt, "--top-k"},
      {"generate --threads 1 --prompt hi --max-tokens 2", "--expert-top-k"}};
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--experts 8 {K} 9", "{K}: 9 is above --experts 8 (accepted: 1 .. 8)"},
      {"--experts 0 {K} 2", "{K}: '2' is an MoE setting, but --experts 0 makes the model dense"},
      {"{K} 2", "{K}: '2' is an MoE setting, but the model is dense"},
      {"--shared-experts 1", "--shared-experts: '1' is an MoE setting"},
      {"--experts 8", "--experts: needs {K} too"},
      {"--experts 8 {K} 2 --moe-layers 12", "--moe-layers: a layer past the last: '12'"},
      {"--experts 8 {K} 2 --moe-layers 3-1", "--moe-layers: a range that runs backwards: '3-1'"},
      {"--experts 8 {K} 2 --router relu", "--router: 'relu' is not a gate"},
      {"--experts 8 {K} 2 --balance none", "--balance: 'none' is not a balance"},
      {"--experts -1 {K} 2", "--experts: '-1' is out of range"},
      {"--experts 8 {K} 0", "{K}: '0' is out of range"},
      {"--experts 8 {K} 2 --d-expert 0", "--d-expert: '0' is out of range"},
      {"--experts 1e3 {K} 2", "--experts: '1e3' is not a decimal integer"},
      {"--size moe-small --experts 2", "--experts: 2 is below the size's top-k of 3"},
      // An empty value is given, not absent.
      {"--experts ''", "--experts: '' is not a decimal integer"},
      {"--experts 8 {K} ''", "{K}: '' is not a decimal integer"},
      {"--experts 8 {K} 2 --moe-layers ''", "--moe-layers: not a layer index: ''"},
      {"--experts 8 {K} 2 --router ''", "--router: '' is not a gate"}};
  const auto with = [](std::string s, const std::string& k) {
    for (size_t at = s.find("{K}"); at != std::string::npos; at = s.find("{K}")) s.replace(at, 3, k);
    return s;
  };
  for (const auto& [command, k] : commands) {
    const bool generate = command.rfind("generate", 0) == 0;
    for (const auto& [flags, says] : cases) {
      // generate has no default size; the small preset's 12 layers are the others' default (train's tiny: 4).
      const std::string size = flags.find("--size") != std::string::npos    ? ""
                               : generate || command.rfind("train", 0) == 0 ? " --size small"
                                                                            : "";
      expect_user_error(command + size + " " + with(flags, k), with(says, k));
    }
  }
  // Train's own: the balance settings.
  const std::string train = commands[3].first + " --size moe-tiny";
  expect_user_error(train + " --aux-loss-coef -1", "--aux-loss-coef: '-1' is out of range");
  expect_user_error(train + " --bias-speed nan", "--bias-speed: 'nan'");
}

// `ridge train` and `ridge generate` take the flags to the model's config; generate runs an MoE model (random
// weights of the flags', or a checkpoint's); a checkpoint's recorded model decides, and MoE flags beside it
// must agree.
TEST(CliMoe, TrainAndGenerateTakeTheFlags) {
  TempDir dir;
  const std::string txt = dir.file("t.txt");
  write_bytes(txt, std::string(300, 'a') + std::string(300, 'b'));
  const std::string train = "train --threads 1 --steps 1 --batch 2 --context 16 --text " + txt + " ";
  // ridge train runs an MoE model: the shape line, and each step's expert load in a column of its own.
  const auto trained =
      run(train + "--d-model 32 --heads 2 --layers 2 --d-ff 48 --experts 4 --top-k 2 --moe-layers 1");
  ASSERT_EQ(trained.code, 0) << trained.err;
  EXPECT_NE(
      trained.out.find("moe       4 experts of d_expert 48, top-2 (softmax gate, aux balance), in layers 1;"),
      std::string::npos)
      << trained.out;
  EXPECT_NE(trained.out.find("left    load\n"), std::string::npos) << trained.out;
  const auto json = run(train + "--d-model 32 --heads 2 --layers 1 --d-ff 48 --experts 4 --top-k 4 --json");
  ASSERT_EQ(json.code, 0) << json.err;
  // top-k = E: every expert takes every token, a load of exactly 1.
  EXPECT_NE(json.out.find("\"expert_load\":[1.0]"), std::string::npos) << json.out;

  const std::string gen = "generate --threads 1 --prompt hi --max-tokens 2 ";
  for (const char* flags :
       {"--size moe-tiny --vocab 256 --context 64",
        "--size tiny --vocab 256 --context 64 --experts 4 --expert-top-k 2 --router sigmoid "
        "--balance bias --shared-experts 1 --moe-layers 1,3 --weights fp8"}) {
    const auto r = run(gen + flags + " --json");
    ASSERT_EQ(r.code, 0) << flags << ": " << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["decode_steps"], 1) << flags;
    EXPECT_GT(j["decode_bytes"].get<double>(), 0) << flags;
    // One sequence: each MoE layer reads exactly its token's top-2 experts.
    EXPECT_EQ(j["decode_experts_read"].get<double>(), 2.0) << flags;
  }
  // Three sequences of one step: between top-2 and 6 (or E = 8) distinct experts per layer.
  const auto three = nlohmann::json::parse(
      run(gen + "--size moe-tiny --vocab 256 --context 64 --prompt ho --prompt ha --json").out);
  EXPECT_GE(three["decode_experts_read"].get<double>(), 2.0);
  EXPECT_LE(three["decode_experts_read"].get<double>(), 6.0);
  EXPECT_FALSE(nlohmann::json::parse(run(gen + "--size tiny --vocab 256 --context 64 --json").out)
                   .contains("decode_experts_read"));
  expect_user_error(gen + "--size tiny --expert-top-k 2", "--expert-top-k: '2' is an MoE setting");
  expect_user_error(gen + "--size tiny --experts 4 --expert-top-k 5",
                    "--expert-top-k: 5 is above --experts 4");
  // --top-k stays sampling's.
  EXPECT_EQ(run(gen + "--size tiny --vocab 256 --context 64 --top-k 3").code, 0);

  // A dense checkpoint: MoE flags that describe another model are refused naming them.
  const std::string ck = dir.file("ck.safetensors"), moe = dir.file("moe.safetensors");
  const auto made =
      run("train --d-model 32 --layers 1 --heads 2 --d-ff 48 --threads 1 --context 16 --batch 2 "
          "--steps 1 --text " +
          txt + " --checkpoint " + ck);
  ASSERT_EQ(made.code, 0) << made.err;
  expect_user_error(gen + "--checkpoint " + ck + " --experts 4 --expert-top-k 2",
                    "--experts/--expert-top-k: checkpoint '" + ck + "' records a dense model");
  expect_user_error(gen + "--checkpoint " + ck + " --router sigmoid", "--router: checkpoint");
  EXPECT_EQ(run(gen + "--checkpoint " + ck + " --experts 0").code, 0);  // agrees: dense
  // The --size shape flags beside a checkpoint that records its shape: refused, not ignored.
  for (const char* flag : {"--kv-heads 1", "--vocab 256", "--context 16"})
    expect_user_error(gen + "--checkpoint " + ck + " " + flag,
                      std::string(flag).substr(0, std::string(flag).find(' ')) + ": the checkpoint '" + ck +
                          "' records its model's shape");
  // An MoE checkpoint of ridge train (balance bias: its router biases are in it) generates, in every format;
  // dense flags beside it are refused.
  const std::string moe_ck = dir.file("moe_ck.safetensors");
  const auto moe_made = run(train +
                            "--d-model 32 --heads 2 --layers 2 --d-ff 48 --experts 4 --top-k 2 "
                            "--balance bias --checkpoint " +
                            moe_ck);
  ASSERT_EQ(moe_made.code, 0) << moe_made.err;
  for (const char* w : {"fp32", "bf16", "fp8"}) {
    const auto r = run(gen + "--checkpoint " + moe_ck + " --weights " + w);
    EXPECT_EQ(r.code, 0) << w << ": " << r.err;
  }
  expect_user_error(gen + "--checkpoint " + moe_ck + " --experts 0",
                    "--experts: checkpoint '" + moe_ck + "' records an MoE model");
  // An MoE config recorded: the flags must agree; the checkpoint then lacks the experts' tensors.
  write_bytes(moe, edit_meta(read_bytes(ck), "config", [](ojson& j) {
                j["num_experts"] = 4;
                j["top_k"] = 2;
              }));
  expect_user_error(gen + "--checkpoint " + moe + " --expert-top-k 1",
                    "--expert-top-k: checkpoint '" + moe + "' records an MoE model, 4 experts (top-2");
  expect_user_error(
      gen + "--checkpoint " + moe + " --expert-top-k 2",
      "--checkpoint: checkpoint '" + moe + "': missing the tensor 'layers.0.ffn.experts.w2.weight'");
}
