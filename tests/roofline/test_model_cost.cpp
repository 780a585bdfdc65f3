// The training step's cost list against numbers worked by hand for a tiny model:
// V=16, D=8, L=1, H=2 (d_head 4), F=12, batch 1, seq 4 (N = 4 tokens).
#include <gtest/gtest.h>

#include <map>

#include "ridge/core/error.hpp"
#include "ridge/roofline.hpp"

namespace rr = ridge::roofline;
using ridge::DType;

namespace {

rr::ModelShape tiny(DType operand = DType::f32, bool flash = true) {
  rr::ModelShape m;
  m.vocab_size = 16;
  m.d_model = 8;
  m.num_layers = 1;
  m.num_heads = 2;
  m.d_ff = 12;
  m.batch = 1;
  m.seq = 4;
  m.operand = operand;
  m.flash = flash;
  return m;
}

const rr::ModelOp& find(const std::vector<rr::ModelOp>& ops, const std::string& name) {
  for (const auto& o : ops)
    if (o.name == name) return o;
  ADD_FAILURE() << "no op " << name;
  static rr::ModelOp none;
  return none;
}

}  // namespace

TEST(ModelCost, ParameterCount) {
  // 16*8 embedding + (4*64 attention + 3*8*12 ffn + 2*8 norms) + 8 final norm + 16*8 lm_head.
  EXPECT_EQ(static_cast<double>(rr::model_param_count(tiny())), 128 + 256 + 288 + 16 + 8 + 128);
}

TEST(ModelCost, Fp32GemmQkv) {
  const auto ops = rr::model_step_ops(tiny());
  const auto& q = find(ops, "gemm qkv");
  EXPECT_EQ(q.pass, "forward");
  EXPECT_EQ(q.kind, "gemm");
  EXPECT_EQ(static_cast<double>(q.cost.flops), 2.0 * 4 * 8 * 24);
  // h1 [4,8] + W [8,24] + qkv [4,24], 4 bytes each.
  EXPECT_EQ(static_cast<double>(q.cost.memory_bytes()), (32 + 192 + 96) * 4.0);
  EXPECT_EQ(q.cost.compute, "fp32");
}

TEST(ModelCost, Bf16OperandsHalveTheOperandBytesOnly) {
  const auto ops = rr::model_step_ops(tiny(DType::bf16));
  const auto& q = find(ops, "gemm qkv");
  EXPECT_EQ(static_cast<double>(q.cost.memory_bytes()), (32 + 192) * 2.0 + 96 * 4.0);
  EXPECT_EQ(q.cost.compute, "bf16");
  // A weight gradient is accumulated in fp32: dW [24,8] read and written.
  const auto& dw = find(ops, "gemm qkv dW");
  EXPECT_EQ(static_cast<double>(dw.cost.memory_bytes()), (24 * 4 + 4 * 8) * 2.0 + 2 * 24 * 8 * 4.0);
  // Mixed precision casts the weights once per step: 824 fp32 reads + 824 bf16 writes.
  const auto& cw = find(ops, "cast weights");
  EXPECT_EQ(static_cast<double>(cw.cost.memory_bytes()), 824 * 6.0);
  for (const auto& o : rr::model_step_ops(tiny())) EXPECT_NE(o.name, "cast weights");
}

TEST(ModelCost, FlashAttentionCausalForwardAndBackward) {
  const auto ops = rr::model_step_ops(tiny());
  const auto& f = find(ops, "attention");
  // 4 * B*H*T*T*dh, halved for causal: 4*1*2*16*4/2.
  EXPECT_EQ(static_cast<double>(f.cost.flops), 256);
  // Q, K, V, O: 1*2*4*4 = 32 elements each, fp32; the log-sum-exp: 8 fp32.
  EXPECT_EQ(static_cast<double>(f.cost.memory_bytes()), 4 * 32 * 4.0 + 8 * 4.0);
  const auto& b = find(ops, "attention backward");
  EXPECT_EQ(static_cast<double>(b.cost.flops), 2.5 * 256);
  // Q,K,V,O,dO read, dQ,dK,dV written (8 x 32 elements), the log-sum-exp read.
  EXPECT_EQ(static_cast<double>(b.cost.memory_bytes()), 8 * 32 * 4.0 + 8 * 4.0);
}

TEST(ModelCost, MathPathCountsEveryPairAndTheScores) {
  const auto ops = rr::model_step_ops(tiny(DType::f32, false));
  const auto& f = find(ops, "attention");
  // No causal halving, plus 5 softmax FLOPs per pair: 4*2*16*4 + 5*2*16.
  EXPECT_EQ(static_cast<double>(f.cost.flops), 512 + 160);
  // Q, K, V, O + S and P written and read back (4 x 32 elements).
  EXPECT_EQ(static_cast<double>(f.cost.memory_bytes()), (4 * 32 + 4 * 32) * 4.0);
}

TEST(ModelCost, MatmulFlopsPerPass) {
  const auto m = tiny();
  // GEMMs: 2 N (4 D^2 + 3 D F) L + 2 N D V = 2*4*(256 + 288) + 2*4*8*16; attention 256.
  EXPECT_EQ(rr::model_matmul_flops(m, "forward"), 4352 + 1024 + 256);
  // Backward: twice the GEMMs, 2.5x the attention.
  EXPECT_EQ(rr::model_matmul_flops(m, "backward"), 2 * (4352 + 1024) + 640);
  // The math path does not change the model's FLOPs.
  EXPECT_EQ(rr::model_matmul_flops(tiny(DType::f32, false), "forward"), 4352 + 1024 + 256);
}

TEST(ModelCost, OptimizerMovesSevenFp32WordsPerParameter) {
  const auto ops = rr::model_step_ops(tiny());
  const auto& a = find(ops, "adamw");
  EXPECT_EQ(a.pass, "optimizer");
  EXPECT_EQ(static_cast<double>(a.cost.memory_bytes()), 824 * 7 * 4.0);
  EXPECT_EQ(static_cast<double>(find(ops, "zero grad").cost.memory_bytes()), 824 * 4.0);
}

TEST(ModelCost, BlockOpsCountOncePerLayer) {
  auto m = tiny();
  m.num_layers = 3;
  std::map<std::string, int64_t> counts;
  for (const auto& o : rr::model_step_ops(m)) counts[o.name] = o.count;
  EXPECT_EQ(counts["gemm w2"], 3);
  EXPECT_EQ(counts["gemm lm_head"], 1);
  EXPECT_EQ(counts["attention backward"], 3);
}

TEST(ModelCost, BadShapesNameTheField) {
  auto m = tiny();
  m.num_heads = 3;
  try {
    rr::model_step_ops(m);
    FAIL();
  } catch (const ridge::Error& e) {
    EXPECT_NE(std::string(e.what()).find("heads"), std::string::npos);
  }
  m = tiny();
  m.batch = 0;
  EXPECT_THROW(rr::model_step_ops(m), ridge::Error);
  m = tiny();
  m.operand = DType::fp8_e4m3;
  EXPECT_THROW(rr::model_step_ops(m), ridge::Error);
}

// Grouped-query attention (heads 2 sharing kv_heads 1: Dkv = 4) worked by hand: k_proj and v_proj
// [4, 8], so the q|k|v GEMM and its gradients are 8 + 2*4 = 16 wide; attention's FLOPs are the query
// heads' (unchanged), its K and V bytes (and dK, dV) those of one head.
TEST(ModelCost, GroupedQueryAttentionShrinksKAndV) {
  auto m = tiny();
  m.num_kv_heads = 1;
  // 128 embedding + (2*64 q, o + 2*32 k, v + 288 ffn + 16 norms) + 8 + 128 lm_head.
  EXPECT_EQ(static_cast<double>(rr::model_param_count(m)), 128 + (128 + 64 + 288 + 16) + 8 + 128);
  const auto ops = rr::model_step_ops(m);
  const auto& q = find(ops, "gemm qkv");
  EXPECT_EQ(static_cast<double>(q.cost.flops), 2.0 * 4 * 8 * 16);
  // h1 [4,8] + W [8,16] + qkv [4,16].
  EXPECT_EQ(static_cast<double>(q.cost.memory_bytes()), (32 + 128 + 64) * 4.0);
  EXPECT_EQ(static_cast<double>(find(ops, "gemm qkv dW").cost.flops), 2.0 * 16 * 4 * 8);
  EXPECT_EQ(static_cast<double>(find(ops, "gemm qkv dX").cost.flops), 2.0 * 4 * 16 * 8);
  // RoPE rotates q and k (8 + 4 columns, 3 FLOPs each) and reads and writes the 16-wide rows.
  const auto& rope = find(ops, "rope");
  EXPECT_EQ(static_cast<double>(rope.cost.flops), 3.0 * 4 * 12);
  EXPECT_EQ(static_cast<double>(rope.cost.memory_bytes()), 2 * 64 * 4.0);
  const auto& f = find(ops, "attention");
  EXPECT_EQ(static_cast<double>(f.cost.flops), 256);
  // Q, O: 2 heads x 4 x 4 = 32 elements; K, V: 1 head, 16; the log-sum-exp of the 8 query rows.
  EXPECT_EQ(static_cast<double>(f.cost.memory_bytes()), (32 + 16 + 16 + 32) * 4.0 + 8 * 4.0);
  const auto& b = find(ops, "attention backward");
  EXPECT_EQ(static_cast<double>(b.cost.flops), 2.5 * 256);
  // Q, K, V, O, dO read (32 + 16 + 16 + 32 + 32), dQ, dK, dV written (32 + 16 + 16), the log-sum-exp.
  EXPECT_EQ(static_cast<double>(b.cost.memory_bytes()), (128 + 64) * 4.0 + 8 * 4.0);
  // The math path: the same K, V savings, scores per query head as before.
  auto mm = m;
  mm.flash = false;
  EXPECT_EQ(static_cast<double>(find(rr::model_step_ops(mm), "attention").cost.memory_bytes()),
            (32 + 16 + 16 + 32 + 4 * 32) * 4.0);
  // GEMMs 2 N (2 D^2 + 2 D Dkv + 3 D F) + 2 N D V = 2*4*(128 + 64 + 288) + 1024; attention 256.
  EXPECT_EQ(rr::model_matmul_flops(m, "forward"), 3840 + 1024 + 256);

  // kv_heads equal to heads is the multi-head model, op for op.
  auto same = tiny();
  same.num_kv_heads = 2;
  const auto a = rr::model_step_ops(tiny()), c = rr::model_step_ops(same);
  ASSERT_EQ(a.size(), c.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, c[i].name);
    EXPECT_EQ(a[i].cost.flops, c[i].cost.flops) << a[i].name;
    EXPECT_EQ(a[i].cost.memory_bytes(), c[i].cost.memory_bytes()) << a[i].name;
    EXPECT_EQ(a[i].cost.shape, c[i].cost.shape) << a[i].name;
  }
  // kv_heads must divide heads.
  for (int64_t bad : {3, -1}) {
    auto w = tiny();
    w.num_kv_heads = bad;
    try {
      rr::model_step_ops(w);
      ADD_FAILURE() << bad;
    } catch (const ridge::Error& e) {
      EXPECT_NE(std::string(e.what()).find("kv_heads"), std::string::npos) << e.what();
    }
  }
}
