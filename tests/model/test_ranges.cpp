// Every trace range a training step records is named in ridge/model/ranges.hpp, with a kind: what
// `ridge bench model` and the step prediction attribute time by. A range opened with a string of its
// own would fall into "other" unnoticed; this test finds it. The recorded trace is the reference.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "bench/json.hpp"
#include "ridge/bench/trace.hpp"
#include "ridge/model/ranges.hpp"
#include "ridge/model/train.hpp"

namespace rm = ridge::model;

namespace {

// With `moe`, layer 0's feed-forward is an MoE block with a shared expert (issue 40); layer 1 stays dense.
std::set<std::string> ranges_of_one_step(rm::Precision p, rm::AttentionPath a, bool moe = false) {
  rm::ModelConfig c;
  c.vocab_size = 17;
  c.context_length = 8;
  c.d_model = 32;
  c.num_layers = 2;
  c.num_heads = 2;
  c.d_ff = 48;
  if (moe) c.num_experts = 4, c.top_k = 2, c.num_shared_experts = 1, c.d_expert = 8, c.moe_layers = {0};
  rm::TrainConfig t;
  t.batch = 2;
  t.seq = 8;
  t.precision = p;
  t.attention = a;
  rm::Trainer trainer(c, t);
  std::vector<int32_t> in(16), tg(16);
  for (int i = 0; i < 16; ++i) {
    in[static_cast<size_t>(i)] = i % 17;
    tg[static_cast<size_t>(i)] = (i * 5 + 3) % 17;
  }
  ridge::trace::start_recording();
  trainer.step(in.data(), tg.data());
  const auto doc = ridge::trace::to_json();
  ridge::trace::stop_recording();
  ridge::trace::clear();
  std::set<std::string> names;
  for (const auto& e : doc["traceEvents"])
    if (e.value("ph", "") == "X") names.insert(e.value("name", ""));
  return names;
}

}  // namespace

TEST(ModelRanges, EveryRangeAStepRecordsIsInTheTable) {
  for (rm::Precision p : {rm::Precision::fp32, rm::Precision::bf16, rm::Precision::fp16})
    for (rm::AttentionPath a : {rm::AttentionPath::flash, rm::AttentionPath::math}) {
      const auto names = ranges_of_one_step(p, a);
      // The step's phases and at least one range of each kind of work were recorded.
      for (const char* must : {"forward", "backward", "optimizer", "gemm qkv", "attention backward", "norm"})
        EXPECT_TRUE(names.count(must)) << must << " missing at " << rm::precision_name(p);
      for (const auto& n : names)
        EXPECT_NE(rm::ranges::find(n), nullptr) << "range '" << n << "' is not in ranges.hpp";
    }
}

TEST(ModelRanges, NamesAreDistinctAndFindReturnsTheirKind) {
  std::set<std::string> seen;
  for (const auto& n : rm::ranges::all) {
    EXPECT_TRUE(seen.insert(n.text).second) << "duplicate range name " << n.text;
    ASSERT_NE(rm::ranges::find(n.text), nullptr);
    EXPECT_EQ(rm::ranges::find(n.text)->kind, n.kind);
  }
  EXPECT_EQ(rm::ranges::find("no such range"), nullptr);
  EXPECT_EQ(rm::ranges::find("gemm qkv")->kind, rm::ranges::Kind::gemm);
  EXPECT_EQ(rm::ranges::find("attention")->kind, rm::ranges::Kind::attention);
}

// An MoE step's ranges are in the table too, and each step of the block has its own: routing,
// permutation, the experts' GEMMs, the shared experts, the combine, and their backward.
TEST(ModelRanges, AnMoeStepRecordsTheBlocksRanges) {
  for (rm::Precision p : {rm::Precision::fp32, rm::Precision::bf16}) {
    const auto names = ranges_of_one_step(p, rm::AttentionPath::flash, true);
    for (const auto& n : names)
      EXPECT_NE(rm::ranges::find(n), nullptr) << "range '" << n << "' is not in ranges.hpp";
    namespace r = rm::ranges;
    for (const r::Name& must :
         {r::gemm_router, r::route, r::permute, r::experts, r::gemm_experts_w1_w3, r::gemm_experts_w2,
          r::shared_experts, r::unpermute, r::shared_experts_backward, r::unpermute_backward,
          r::experts_backward, r::gemm_experts_w2_backward, r::gemm_experts_w1_w3_backward,
          r::permute_backward, r::route_backward, r::gemm_router_backward,
          r::gemm_w2})  // gemm w2: the dense layer 1, and the shared expert
      EXPECT_TRUE(names.count(must.text)) << must.text << " missing at " << rm::precision_name(p);
  }
}
