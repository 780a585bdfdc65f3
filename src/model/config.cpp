#include "ridge/model/config.hpp"

#include <limits>

#include "ridge/core/error.hpp"

namespace ridge::model {

void ModelConfig::validate() const {
  auto positive = [](int64_t v, const char* name) { check(v > 0, "{}: must be > 0, got {}", name, v); };
  positive(vocab_size, "vocab_size");
  positive(context_length, "context_length");
  positive(d_model, "d_model");
  check(num_layers >= 0, "num_layers: must be >= 0, got {}", num_layers);
  positive(num_heads, "num_heads");
  positive(d_ff, "d_ff");
  check(d_model % num_heads == 0, "num_heads: d_model {} is not a multiple of num_heads {}", d_model, num_heads);
  check(d_head() % 2 == 0, "num_heads: RoPE rotates pairs, so d_model / num_heads must be even, got {}", d_head());
  check(rope_theta > 1 && rope_theta < 1e12, "rope_theta: must be in (1, 1e12), got {}", rope_theta);
  constexpr int64_t kMax = int64_t{1} << 40;  // elements in any one derived buffer
  check(vocab_size <= kMax / d_model && d_ff <= kMax / d_model && context_length <= (int64_t{1} << 24),
        "config: d_model {} with vocab_size {}, d_ff {} or context_length {} is beyond what ridge can address",
        d_model, vocab_size, d_ff, context_length);
  check(num_layers <= (int64_t{1} << 16), "num_layers: must be <= 65536, got {}", num_layers);
}

int64_t ModelConfig::param_count() const {
  const int64_t per_layer = 4 * d_model * d_model + 3 * d_model * d_ff + 2 * d_model;
  return 2 * vocab_size * d_model + num_layers * per_layer + d_model;
}

ModelConfig preset(const std::string& name, int64_t vocab_size, int64_t context_length) {
  struct Size {
    const char* name;
    int64_t d_model, d_ff, layers, heads;
  };
  // CS336 assignment 2's sizes (shared/benchmarks/model-sizes.json).
  static constexpr Size sizes[] = {{"tiny", 512, 1344, 4, 16},     {"small", 768, 3072, 12, 12},
                                   {"medium", 1024, 4096, 24, 16}, {"large", 1280, 5120, 36, 20},
                                   {"xl", 1600, 6400, 48, 25},     {"2.7B", 2560, 10240, 32, 32}};
  for (const Size& s : sizes)
    if (name == s.name) {
      ModelConfig c;
      c.vocab_size = vocab_size;
      c.context_length = context_length;
      c.d_model = s.d_model;
      c.d_ff = s.d_ff;
      c.num_layers = s.layers;
      c.num_heads = s.heads;
      c.validate();
      return c;
    }
  fail("size: '{}' is not one of tiny, small, medium, large, xl, 2.7B", name);
}

}  // namespace ridge::model
