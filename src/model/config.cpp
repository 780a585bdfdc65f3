#include "ridge/model/config.hpp"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "ridge/core/error.hpp"
#include "core/check.hpp"
#include "core/json.hpp"
#include "model/json.hpp"
#include "ridge/model/moe.hpp"
#include "ridge/roofline/model_buffers.hpp"

namespace ridge::model {
namespace {

struct Preset {
  const char* name;
  int64_t d_model, d_ff, num_layers, num_heads;
  // Mixture of Experts in every layer (issue 40); 0 experts: a dense size. An MoE size's d_ff is its active
  // feed-forward width, top_k x d_expert + the shared experts': the dense size of the same active count.
  int64_t num_experts = 0, top_k = 0, num_shared_experts = 0, d_expert = 0;
};
// The same numbers as bench/shapes/model-sizes.json (a test holds the two together). moe-tiny trains on two
// cores in minutes; moe-small is small's attention with 11x its parameters at the same active ones (the
// router's 0.46% aside: tests/model/test_config.cpp counts them); moe-mixtral is Mixtral's form (8 experts,
// softmax top-2, no shared expert: what llama.cpp runs, the decode peer) at small's attention and width.
constexpr Preset kPresets[] = {
    {"tiny", 512, 1344, 4, 16},
    {"small", 768, 3072, 12, 12},
    {"medium", 1024, 4096, 24, 16},
    {"large", 1280, 5120, 36, 20},
    {"xl", 1600, 6400, 48, 25},
    {"2.7B", 2560, 10240, 32, 32},
    {"moe-tiny", 256, 512, 4, 4, 8, 2, 0, 256},
    {"moe-small", 768, 3072, 12, 12, 64, 3, 1, 768},
    {"moe-mixtral", 768, 6144, 12, 12, 8, 2, 0, 3072},
};

bool mul(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

// The parameter count from the model's description of its tensors (ridge/roofline/model_buffers.hpp),
// with overflow detection; false when it overflows.
bool count_params(const ModelConfig& c, int64_t* out) {
  const auto n = roofline::try_model_parameter_elements(c);
  if (n) *out = *n;
  return n.has_value();
}

}  // namespace

void ModelConfig::validate() const {
  const std::pair<const char*, int64_t> fields[] = {
      {"vocab_size", vocab_size}, {"context_length", context_length}, {"d_model", d_model},
      {"num_layers", num_layers}, {"num_heads", num_heads},           {"d_ff", d_ff}};
  for (const auto& [name, v] : fields) check(v > 0, "ModelConfig: {} is {}; it must be > 0", name, v);
  check(num_kv_heads >= 0 && num_heads % kv_heads() == 0,
        "ModelConfig: num_kv_heads {} must be >= 0 (0: equal to num_heads) and divide num_heads {}",
        num_kv_heads, num_heads);
  check(d_model % num_heads == 0, "ModelConfig: d_model {} is not a multiple of num_heads {}", d_model,
        num_heads);
  check(d_head() % 2 == 0,
        "ModelConfig: d_head = d_model / num_heads = {} is odd; RoPE rotates pairs, so it must be even",
        d_head());
  check(std::isfinite(rope_theta) && rope_theta > 1,
        "ModelConfig: rope_theta is {}; it must be finite and > 1", rope_theta);
  check(std::isfinite(rms_norm_eps) && rms_norm_eps > 0,
        "ModelConfig: rms_norm_eps is {}; it must be finite and > 0", rms_norm_eps);
  validate_moe();
  int64_t n;
  check(
      count_params(*this, &n),
      "ModelConfig: the parameter count overflows int64 (d_model {}, d_ff {}, vocab_size {}, num_layers {})",
      d_model, d_ff, vocab_size, num_layers);
  // The largest per-sequence activations: scores [heads, T, T], logits [T, V], feed-forward [T, F].
  int64_t a, b, c2;
  check(mul(context_length, context_length, &a) && mul(a, num_heads, &a) &&
            mul(context_length, vocab_size, &b) && mul(context_length, d_ff, &c2) &&
            mul(context_length, d_model, &c2),
        "ModelConfig: context_length {} makes the activation sizes overflow int64", context_length);
}

void ModelConfig::validate_moe() const {
  check(num_experts >= 0, "ModelConfig: num_experts is {}; it must be >= 0 (0: a dense model)", num_experts);
  if (!is_moe()) {
    const std::pair<const char*, bool> set[] = {{"top_k", top_k != 0},
                                                {"num_shared_experts", num_shared_experts != 0},
                                                {"d_expert", d_expert != 0},
                                                {"moe_layers", !moe_layers.empty()}};
    for (const auto& [name, given] : set)
      check(!given, "ModelConfig: {} is set but num_experts is 0; MoE fields need num_experts >= 1", name);
    return;
  }
  check(top_k >= 1 && top_k <= num_experts, "ModelConfig: top_k is {}; it must be in [1, num_experts = {}]",
        top_k, num_experts);
  check(num_shared_experts >= 0, "ModelConfig: num_shared_experts is {}; it must be >= 0",
        num_shared_experts);
  check(d_expert >= 0, "ModelConfig: d_expert is {}; it must be >= 0 (0: d_ff)", d_expert);
  for (size_t i = 0; i < moe_layers.size(); ++i)
    check(moe_layers[i] >= 0 && moe_layers[i] < num_layers && (i == 0 || moe_layers[i] > moe_layers[i - 1]),
          "ModelConfig: moe_layers must be ascending layer indices in [0, num_layers = {}), got {} at "
          "position {}",
          num_layers, moe_layers[i], i);
  check(std::isfinite(aux_loss_coef) && aux_loss_coef >= 0,
        "ModelConfig: aux_loss_coef is {}; it must be finite and >= 0", aux_loss_coef);
  check(std::isfinite(bias_update_speed) && bias_update_speed >= 0,
        "ModelConfig: bias_update_speed is {}; it must be finite and >= 0", bias_update_speed);
}

bool ModelConfig::operator==(const ModelConfig& o) const {
  const bool dense = vocab_size == o.vocab_size && context_length == o.context_length &&
                     d_model == o.d_model && num_layers == o.num_layers && num_heads == o.num_heads &&
                     d_ff == o.d_ff && rope_theta == o.rope_theta && kv_heads() == o.kv_heads() &&
                     rms_norm_eps == o.rms_norm_eps;
  if (!dense || num_experts != o.num_experts) return false;
  if (!is_moe()) return true;
  // moe_layers compared as the set of layers (empty and every index listed are the same model).
  for (int64_t l = 0; l < num_layers; ++l)
    if (moe_layer(l) != o.moe_layer(l)) return false;
  return top_k == o.top_k && num_shared_experts == o.num_shared_experts &&
         expert_width() == o.expert_width() && router == o.router && balance == o.balance &&
         aux_loss_coef == o.aux_loss_coef && bias_update_speed == o.bias_update_speed;
}

std::vector<int64_t> parse_moe_layers(const std::string& text, int64_t num_layers, const char* what) {
  // "all" | items separated by commas, each "i", "a-b" (inclusive) or "a-" (a to the last layer).
  // "'<text>': <why> (accepted: ...)", why naming the item at fault (the whole text when it is one item).
  const auto bad = [&](std::string_view why, std::string_view item) -> int64_t {
    const std::string where = item == text ? std::string() : fmt::format("'{}': ", text);
    fail_arg(what,
             "{}{} '{}' (accepted: all, or layer indices in [0, {}) as a comma list of i, a-b and a-, e.g. "
             "1,3 or 2-)",
             where, why, item, num_layers);
  };
  if (text == "all") return {};
  const auto index = [&](std::string_view s) -> int64_t {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string_view::npos)
      return bad("not a layer index:", s);
    int64_t v = 0;
    for (char ch : s) v = v * 10 + (ch - '0');
    return v < num_layers ? v : bad("a layer past the last:", s);
  };
  std::vector<int64_t> out;
  const std::string_view all(text);
  for (size_t at = 0; at <= all.size();) {
    const size_t comma = std::min(all.find(',', at), all.size());
    const std::string_view item = all.substr(at, comma - at);
    const size_t dash = item.find('-');
    const int64_t a = index(item.substr(0, dash));
    const int64_t b = dash == std::string_view::npos ? a
                      : dash + 1 == item.size()      ? num_layers - 1
                                                     : index(item.substr(dash + 1));
    if (b < a) bad("a range that runs backwards:", item);
    for (int64_t l = a; l <= b; ++l) out.push_back(l);
    at = comma + 1;
  }
  std::sort(out.begin(), out.end());
  const auto twice = std::adjacent_find(out.begin(), out.end());
  if (twice != out.end()) bad("a layer named twice:", std::to_string(*twice));
  if (static_cast<int64_t>(out.size()) == num_layers) out.clear();
  return out;
}

std::string moe_layers_text(const roofline::ModelArch& m) {
  if (m.moe_layers.empty()) return "all";
  std::string out;
  for (size_t i = 0; i < m.moe_layers.size();) {
    size_t j = i;
    while (j + 1 < m.moe_layers.size() && m.moe_layers[j + 1] == m.moe_layers[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out +=
        j > i ? fmt::format("{}-{}", m.moe_layers[i], m.moe_layers[j]) : fmt::format("{}", m.moe_layers[i]);
    i = j + 1;
  }
  return out;
}

int64_t ModelConfig::param_count() const {
  int64_t n = 0;
  check(count_params(*this, &n), "ModelConfig: the parameter count overflows int64");
  return n;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const auto& p : kPresets) out.emplace_back(p.name);
  return out;
}

ModelConfig preset(const std::string& name, int64_t vocab, int64_t context) {
  for (const auto& p : kPresets) {
    if (name != p.name) continue;
    ModelConfig c;
    c.vocab_size = vocab;
    c.context_length = context;
    c.d_model = p.d_model;
    c.d_ff = p.d_ff;
    c.num_layers = p.num_layers;
    c.num_heads = p.num_heads;
    c.num_experts = p.num_experts;
    c.top_k = p.top_k;
    c.num_shared_experts = p.num_shared_experts;
    c.d_expert = p.d_expert;
    c.validate();
    return c;
  }
  std::string names;
  for (const auto& p : kPresets) names += (names.empty() ? "" : ", ") + std::string(p.name);
  fail("preset: name '{}' is not a model size (accepted: {})", name, names);
}

void to_json(nlohmann::json& j, const ModelConfig& c) {
  j = {{"vocab_size", c.vocab_size}, {"context_length", c.context_length}, {"d_model", c.d_model},
       {"num_layers", c.num_layers}, {"num_heads", c.num_heads},           {"d_ff", c.d_ff},
       {"rope_theta", c.rope_theta}};
  // Written only for grouped-query models, so a multi-head model's JSON is what it always was.
  if (c.kv_heads() != c.num_heads) j["num_kv_heads"] = c.kv_heads();
  // Likewise an epsilon other than the default: every model before this field keeps its JSON.
  if (c.rms_norm_eps != roofline::kDefaultRmsNormEps) j["rms_norm_eps"] = c.rms_norm_eps;
  // The MoE fields, for an MoE model only (Hugging Face's flat keys, ridge's names).
  if (c.is_moe()) {
    j["num_experts"] = c.num_experts;
    j["top_k"] = c.top_k;
    j["num_shared_experts"] = c.num_shared_experts;
    j["d_expert"] = c.expert_width();
    if (!c.moe_layers.empty()) j["moe_layers"] = c.moe_layers;
    j["router"] = moe::gate_name(c.router);
    j["balance"] = moe::balance_name(c.balance);
    j["aux_loss_coef"] = c.aux_loss_coef;
    j["bias_update_speed"] = c.bias_update_speed;
  }
}

void from_json(const nlohmann::json& j, ModelConfig& c) {
  check(j.is_object(), "ModelConfig JSON: expected an object, got {}", j.type_name());
  auto integer = [&](const char* key) {
    check(j.contains(key), "ModelConfig JSON: missing '{}'", key);
    const auto& v = j.at(key);
    check(v.is_number_integer() && (v.is_number_unsigned() ? v.get<uint64_t>() <= INT64_MAX : true),
          "ModelConfig JSON: '{}' is not an int64 integer", key);
    return v.get<int64_t>();
  };
  ModelConfig r;
  r.vocab_size = integer("vocab_size");
  r.context_length = integer("context_length");
  r.d_model = integer("d_model");
  r.num_layers = integer("num_layers");
  r.num_heads = integer("num_heads");
  r.d_ff = integer("d_ff");
  if (j.contains("num_kv_heads")) r.num_kv_heads = integer("num_kv_heads");
  for (auto [key, field] :
       {std::pair{"num_experts", &ModelConfig::num_experts}, std::pair{"top_k", &ModelConfig::top_k},
        std::pair{"num_shared_experts", &ModelConfig::num_shared_experts},
        std::pair{"d_expert", &ModelConfig::d_expert}})
    if (j.contains(key)) r.*field = integer(key);
  if (j.contains("moe_layers")) {
    const auto& v = j.at("moe_layers");
    check(v.is_array(), "ModelConfig JSON: 'moe_layers' is not an array of layer indices");
    for (const auto& x : v) {
      check(x.is_number_integer() && x.get<int64_t>() >= 0,
            "ModelConfig JSON: 'moe_layers' holds {}, not a layer index", x.dump());
      r.moe_layers.push_back(x.get<int64_t>());
    }
  }
  auto name = [&](const char* key) {
    check(j.at(key).is_string(), "ModelConfig JSON: '{}' is not a string", key);
    return j.at(key).get<std::string>();
  };
  if (j.contains("router")) r.router = moe::parse_gate(name("router"), "ModelConfig JSON: router");
  if (j.contains("balance")) r.balance = moe::parse_balance(name("balance"), "ModelConfig JSON: balance");
  for (auto [key, field] : {std::pair{"rope_theta", &ModelConfig::rope_theta},
                            std::pair{"rms_norm_eps", &ModelConfig::rms_norm_eps},
                            std::pair{"aux_loss_coef", &ModelConfig::aux_loss_coef},
                            std::pair{"bias_update_speed", &ModelConfig::bias_update_speed}})
    if (j.contains(key)) {
      check(j.at(key).is_number(), "ModelConfig JSON: '{}' is not a number", key);
      r.*field = j.at(key).get<double>();
    }
  r.validate();
  c = r;
}

std::string to_json_text(const ModelConfig& c, int indent) {
  nlohmann::json j;
  to_json(j, c);
  return j.dump(indent);
}

ModelConfig from_json_text(const std::string& text, const std::string& what) {
  ModelConfig c;
  from_json(input::parse_json(text, what), c);
  return c;
}

}  // namespace ridge::model
