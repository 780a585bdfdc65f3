// The parameter count of the buffer description against the closed form computed here in 128-bit
// integers: exact wherever it fits int64, nullopt (and an error naming the sizes) where it does not,
// including shapes whose count lies just beside 2^63.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "ridge/core/error.hpp"
#include "ridge/roofline/model_buffers.hpp"

namespace rr = ridge::roofline;

namespace {
__extension__ typedef __int128 i128;  // GCC/Clang's 128-bit integers (-Wpedantic needs the marker)

i128 closed_form(const rr::ModelShape& m) {
  const i128 V = m.vocab_size, D = m.d_model, F = m.d_ff, L = m.num_layers;
  return 2 * V * D + L * (4 * D * D + 3 * D * F + 2 * D) + D;
}
}  // namespace

TEST(ModelBuffers, ParameterCountIsExactUpToInt64AndRefusedBeyond) {
  const i128 max = std::numeric_limits<int64_t>::max();
  rr::ModelShape m;
  m.vocab_size = 50257, m.d_model = 768, m.d_ff = 3072, m.num_layers = 12;
  ASSERT_EQ(rr::try_model_parameter_elements(m), static_cast<int64_t>(closed_form(m)));
  // Layer counts around the one that reaches 2^63 with d_model = d_ff = 2^20 (odd terms keep the count
  // off round numbers): exact below, refused at and above.
  m.vocab_size = 3, m.d_model = int64_t{1} << 20, m.d_ff = (int64_t{1} << 20) + 1;
  rr::ModelShape no_layers = m;
  no_layers.num_layers = 0;
  const i128 per_layer = closed_form(m) - closed_form(no_layers);
  const int64_t edge = static_cast<int64_t>((max - (closed_form(m) - per_layer * m.num_layers)) / per_layer);
  for (int64_t layers : {edge - 1, edge, edge + 1, edge + 2}) {
    m.num_layers = layers;
    const i128 exact = closed_form(m);
    const auto got = rr::try_model_parameter_elements(m);
    if (exact <= max) {
      ASSERT_TRUE(got.has_value()) << layers;
      EXPECT_EQ(*got, static_cast<int64_t>(exact)) << layers;
      EXPECT_EQ(rr::model_parameter_elements(m), static_cast<int64_t>(exact));
    } else {
      EXPECT_FALSE(got.has_value()) << layers;
      EXPECT_THROW(rr::model_parameter_elements(m), ridge::Error);
    }
  }
}

// Grouped-query attention: k_proj and v_proj are [kv_heads * d_head, D], every q|k|v buffer
// [N, D + 2 Dkv]; with kv_heads = heads (or 0) the description is the multi-head one.
TEST(ModelBuffers, GroupedQueryShapes) {
  rr::ModelShape m;
  m.vocab_size = 100, m.d_model = 64, m.num_layers = 3, m.num_heads = 8, m.d_ff = 96, m.batch = 2, m.seq = 5;
  const i128 mha = closed_form(m);
  EXPECT_EQ(rr::kv_width(m), 64);
  EXPECT_EQ(rr::qkv_width(m), 192);
  for (int64_t kv : {8, 4, 2, 1}) {
    SCOPED_TRACE(kv);
    m.num_kv_heads = kv;
    const int64_t dkv = kv * 8;
    EXPECT_EQ(rr::kv_width(m), dkv);
    EXPECT_EQ(rr::qkv_width(m), 64 + 2 * dkv);
    // Per layer, k and v lose 2 (D - Dkv) D.
    EXPECT_EQ(rr::model_parameter_elements(m), static_cast<int64_t>(mha - 3 * 2 * (64 - dkv) * 64));
    for (const auto& p : rr::model_parameters(m)) {
      if (p.name.find("k_proj") != std::string::npos || p.name.find("v_proj") != std::string::npos) {
        EXPECT_EQ(p.shape, (std::vector<int64_t>{dkv, 64})) << p.name;
      }
    }
    for (rr::Buf b : {rr::Buf::qkv, rr::Buf::dattn, rr::Buf::dqkv})
      EXPECT_EQ(rr::buffer_shape(b, m), (std::vector<int64_t>{10, 64 + 2 * dkv})) << rr::spec(b).name;
    // The forward GEMM workspace holds the wider of q|k|v and w1|w3 (2F = 192).
    EXPECT_EQ(rr::buffer_shape(rr::Buf::gemm, m), (std::vector<int64_t>{10, 192}));
  }
  for (int64_t bad : {3, -2}) {
    m.num_kv_heads = bad;
    EXPECT_THROW(rr::kv_width(m), ridge::Error) << bad;
    EXPECT_THROW(rr::model_parameters(m), ridge::Error) << bad;
  }
}

// The parameters by kind, and the fp8 scales of the linears, against counts made here by hand for a
// grouped-query shape whose sizes are not multiples of 128 (each tensor's blocks rounded up on its own).
TEST(ModelBuffers, ParameterGroupsAndWeightBytes) {
  rr::ModelArch m;
  m.vocab_size = 1000, m.d_model = 320, m.num_layers = 3, m.num_heads = 10, m.num_kv_heads = 2, m.d_ff = 200;
  const int64_t V = 1000, D = 320, L = 3, F = 200, Dkv = 2 * 32;
  const auto g = rr::model_param_groups(m);
  EXPECT_EQ(static_cast<double>(g.linears), double(L * (2 * D * D + 2 * Dkv * D + 3 * D * F)));
  EXPECT_EQ(static_cast<double>(g.norms), double((2 * L + 1) * D));
  EXPECT_EQ(static_cast<double>(g.head), double(V * D));
  EXPECT_EQ(static_cast<double>(g.embedding), double(V * D));
  EXPECT_EQ(static_cast<double>(g.linears + g.norms + g.head + g.embedding),
            double(rr::model_parameter_elements(m)));
  // Blocks of 128: D = 320 -> 3, Dkv = 64 -> 1, F = 200 -> 2. q, o [D, D]: 9 each; k, v [Dkv, D]: 3 each;
  // w1, w3 [F, D]: 6 each; w2 [D, F]: 6.
  EXPECT_EQ(static_cast<double>(g.linear_scale_blocks), double(L * (2 * 9 + 2 * 3 + 2 * 6 + 6)));
  EXPECT_EQ(static_cast<double>(rr::weight_scale_blocks(130, 200)), 4.0);
  EXPECT_EQ(static_cast<double>(rr::weight_bytes(130, 200, ridge::DType::f32)), 4.0 * 130 * 200);
  EXPECT_EQ(static_cast<double>(rr::weight_bytes(130, 200, ridge::DType::bf16)), 2.0 * 130 * 200);
  EXPECT_EQ(static_cast<double>(rr::weight_bytes(130, 200, ridge::DType::fp8_e4m3)), 130.0 * 200 + 4 * 4);
}

// The memory estimate answers for a step no machine holds (the logits alone 2^70 elements here, past
// int64 and size_t) with its size, never a wrapped count: a caller refuses it for what it is.
TEST(ModelBuffers, MemoryOfAStepPastSixtyFourBitsIsItsSizeNotAWrappedCount) {
  rr::ModelShape m;
  m.vocab_size = int64_t{1} << 20, m.d_model = 64, m.num_layers = 2, m.num_heads = 4, m.d_ff = 128;
  m.batch = int64_t{1} << 20, m.seq = int64_t{1} << 30;
  const auto mem = rr::model_memory(m);
  EXPECT_GE(mem.final, 4 * 0x1p70);  // the fp32 logits [N, V]
  EXPECT_LT(mem.final, 5 * 0x1p70);
  EXPECT_GE(mem.total(), mem.final);
  // The same shape at a size that fits: the estimate is the layout the model carves, byte for byte.
  m.batch = 2, m.seq = 8, m.vocab_size = 100;
  EXPECT_EQ(rr::model_memory(m).final,
            static_cast<double>(rr::region_layout(rr::Region::final, m, 4, 4).bytes));
}

// An MoE shape (issue 40): the layers named in moe_layers carry a router and stacked experts in place of
// w1/w2/w3, with the documented names and shapes; the others stay dense. Counted here by hand.
TEST(ModelBuffers, MoeLayersCarryTheRouterAndStackedExperts) {
  rr::ModelArch m;
  m.vocab_size = 1000, m.d_model = 320, m.num_layers = 4, m.num_heads = 10, m.d_ff = 200;
  m.num_experts = 6, m.top_k = 2, m.num_shared_experts = 2, m.d_expert = 130, m.moe_layers = {1, 3};
  const int64_t V = 1000, D = 320, F = 200, E = 6, De = 130, S = 2 * 130;
  std::map<std::string, std::vector<int64_t>> shapes;
  std::vector<int> groups;
  for (const auto& p : rr::model_parameters(m)) {
    shapes[p.name] = p.shape;
    groups.push_back(p.group);
  }
  for (int l : {1, 3}) {
    const std::string f = "layers." + std::to_string(l) + ".ffn.";
    EXPECT_EQ(shapes.at(f + "router.weight"), (std::vector<int64_t>{E, D}));
    EXPECT_EQ(shapes.at(f + "experts.w1.weight"), (std::vector<int64_t>{E, De, D}));
    EXPECT_EQ(shapes.at(f + "experts.w3.weight"), (std::vector<int64_t>{E, De, D}));
    EXPECT_EQ(shapes.at(f + "experts.w2.weight"), (std::vector<int64_t>{E, D, De}));
    EXPECT_EQ(shapes.at(f + "shared.w1.weight"), (std::vector<int64_t>{S, D}));
    EXPECT_EQ(shapes.at(f + "shared.w2.weight"), (std::vector<int64_t>{D, S}));
    EXPECT_FALSE(shapes.count(f + "w1.weight"));
  }
  for (int l : {0, 2}) {
    EXPECT_EQ(shapes.at("layers." + std::to_string(l) + ".ffn.w1.weight"), (std::vector<int64_t>{F, D}));
    EXPECT_FALSE(shapes.count("layers." + std::to_string(l) + ".ffn.router.weight"));
  }
  // Still one group per layer, in the gradients' order.
  EXPECT_EQ(groups.back(), 1 + 1 + 4);
  const int64_t attn = 4 * D * D, norms = (2 * 4 + 1) * D;
  const auto g = rr::model_param_groups(m);
  EXPECT_EQ(static_cast<double>(g.linears), double(4 * attn + 2 * 3 * D * F + 2 * 3 * D * S));
  EXPECT_EQ(static_cast<double>(g.experts), double(2 * E * 3 * De * D));
  EXPECT_EQ(static_cast<double>(g.router), double(2 * E * D));
  EXPECT_EQ(static_cast<double>(g.norms), double(norms));
  EXPECT_EQ(static_cast<double>(g.head + g.embedding), double(2 * V * D));
  // Blocks of 128: De = 130 -> 2, D = 320 -> 3: each expert matrix 6 blocks, 3 per expert, 2 layers.
  EXPECT_EQ(static_cast<double>(g.expert_scale_blocks), double(2 * E * 3 * 6));
  int64_t sum = 0;
  for (const auto& p : rr::model_parameters(m)) {
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    sum += n;
  }
  EXPECT_EQ(rr::model_parameter_elements(m), sum);
  // Every layer MoE (moe_layers empty), no shared experts, d_expert 0 = d_ff.
  m.moe_layers.clear(), m.num_shared_experts = 0, m.d_expert = 0;
  const auto all = rr::model_param_groups(m);
  EXPECT_EQ(static_cast<double>(all.experts), double(4 * E * 3 * F * D));
  EXPECT_EQ(static_cast<double>(all.linears), double(4 * attn));
}
