// The analyzer's count of a step's model FLOPs (roofline::model_step_ops, summed per op) agrees with
// the model's own closed-form count (forward_flops, training_flops), written independently.
#include <gtest/gtest.h>

#include "ridge/model/config.hpp"
#include "ridge/model/model.hpp"
#include "ridge/model/roofline.hpp"

using namespace ridge::model;

TEST(StepRoofline, ModelFlopsAgreeWithTheModelsCount) {
  for (const char* size : {"tiny", "small", "xl"}) {
    for (int64_t seq : {128, 512}) {
      const auto cfg = preset(size, 10000, seq);
      const auto shape = model_shape(cfg, 4, seq, Precision::bf16, AttentionPath::flash);
      const double fwd = ridge::roofline::model_matmul_flops(shape, "forward");
      const double bwd = ridge::roofline::model_matmul_flops(shape, "backward");
      EXPECT_NEAR(fwd, forward_flops(cfg, 4, seq), 1e-9 * fwd) << size << " " << seq;
      EXPECT_NEAR(fwd + bwd, training_flops(cfg, 4, seq), 1e-9 * fwd) << size << " " << seq;
    }
  }
}

TEST(StepRoofline, SumsAndFp16Fallback) {
  const auto cfg = preset("tiny", 10000, 128);
  ridge::roofline::Chip chip;
  chip.id = "cpu-like";
  chip.kind = "cpu";
  chip.peak_flops["fp32"] = {1e12, "test"};
  chip.peak_flops["bf16"] = {2e12, "test"};
  chip.memory.push_back({"dram", "DDR", {1e11, "test"}, std::nullopt});
  const auto r = step_roofline("tiny", model_shape(cfg, 2, 128, Precision::fp16, AttentionPath::flash), chip);
  ASSERT_EQ(r.notes.size(), 1u);  // no fp16 peak: the fp32 one, said so
  double t = 0;
  for (const auto& e : r.ops) {
    EXPECT_NE(e.bound.peak, 2e12) << e.op.name;
    t += e.t_lower;
  }
  EXPECT_NEAR(t, r.step.t_lower, 1e-15);
  EXPECT_NEAR(
      r.passes.at("forward").t_lower + r.passes.at("backward").t_lower + r.passes.at("optimizer").t_lower,
      r.step.t_lower, 1e-15);
}
