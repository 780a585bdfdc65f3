// The architecture's numbers of the CS336 Transformer LM (pre-norm blocks, RMSNorm, RoPE, grouped-query
// attention, SwiGLU, untied lm_head, no biases), held in one struct: ridge::model::ModelConfig is this
// struct with its checks and its JSON form, the training step's roofline (ModelShape) adds a batch and
// dtypes to it, and the decode roofline takes it as it is. Every count and byte size of the model is
// derived from it (ridge/roofline/model_buffers.hpp), so a new architectural number (the MoE fields)
// is added here, once, and reaches them all.
#pragma once

#include <cstdint>

namespace ridge::roofline {

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

  // The one reading of num_kv_heads: 0 means num_heads.
  int64_t kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  int64_t d_head() const { return d_model / num_heads; }
};

// The default epsilon: what a configuration that omits it has (ModelConfig's JSON writes rms_norm_eps
// only when it differs). bench/shapes/model-sizes.json states it, and rope_theta's default, for the
// tools; a test holds the two together.
inline constexpr double kDefaultRmsNormEps = ModelArch{}.rms_norm_eps;

}  // namespace ridge::roofline
