// The Transformer LM's shape: CS336's "basics" model (pre-norm blocks, RMSNorm, RoPE, SwiGLU, untied
// embeddings, no biases).
#pragma once

#include <cstdint>
#include <string>

namespace ridge::model {

struct ModelConfig {
  int64_t vocab_size = 10000;
  int64_t context_length = 256;
  int64_t d_model = 512;
  int64_t num_layers = 4;
  int64_t num_heads = 16;
  int64_t d_ff = 1344;
  double rope_theta = 10000.0;

  int64_t d_head() const { return d_model / num_heads; }
  // Throws ridge::Error naming the first field that is out of range (every field > 0, d_model a
  // multiple of num_heads, an even d_head, and every buffer size the model derives fits in int64).
  void validate() const;
  int64_t param_count() const;
};

// The CS336 sizes (tiny, small, medium, large, xl, 2.7B) with the given vocabulary and context.
ModelConfig preset(const std::string& name, int64_t vocab_size = 10000, int64_t context_length = 256);

}  // namespace ridge::model
