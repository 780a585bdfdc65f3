// Mixture of Experts in the roofline (issue 40): how many of a layer's routed experts a batch of tokens
// reads, under uniform routing or under a measured routing histogram. The decode roofline reads that many
// experts' weights per MoE layer (ridge/roofline/decode.hpp); the training step reads all of them
// (model_step_ops). docs/roofline.md ("Mixture of Experts") derives the formulas.
#pragma once

#include <cstdint>
#include <vector>

namespace ridge::roofline {

// A routing histogram: share[e] is the fraction of all routed choices (tokens x top_k) that went to expert
// e; the shares sum to 1. Each token picks top_k DISTINCT experts, so the chance that one token picks
// expert e is top_k x share[e] (the expected count of e among its k picks, each at most once), which must
// be at most 1: no expert can take more than 1/top_k of the choices.
//
// `values` are the shares, or counts of tokens per expert, in any unit (they are divided by their sum):
// `experts` finite numbers >= 0, not all 0, none above 1/top_k of the sum (ridge::Error naming
// "expert_shares" and what is wrong).
std::vector<double> routing_shares(const std::vector<double>& values, int64_t experts, int64_t top_k);

// The expected number of distinct experts that `tokens` tokens read together, each choosing top_k distinct
// experts independently of the others. Expert e is missed by all of them with probability
// (1 - pi_e)^tokens, pi_e the chance that one token picks it, so the expectation is
//   sum_e 1 - (1 - pi_e)^tokens,
// with pi_e = top_k / experts under uniform routing (E (1 - (1 - k/E)^B), what the MoE issue states) and
// pi_e = top_k x share[e] under a histogram. `tokens` may be fractional (the critical batch solves for a
// real batch); 0 tokens read none. ridge::Error naming the argument for experts < 1, top_k outside
// [1, experts], tokens negative or not finite, or shares not of routing_shares' form.
double expected_distinct_experts(int64_t experts, int64_t top_k, double tokens);
double expected_distinct_experts(const std::vector<double>& shares, int64_t top_k, double tokens);

}  // namespace ridge::roofline
