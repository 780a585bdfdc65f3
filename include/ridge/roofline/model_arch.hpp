// The architecture's numbers of the CS336 Transformer LM (pre-norm blocks, RMSNorm, RoPE, grouped-query
// attention, SwiGLU, untied lm_head, no biases), held in one struct: ridge::model::ModelConfig is this
// struct with its checks and its JSON form, the training step's roofline (ModelShape) adds a batch and
// dtypes to it, and the decode roofline takes it as it is. Every count and byte size of the model is
// derived from it (ridge/roofline/model_buffers.hpp), so a new architectural number (the MoE fields)
// is added here, once, and reaches them all.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ridge::roofline {

// Mixture of Experts (issue 40): the router's gate and the load-balancing rule (ridge/model/moe.hpp
// gives their formulas; model::moe::Gate and Balance are these).
enum class MoeGate { softmax, sigmoid };
enum class MoeBalance { aux, bias };

struct ModelArch {
  // In ModelConfig's order, so a ModelConfig written as {vocab_size, context_length, ...} still is.
  // context_length is the longest sequence (RoPE's tables); the step and decode rooflines take a length
  // of their own.
  int64_t vocab_size = 0, context_length = 0, d_model = 0, num_layers = 0, num_heads = 0, d_ff = 0;
  double rope_theta = 10000;
  // Key/value heads (Llama's n_kv_heads; grouped-query attention when fewer than num_heads, each kv
  // head shared by num_heads / kv_heads() query heads). 0, the default, means num_heads: every
  // checkpoint and state_dict written before this field existed loads unchanged.
  int64_t num_kv_heads = 0;
  // RMSNorm's epsilon: x * rsqrt(mean(x^2) + eps) * w, in training and generation.
  double rms_norm_eps = 1e-5;

  // Mixture of Experts. num_experts 0, the default, is the dense model: the fields below are unused (and
  // must keep their defaults), and a dense model's JSON, checkpoints and counts are what they always were.
  // An MoE layer's feed-forward is a router [E, d_model], E routed SwiGLU experts of width d_expert (each
  // token passes through top_k of them, dropless) and num_shared_experts always-on experts, held as one
  // SwiGLU of width num_shared_experts * d_expert (DeepSeek's shared experts).
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t num_shared_experts = 0;
  int64_t d_expert = 0;  // 0 means d_ff
  // The layers whose feed-forward is MoE, ascending; empty means every layer (the others stay dense).
  std::vector<int64_t> moe_layers = {};
  MoeGate router = MoeGate::softmax;
  MoeBalance balance = MoeBalance::aux;
  // The auxiliary loss's coefficient (balance aux) and the bias's update speed (balance bias, DeepSeek-V3's
  // gamma): training settings, recorded with the shape so a resumed run keeps them.
  double aux_loss_coef = 0.01;
  double bias_update_speed = 0.001;

  bool is_moe() const { return num_experts > 0; }
  // Whether layer l's feed-forward is MoE (false for every layer of a dense model).
  bool moe_layer(int64_t l) const {
    return is_moe() && (moe_layers.empty() || std::binary_search(moe_layers.begin(), moe_layers.end(), l));
  }
  int64_t num_moe_layers() const {
    return !is_moe() ? 0 : moe_layers.empty() ? num_layers : static_cast<int64_t>(moe_layers.size());
  }
  // One expert's hidden width: d_expert, 0 meaning d_ff.
  int64_t expert_width() const { return d_expert > 0 ? d_expert : d_ff; }
  int64_t shared_width() const { return num_shared_experts * expert_width(); }

  // The one reading of num_kv_heads: 0 means num_heads.
  int64_t kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  int64_t d_head() const { return d_model / num_heads; }
};

// The default epsilon: what a configuration that omits it has (ModelConfig's JSON writes rms_norm_eps
// only when it differs). bench/shapes/model-sizes.json states it, and rope_theta's default, for the
// tools; a test holds the two together.
inline constexpr double kDefaultRmsNormEps = ModelArch{}.rms_norm_eps;

}  // namespace ridge::roofline
