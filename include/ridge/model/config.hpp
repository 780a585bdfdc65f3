// The shape of a Transformer LM (the CS336 "basics" model: pre-norm blocks, RMSNorm, RoPE, SwiGLU, untied
// lm_head, no biases), its size presets and its JSON form (checkpoint metadata).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ridge/roofline/model_arch.hpp"

namespace ridge::model {

// The architecture's numbers are roofline::ModelArch's (vocab_size, context_length, d_model, num_layers,
// num_heads, d_ff, rope_theta, num_kv_heads with kv_heads(), rms_norm_eps, d_head()): the one struct the
// model, its memory estimates and the rooflines all read. ModelConfig adds its checks.
struct ModelConfig : roofline::ModelArch {
  // Throws ridge::Error naming the field: every size > 0 (num_kv_heads >= 0, and num_heads a multiple of
  // kv_heads()), d_model a multiple of num_heads, d_head even
  // (RoPE rotates pairs), rope_theta finite and > 1, rms_norm_eps finite and > 0, and every count below
  // (params, activations of a context) representable in int64.
  void validate() const;
  // Embedding V*D + per layer (2*D*D + 2*D*Dkv attention, Dkv = kv_heads() * d_head() (= D without
  // grouped-query attention), + 3*D*F feed-forward + 2*D norms) + final norm D + lm_head V*D
  // (untied), summed over ridge/roofline/model_buffers.hpp's tensors. Assumes validate() passed.
  int64_t param_count() const;

  // Equal shapes: num_kv_heads compared through kv_heads() (0 and num_heads are the same model), d_expert
  // through expert_width() and moe_layers as the set of layers.
  bool operator==(const ModelConfig& o) const;

 private:
  // The MoE fields: all at their defaults for a dense model (num_experts 0); for an MoE model
  // 1 <= top_k <= num_experts, num_shared_experts and d_expert >= 0, moe_layers ascending in
  // [0, num_layers), aux_loss_coef and bias_update_speed finite and >= 0.
  void validate_moe() const;
};

// --moe-layers: "all" (returned as empty, the field's "every layer"), or a comma list of layer indices
// i, inclusive ranges a-b and open ones a- (a to the last layer), e.g. "1,3,5" or "2-"; returned sorted.
// A list naming every layer is returned empty too. Throws ridge::Error naming `what` and the accepted
// forms for an index past the last layer, a backward range, a layer named twice or a malformed item.
std::vector<int64_t> parse_moe_layers(const std::string& text, int64_t num_layers,
                                      const char* what = "--moe-layers");
// The inverse: "all", or the list with runs written a-b ("0,2-5").
std::string moe_layers_text(const roofline::ModelArch& m);

// The sizes of the CS336 systems assignment (bench/shapes/model-sizes.json; the table is built into the
// library so a binary needs no source tree): tiny, small, medium, large, xl, 2.7B. Throws ridge::Error
// listing them for an unknown name; validates the result.
ModelConfig preset(const std::string& name, int64_t vocab, int64_t context);
std::vector<std::string> preset_names();

// The configuration as a JSON object's text, and back: from_json_text requires every field but
// rope_theta (default 10000), num_kv_heads (default num_heads; written only when it differs) and
// rms_norm_eps (default 1e-5; written only when it differs); throws ridge::Error naming a missing or
// mistyped field, then validates.
// (The nlohmann-json forms are in the private header src/model/json.hpp.)
std::string to_json_text(const ModelConfig& c, int indent = -1);
ModelConfig from_json_text(const std::string& text, const std::string& what = "config");

}  // namespace ridge::model
