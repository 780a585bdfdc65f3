// ModelConfig: validation errors name the field; param_count against a count made tensor by tensor;
// presets equal bench/shapes/model-sizes.json; JSON round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ridge/build_paths.h"  // RIDGE_SOURCE_DIR
#include "ridge/core/error.hpp"
#include "ridge/model/config.hpp"
#include "ridge/roofline.hpp"
#include "core/json.hpp"
#include "model/json.hpp"

namespace {

using namespace ridge;
using namespace ridge::model;

ModelConfig small_config() {
  ModelConfig c;
  c.vocab_size = 256;
  c.context_length = 16;
  c.d_model = 64;
  c.num_layers = 2;
  c.num_heads = 4;
  c.d_ff = 160;
  return c;
}

void expect_invalid(const ModelConfig& c, const std::string& part) {
  try {
    c.validate();
    ADD_FAILURE() << "accepted a config that should fail with '" << part << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("ModelConfig: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
}

TEST(ModelConfig, ValidationNamesTheField) {
  EXPECT_NO_THROW(small_config().validate());
  const char* fields[] = {"vocab_size", "context_length", "d_model", "num_layers", "num_heads", "d_ff"};
  for (int i = 0; i < 6; ++i) {
    for (int64_t bad : {int64_t{0}, int64_t{-3}}) {
      ModelConfig c = small_config();
      int64_t* f[] = {&c.vocab_size, &c.context_length, &c.d_model, &c.num_layers, &c.num_heads, &c.d_ff};
      *f[i] = bad;
      expect_invalid(c, std::string(fields[i]) + " is " + std::to_string(bad));
    }
  }
  ModelConfig c = small_config();
  c.num_heads = 3;
  expect_invalid(c, "d_model 64 is not a multiple of num_heads 3");
  c = small_config();
  c.d_model = 36;
  c.num_heads = 4;  // d_head 9
  expect_invalid(c, "d_head = d_model / num_heads = 9 is odd");
  c = small_config();
  c.rope_theta = 0.5;
  expect_invalid(c, "rope_theta");
  c = small_config();
  c.d_model = int64_t{1} << 32;
  c.num_heads = 2;
  expect_invalid(c, "parameter count overflows");
  c = small_config();
  c.context_length = int64_t{1} << 31;
  expect_invalid(c, "context_length");
}

TEST(ModelConfig, ParamCountMatchesAHandCount) {
  // Tensor by tensor for the reference configuration (V 256, D 64, L 2, F 160):
  //   token_embeddings 256*64 = 16384; per layer q,k,v,o 4*64*64 = 16384, w1,w3 2*160*64 = 20480,
  //   w2 64*160 = 10240, ln1, ln2 2*64 = 128 -> 47232; 2 layers 94464; ln_final 64; lm_head 16384.
  EXPECT_EQ(small_config().param_count(), 16384 + 94464 + 64 + 16384);
  // CS336's "small" (GPT-2 small shape with SwiGLU, untied head) at vocab 10000: 2*10000*768 +
  // 12*(4*768^2 + 3*768*3072 + 2*768) + 768.
  const ModelConfig s = preset("small", 10000, 128);
  EXPECT_EQ(s.param_count(), 2 * 10000 * 768 + 12 * (4 * 768 * 768 + 3 * 768 * 3072 + 2 * 768) + 768);
}

TEST(ModelConfig, PresetsEqualTheSharedSizeTable) {
  std::ifstream in(std::string(RIDGE_SOURCE_DIR) + "/bench/shapes/model-sizes.json");
  ASSERT_TRUE(in) << "bench/shapes/model-sizes.json";
  const auto j = nlohmann::json::parse(in);
  size_t n = 0;
  for (const auto& [name, s] : j.at("sizes").items()) {
    const ModelConfig c = preset(name, j.at("vocab").get<int64_t>(), 256);
    EXPECT_EQ(c.d_model, s.at("d_model").get<int64_t>()) << name;
    EXPECT_EQ(c.d_ff, s.at("d_ff").get<int64_t>()) << name;
    EXPECT_EQ(c.num_layers, s.at("num_layers").get<int64_t>()) << name;
    EXPECT_EQ(c.num_heads, s.at("num_heads").get<int64_t>()) << name;
    // The MoE fields, where the table gives them (a dense size has none, and is dense).
    EXPECT_EQ(c.num_experts, s.value("num_experts", int64_t{0})) << name;
    EXPECT_EQ(c.top_k, s.value("top_k", int64_t{0})) << name;
    EXPECT_EQ(c.num_shared_experts, s.value("num_shared_experts", int64_t{0})) << name;
    EXPECT_EQ(c.d_expert, s.value("d_expert", int64_t{0})) << name;
    EXPECT_TRUE(c.moe_layers.empty()) << name;
    EXPECT_EQ(c.vocab_size, 10000);
    EXPECT_EQ(c.context_length, 256);
    ++n;
  }
  EXPECT_EQ(n, preset_names().size());
  try {
    preset("huge", 10000, 128);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'huge' is not a model size (accepted: tiny, small"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(preset("tiny", 0, 128), Error);  // the result is validated
}

// The named MoE sizes (issue 40), counted tensor by tensor at vocab 10000 (the numbers the size table's
// "about" states). moe-tiny: D 256, 4 layers of attention 4 x 256^2, norms 2 x 256, router 8 x 256 and 8
// experts of 3 x 256 x 256; moe-small: small's attention and embeddings, 64 experts of 3 x 768 x 768, one
// shared expert of the same size, top-3, router 64 x 768.
TEST(ModelConfig, MoeSizesByHand) {
  const ModelConfig tiny = preset("moe-tiny", 10000, 256);
  const int64_t emb = 2 * 10000 * 256 + 256, attn = 4 * 256 * 256 + 2 * 256, expert = 3 * 256 * 256;
  EXPECT_EQ(tiny.param_count(), emb + 4 * (attn + 8 * 256 + 8 * expert));
  EXPECT_EQ(tiny.param_count(), 12470528);
  EXPECT_EQ(static_cast<int64_t>(roofline::model_active_param_count(tiny)),
            emb + 4 * (attn + 8 * 256 + 2 * expert));
  EXPECT_EQ(static_cast<int64_t>(roofline::model_active_param_count(tiny)), 7751936);

  const ModelConfig dense = preset("small", 10000, 256), moe = preset("moe-small", 10000, 256);
  const int64_t e768 = 3 * 768 * 768, router = 64 * 768;
  const int64_t shared_part = dense.param_count() - 12 * 3 * 768 * 3072;  // small without its FFNs
  EXPECT_EQ(moe.param_count(), shared_part + 12 * (router + e768 + 64 * e768));
  EXPECT_EQ(moe.param_count(), 1424468736);
  // Active: top-3 x 768 + the shared 768 = small's d_ff of 3072, so small's count plus the routers.
  const auto active = static_cast<int64_t>(roofline::model_active_param_count(moe));
  EXPECT_EQ(active, dense.param_count() + 12 * router);
  EXPECT_EQ(active, 129215232);
  EXPECT_EQ(dense.param_count(), 128625408);
  EXPECT_GE(moe.param_count(), 8 * dense.param_count());  // the issue's 8x: 11.07x
  EXPECT_LT(std::fabs(static_cast<double>(active) / static_cast<double>(dense.param_count()) - 1), 0.005);
  // An MoE size's d_ff is its active feed-forward width.
  EXPECT_EQ(moe.d_ff, moe.top_k * moe.d_expert + moe.num_shared_experts * moe.d_expert);
  EXPECT_EQ(tiny.d_ff, tiny.top_k * tiny.d_expert);
}

TEST(ModelConfig, JsonRoundTripAndErrors) {
  ModelConfig c = small_config();
  c.rope_theta = 500000;
  const nlohmann::json j = c;
  EXPECT_EQ(j.at("d_ff").get<int64_t>(), 160);
  EXPECT_EQ(j.get<ModelConfig>(), c);

  nlohmann::json no_theta = j;
  no_theta.erase("rope_theta");
  EXPECT_EQ(no_theta.get<ModelConfig>().rope_theta, 10000.0);

  auto expect_json_error = [](const nlohmann::json& bad, const std::string& part) {
    try {
      (void)bad.get<ModelConfig>();
      ADD_FAILURE() << bad.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  nlohmann::json missing = j;
  missing.erase("num_heads");
  expect_json_error(missing, "missing 'num_heads'");
  nlohmann::json typed = j;
  typed["d_model"] = "64";
  expect_json_error(typed, "'d_model' is not an int64 integer");
  nlohmann::json invalid = j;
  invalid["num_heads"] = 3;
  expect_json_error(invalid, "not a multiple of num_heads");
  expect_json_error(nlohmann::json::array(), "expected an object");
}

// The public, JSON-library-free form (ridge/model/config.hpp): text out, text back, the same errors.
TEST(ModelConfig, JsonTextRoundTripAndErrors) {
  ModelConfig c = small_config();
  c.rope_theta = 500000;
  const std::string text = to_json_text(c);
  EXPECT_EQ(nlohmann::json::parse(text), nlohmann::json(c));  // the same document as the nlohmann form
  EXPECT_EQ(from_json_text(text), c);
  EXPECT_EQ(from_json_text(to_json_text(c, 2)), c);
  try {
    (void)from_json_text(R"({"vocab_size": 10})", "--config");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing 'context_length'"), std::string::npos) << e.what();
  }
  try {
    (void)from_json_text("{not json", "--config");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--config"), std::string::npos) << e.what();
  }
}

}  // namespace

// Grouped-query attention (num_kv_heads): refused unless it divides num_heads; 0 and num_heads are the
// same model (equal configs, the same JSON, the multi-head JSON written as before: no num_kv_heads);
// k_proj and v_proj shrink to kv_heads * d_head rows in the parameter count.
TEST(ModelConfig, KvHeadsValidationJsonAndParamCount) {
  ModelConfig c = small_config();  // 4 heads of 16
  for (int64_t bad : {int64_t{-1}, int64_t{3}, int64_t{8}}) {
    c.num_kv_heads = bad;
    expect_invalid(c, "num_kv_heads " + std::to_string(bad) +
                          " must be >= 0 (0: equal to num_heads) and divide "
                          "num_heads 4");
  }
  ModelConfig mha = small_config(), same = small_config();
  same.num_kv_heads = 4;
  EXPECT_EQ(mha, same);
  EXPECT_EQ(mha.kv_heads(), 4);
  EXPECT_EQ(to_json_text(same), to_json_text(mha));
  EXPECT_FALSE(nlohmann::json(mha).contains("num_kv_heads"));

  ModelConfig gqa = small_config();
  gqa.num_kv_heads = 2;
  EXPECT_FALSE(gqa == mha);
  EXPECT_EQ(nlohmann::json(gqa).at("num_kv_heads").get<int64_t>(), 2);
  EXPECT_EQ(from_json_text(to_json_text(gqa)), gqa);
  EXPECT_EQ(from_json_text(to_json_text(gqa)).kv_heads(), 2);
  // Per layer k and v lose (64 - 2*16) * 64 = 2048 parameters each: 47232 - 4096 = 43136.
  EXPECT_EQ(gqa.param_count(), 16384 + 2 * 43136 + 64 + 16384);
  gqa.num_kv_heads = 1;  // k and v [16, 64]: 47232 - 2 * 48 * 64 = 41088
  EXPECT_EQ(gqa.param_count(), 16384 + 2 * 41088 + 64 + 16384);
}

// RMSNorm's epsilon is a field of the one shape struct: 1e-5 unless set, refused unless finite and > 0,
// written to the JSON only when it differs (a default model's JSON is what it always was), read back
// exactly, and part of the model's identity.
TEST(ModelConfig, RmsNormEpsValidationAndJson) {
  ModelConfig c = small_config();
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  const std::string before = R"({"context_length":16,"d_ff":160,"d_model":64,"num_heads":4,"num_layers":2,)"
                             R"("rope_theta":10000.0,"vocab_size":256})";
  EXPECT_EQ(to_json_text(c), before);
  for (double bad : {0.0, -1e-6, std::numeric_limits<double>::infinity(), std::nan("")}) {
    c.rms_norm_eps = bad;
    expect_invalid(c, "rms_norm_eps");
  }
  ModelConfig eps = small_config();
  eps.rms_norm_eps = 1e-6;
  EXPECT_FALSE(eps == small_config());
  EXPECT_EQ(nlohmann::json(eps).at("rms_norm_eps").get<double>(), 1e-6);
  EXPECT_EQ(from_json_text(to_json_text(eps)), eps);
  EXPECT_EQ(from_json_text(to_json_text(eps)).rms_norm_eps, 1e-6);
  try {
    (void)from_json_text(R"({"vocab_size":256,"context_length":16,"d_model":64,"num_layers":2,"num_heads":4,)"
                         R"("d_ff":160,"rms_norm_eps":"1e-6"})");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'rms_norm_eps' is not a number"), std::string::npos) << e.what();
  }
}

// The MoE fields (issue 40): a dense model's JSON is unchanged and refuses MoE fields without experts;
// an MoE model round-trips with every field; each bad value names its field.
TEST(ModelConfig, MoeFieldsValidationAndJson) {
  ModelConfig dense = small_config();
  EXPECT_EQ(to_json_text(dense).find("experts"), std::string::npos);
  dense.top_k = 2;
  expect_invalid(dense, "top_k is set but num_experts is 0");
  dense = small_config();
  dense.moe_layers = {1};
  expect_invalid(dense, "moe_layers is set but num_experts is 0");

  ModelConfig m = small_config();
  m.num_experts = 4, m.top_k = 2, m.num_shared_experts = 1, m.d_expert = 48, m.moe_layers = {1};
  m.router = roofline::MoeGate::sigmoid, m.balance = roofline::MoeBalance::bias, m.bias_update_speed = 0.01;
  m.validate();
  const auto j = nlohmann::json::parse(to_json_text(m));
  EXPECT_EQ(j.at("num_experts"), 4);
  EXPECT_EQ(j.at("top_k"), 2);
  EXPECT_EQ(j.at("d_expert"), 48);
  EXPECT_EQ(j.at("moe_layers"), nlohmann::json::array({1}));
  EXPECT_EQ(j.at("router"), "sigmoid");
  EXPECT_EQ(j.at("balance"), "bias");
  const ModelConfig back = from_json_text(to_json_text(m));
  EXPECT_EQ(back, m);
  EXPECT_EQ(back.moe_layers, m.moe_layers);
  EXPECT_EQ(back.router, roofline::MoeGate::sigmoid);
  EXPECT_EQ(back.bias_update_speed, 0.01);
  ModelConfig other = m;
  other.top_k = 1;
  EXPECT_FALSE(other == m);
  other = m;
  other.moe_layers = {0};
  EXPECT_FALSE(other == m);
  // d_expert 0 is d_ff, and a list of every layer is "all".
  ModelConfig a = m, b = m;
  a.d_expert = 0, b.d_expert = m.d_ff;
  a.moe_layers = {}, b.moe_layers = {0, 1};
  EXPECT_EQ(a, b);

  for (auto [field, part] :
       {std::pair{&ModelConfig::top_k, "top_k is 0"}, std::pair{&ModelConfig::top_k, "top_k is 5"},
        std::pair{&ModelConfig::num_shared_experts, "num_shared_experts is -1"},
        std::pair{&ModelConfig::d_expert, "d_expert is -1"},
        std::pair{&ModelConfig::num_experts, "num_experts is -1"}}) {
    ModelConfig bad = m;
    bad.*field = std::string(part).find("5") != std::string::npos    ? 5
                 : std::string(part).find("-1") != std::string::npos ? -1
                                                                     : 0;
    expect_invalid(bad, part);
  }
  for (const std::vector<int64_t>& layers :
       {std::vector<int64_t>{2}, std::vector<int64_t>{1, 0}, std::vector<int64_t>{-1}}) {
    ModelConfig bad = m;
    bad.moe_layers = layers;
    expect_invalid(bad, "moe_layers must be ascending layer indices in [0, num_layers = 2)");
  }
  ModelConfig coef = m;
  coef.aux_loss_coef = -0.1;
  expect_invalid(coef, "aux_loss_coef");
  for (
      const char* text :
      {R"({"vocab_size":256,"context_length":16,"d_model":64,"num_layers":2,"num_heads":4,"d_ff":160,"num_experts":4,"top_k":2,"router":"relu"})",
       R"({"vocab_size":256,"context_length":16,"d_model":64,"num_layers":2,"num_heads":4,"d_ff":160,"num_experts":4,"top_k":2,"moe_layers":[0.5]})"}) {
    EXPECT_THROW((void)from_json_text(text), Error) << text;
  }
}

// --moe-layers: "all", lists, ranges and open ranges, each error naming the flag and the forms.
TEST(ModelConfig, MoeLayersParseAndPrint) {
  EXPECT_TRUE(parse_moe_layers("all", 6).empty());
  EXPECT_EQ(parse_moe_layers("1,3", 6), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(parse_moe_layers("4,0-1", 6), (std::vector<int64_t>{0, 1, 4}));
  EXPECT_EQ(parse_moe_layers("2-", 6), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_TRUE(parse_moe_layers("0-", 6).empty());  // every layer is "all"
  for (const char* bad : {"", "6", "1,,2", "3-1", "1,1", "x", "-1", "1-2-3", "+1", "1 "}) {
    try {
      (void)parse_moe_layers(bad, 6);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("--moe-layers"), std::string::npos) << msg;
      EXPECT_NE(msg.find("accepted: all"), std::string::npos) << msg;
    }
  }
  roofline::ModelArch m;
  m.num_layers = 8, m.num_experts = 2;
  EXPECT_EQ(moe_layers_text(m), "all");
  m.moe_layers = {0, 2, 3, 4, 7};
  EXPECT_EQ(moe_layers_text(m), "0,2-4,7");
  EXPECT_EQ(parse_moe_layers(moe_layers_text(m), 8), m.moe_layers);
}

// The defaults of the fields the size table does not list per size are the table's own: the tools read
// rope_theta and rms_norm_eps from bench/shapes/model-sizes.json, never from a copy of their own.
TEST(ModelConfig, DefaultsEqualTheSharedSizeTable) {
  std::ifstream in(std::string(RIDGE_SOURCE_DIR) + "/bench/shapes/model-sizes.json");
  ASSERT_TRUE(in) << "bench/shapes/model-sizes.json";
  const auto j = nlohmann::json::parse(in);
  const ModelConfig c = preset("small", 10000, 256);
  EXPECT_EQ(c.rope_theta, j.at("rope_theta").get<double>());
  EXPECT_EQ(c.rms_norm_eps, j.at("rms_norm_eps").get<double>());
  EXPECT_EQ(ModelConfig{}.rms_norm_eps, j.at("rms_norm_eps").get<double>());
}
