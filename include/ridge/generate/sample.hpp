// Sampling the next token from a model's logits as CS336's decoding defines it: temperature (0 = greedy),
// top-k, top-p (nucleus), one draw. The generator is the caller's: generation seeds one per (seed, sequence,
// step) with sampling_rng, so the tokens of a sequence never depend on the thread count, on the order the
// sequences are sampled in, or on which other sequences run beside it.
#pragma once

#include <cstdint>
#include <span>

#include "ridge/text/data.hpp"

namespace ridge::generate {

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy (the argmax; ties to the lowest index)
  double top_p = 1.0;        // in (0, 1]: keep the smallest set of tokens, by descending probability (ties by
                             // index), whose mass >= top_p; 1 keeps every token
  int64_t top_k = 0;         // 0: off; else keep the k most probable (ties by index)
  // ridge::Error naming the field: temperature finite and >= 0, top_p in (0, 1], top_k >= 0.
  void validate() const;
};

// One token id from logits[vocab] (fp32): softmax(logits / temperature), then the top_k most probable, then
// the smallest top_p share of those, renormalised, drawn with exactly one uniform from `rng` (greedy draws
// one too and ignores it, so the generator advances alike whatever the parameters). Deterministic for a given
// rng state. The logits must be finite or -inf (a masked token, never drawn); ridge::Error naming `logits`
// for +inf, NaN, no logits, every logit -inf, or more than 2^31 - 1 of them, and what validate() refuses.
// Orders tokens (partial sorts) only when top-k or top-p is on; one pass of exp otherwise.
int32_t sample_token(std::span<const float> logits, const SamplingParams& p, text::Rng& rng);

// The probabilities sample_token draws from: after temperature, top-k and top-p, renormalised, zero outside
// the kept set (one-hot at the argmax for temperature 0). `probs` holds logits.size() values (ridge::Error
// naming `probs` otherwise).
void sampling_distribution(std::span<const float> logits, const SamplingParams& p, std::span<double> probs);

// The generator of draw `step` of sequence `sequence` under `seed`: a counter-based stream (the three numbers
// mixed by splitmix64 into the seed of a fresh Rng), so any draw can be made alone, on any thread.
text::Rng sampling_rng(uint64_t seed, uint64_t sequence, uint64_t step);

}  // namespace ridge::generate
