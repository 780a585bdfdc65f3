// The model's FLOP count (forward_flops, training_flops: what every MFU divides by, summed from the
// analyzer's ops) agrees with a closed form written here independently: 2 per multiply-add of every
// GEMM, attention as FlashAttention counts it (causal: half the score work).
#include <gtest/gtest.h>

#include <vector>

#include "model/json.hpp"
#include "ridge/core/error.hpp"
#include "ridge/model/config.hpp"
#include "ridge/model/model.hpp"
#include "ridge/model/roofline.hpp"

using namespace ridge::model;

namespace {
// Per token: q and out (2 D^2), k and v (2 D Dkv, Dkv = kv heads * dh: D unless grouped-query),
// w1|w3 and w2 (3 D F) per layer, and the lm_head (D V); attention per layer: QK^T and PV over the
// causal half, 2 * 2 * B * H * T^2 / 2 * dh forward (H query heads, whatever the kv heads), 2.5x that
// backward.
// `share` scales the attention part (a document-masked batch's share of the causal scores).
double closed_form(const ModelConfig& c, int64_t B, int64_t T, bool with_backward, double share = 1.0) {
  const double n = static_cast<double>(B * T), D = static_cast<double>(c.d_model),
               F = static_cast<double>(c.d_ff), V = static_cast<double>(c.vocab_size),
               L = static_cast<double>(c.num_layers), Dkv = static_cast<double>(c.kv_heads() * c.d_head());
  const double gemm = n * (2 * (2 * D * D + 2 * D * Dkv + 3 * D * F) * L + 2 * D * V);
  const double attn_fwd = 2.0 * static_cast<double>(B) * static_cast<double>(c.num_heads) *
                          static_cast<double>(T) * static_cast<double>(T) * static_cast<double>(c.d_head()) *
                          L;
  return with_backward ? 3 * gemm + 3.5 * attn_fwd * share : gemm + attn_fwd * share;
}
}  // namespace

TEST(StepRoofline, ModelFlopsAgreeWithAClosedForm) {
  for (const char* size : {"tiny", "small", "xl"}) {
    for (int64_t seq : {128, 512}) {
      const auto cfg = preset(size, 10000, seq);
      const auto shape = model_shape(cfg, 4, seq, Precision::bf16, AttentionPath::flash);
      const double fwd = ridge::roofline::model_matmul_flops(shape, "forward");
      const double bwd = ridge::roofline::model_matmul_flops(shape, "backward");
      EXPECT_NEAR(fwd, closed_form(cfg, 4, seq, false), 1e-9 * fwd) << size << " " << seq;
      EXPECT_NEAR(fwd + bwd, closed_form(cfg, 4, seq, true), 1e-9 * fwd) << size << " " << seq;
      EXPECT_EQ(forward_flops(cfg, 4, seq), fwd);
      EXPECT_EQ(training_flops(cfg, 4, seq), fwd + bwd);
    }
  }
}

// Grouped-query configurations of the presets: fewer kv heads, fewer FLOPs, by the closed form.
TEST(StepRoofline, GroupedQueryModelFlopsAgreeWithAClosedForm) {
  for (const char* size : {"tiny", "small"}) {
    double previous = 0;
    for (int64_t kv : {4, 2, 1}) {
      auto cfg = preset(size, 10000, 256);
      cfg.num_kv_heads = kv;
      cfg.validate();
      const double fwd = forward_flops(cfg, 4, 256), step = training_flops(cfg, 4, 256);
      EXPECT_NEAR(fwd, closed_form(cfg, 4, 256, false), 1e-9 * fwd) << size << " kv " << kv;
      EXPECT_NEAR(step, closed_form(cfg, 4, 256, true), 1e-9 * step) << size << " kv " << kv;
      if (previous > 0) {
        EXPECT_LT(fwd, previous) << size << " kv " << kv;
      }
      previous = fwd;
    }
  }
}

// A document-masked batch owes the scores its documents attend to: its share of the causal score work
// counted by hand, and the FLOPs' attention part (the closed form's) scaled by it, the GEMMs unchanged.
TEST(StepRoofline, DocumentMaskedFlopsCountTheVisibleScores) {
  const int64_t B = 2, T = 8;
  // Row 0: documents of 3 (eot at 2), 1 (eot at 3) and 4 (cut by the row's end); row 1: one of 8.
  const std::vector<int32_t> tokens = {5, 6, 0, 0, 7, 8, 9, 4, 1, 2, 3, 4, 5, 6, 7, 8};
  const double share = document_attention_share(tokens.data(), B, T, 0);
  const double want = (3.0 * 4 / 2 + 1.0 + 4.0 * 5 / 2 + 8.0 * 9 / 2) / (2 * 8.0 * 9 / 2);
  EXPECT_DOUBLE_EQ(share, want);
  EXPECT_EQ(document_attention_share(tokens.data(), B, T, -1), 1.0);
  EXPECT_EQ(document_attention_share(tokens.data(), B, T, 99), 1.0);  // no eot: whole rows
  const auto cfg = preset("tiny", 10000, 128);
  for (double s : {1.0, want, 0.25, 0.0}) {
    EXPECT_NEAR(forward_flops(cfg, 4, 128, s), closed_form(cfg, 4, 128, false, s),
                1e-9 * closed_form(cfg, 4, 128, false));
    EXPECT_NEAR(training_flops(cfg, 4, 128, s), closed_form(cfg, 4, 128, true, s),
                1e-9 * closed_form(cfg, 4, 128, true));
  }
  EXPECT_LT(training_flops(cfg, 4, 128, want), training_flops(cfg, 4, 128));
  EXPECT_THROW(training_flops(cfg, 4, 128, 1.5), ridge::Error);
  EXPECT_THROW(forward_flops(cfg, 4, 128, -0.1), ridge::Error);
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
  ASSERT_EQ(r.notes.size(), 2u);  // no fp16 peak: the fp32 one, said so, and fp16 stored as fp32
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

// The bytes an fp16 operand moves follow how the precision is implemented on the chip: 4 where
// ridge's model emulates fp16 in fp32 storage (no fp16 peak: a CPU), 2 where the chip has fp16.
TEST(StepRoofline, Fp16OperandBytesFollowTheChipsImplementation) {
  const auto cfg = preset("tiny", 10000, 128);
  ridge::roofline::Chip cpu;
  cpu.id = "cpu-like";
  cpu.kind = "cpu";
  cpu.peak_flops["fp32"] = {1e12, "test"};
  cpu.peak_flops["bf16"] = {2e12, "test"};
  cpu.memory.push_back({"dram", "DDR", {1e11, "test"}, std::nullopt});
  ridge::roofline::Chip gpu = cpu;
  gpu.id = "gpu-like";
  gpu.kind = "gpu";
  gpu.peak_flops["fp16"] = {4e12, "test"};
  EXPECT_EQ(operand_storage(ridge::DType::fp16, cpu), ridge::DType::f32);
  EXPECT_EQ(operand_storage(ridge::DType::fp16, gpu), ridge::DType::fp16);
  EXPECT_EQ(operand_storage(ridge::DType::bf16, cpu), ridge::DType::bf16);

  auto bytes_of = [&](Precision p, const ridge::roofline::Chip& chip, const std::string& name) {
    const auto r = step_roofline("tiny", model_shape(cfg, 2, 128, p, AttentionPath::flash), chip);
    for (const auto& e : r.ops)
      if (e.op.name == name) return static_cast<double>(e.bound.memory_bytes);
    ADD_FAILURE() << "no op " << name;
    return 0.0;
  };
  for (const char* op : {"gemm qkv", "gemm w2 dX", "attention", "attention backward", "swiglu"}) {
    SCOPED_TRACE(op);
    // Emulated fp16 on the CPU moves what fp32 moves; native fp16 on the GPU what bf16 moves.
    EXPECT_EQ(bytes_of(Precision::fp16, cpu, op), bytes_of(Precision::fp32, cpu, op));
    EXPECT_EQ(bytes_of(Precision::fp16, gpu, op), bytes_of(Precision::bf16, gpu, op));
    EXPECT_LT(bytes_of(Precision::fp16, gpu, op), bytes_of(Precision::fp16, cpu, op));
  }
  // An explicit storage wins over the chip's default; a narrower one is refused.
  auto shape = model_shape(cfg, 2, 128, Precision::fp16, AttentionPath::flash);
  shape.storage = ridge::DType::fp16;
  const auto forced = step_roofline("tiny", shape, cpu);
  EXPECT_EQ(ridge::model::to_json(forced)["shape"]["operand_storage"], "fp16");
  shape.operand = ridge::DType::f32;
  EXPECT_THROW(step_roofline("tiny", shape, cpu), ridge::Error);
}
