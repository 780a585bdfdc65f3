#include "ridge/model/config.hpp"

#include <cmath>

#include "ridge/core/error.hpp"
#include "core/check.hpp"
#include "core/json.hpp"
#include "model/json.hpp"
#include "ridge/roofline/model_buffers.hpp"

namespace ridge::model {
namespace {

struct Preset {
  const char* name;
  int64_t d_model, d_ff, num_layers, num_heads;
};
// The same numbers as bench/shapes/model-sizes.json (a test holds the two together).
constexpr Preset kPresets[] = {
    {"tiny", 512, 1344, 4, 16},    {"small", 768, 3072, 12, 12}, {"medium", 1024, 4096, 24, 16},
    {"large", 1280, 5120, 36, 20}, {"xl", 1600, 6400, 48, 25},   {"2.7B", 2560, 10240, 32, 32},
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

bool ModelConfig::operator==(const ModelConfig& o) const {
  return vocab_size == o.vocab_size && context_length == o.context_length && d_model == o.d_model &&
         num_layers == o.num_layers && num_heads == o.num_heads && d_ff == o.d_ff &&
         rope_theta == o.rope_theta && kv_heads() == o.kv_heads() && rms_norm_eps == o.rms_norm_eps;
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
  for (auto [key, field] : {std::pair{"rope_theta", &ModelConfig::rope_theta},
                            std::pair{"rms_norm_eps", &ModelConfig::rms_norm_eps}})
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
