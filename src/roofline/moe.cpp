// How many routed experts a batch reads (ridge/roofline/moe.hpp).
#include "ridge/roofline/moe.hpp"

#include <algorithm>
#include <cmath>

#include "ridge/core/error.hpp"
#include "core/check.hpp"

namespace ridge::roofline {
namespace {

void check_routing_sizes(int64_t experts, int64_t top_k, double tokens) {
  check_arg(experts >= 1, "experts", "{} is not accepted (expected 1 or more)", experts);
  check_arg(top_k >= 1 && top_k <= experts, "top_k", "{} is not accepted (expected 1 .. experts = {})", top_k,
            experts);
  check_arg(std::isfinite(tokens) && tokens >= 0, "tokens", "{} is not a token count (finite, >= 0)", tokens);
}

// 1 - (1 - pi)^tokens: the chance that an expert one token picks with probability pi is read at all.
double read_at_all(double pi, double tokens) {
  return pi >= 1 ? (tokens > 0 ? 1.0 : 0.0) : -std::expm1(tokens * std::log1p(-pi));
}

}  // namespace

std::vector<double> routing_shares(const std::vector<double>& values, int64_t experts, int64_t top_k) {
  check_routing_sizes(experts, top_k, 0);
  check_arg(static_cast<int64_t>(values.size()) == experts, "expert_shares",
            "{} values for {} experts (one per expert, in expert order)", values.size(), experts);
  double sum = 0;
  for (size_t e = 0; e < values.size(); ++e) {
    check_arg(std::isfinite(values[e]) && values[e] >= 0, "expert_shares",
              "expert {}'s value {} is not a share or a count (finite, >= 0)", e, values[e]);
    sum += values[e];
  }
  check_arg(sum > 0 && std::isfinite(sum), "expert_shares",
            "the values sum to {}; a histogram needs some tokens (a finite, positive sum)", sum);
  std::vector<double> shares(values.size());
  const double most = 1.0 / static_cast<double>(top_k);
  for (size_t e = 0; e < values.size(); ++e) {
    shares[e] = values[e] / sum;
    // Each token picks top_k distinct experts, so no expert can hold more than 1/top_k of the choices
    // (a rounding's worth of slack for shares written out in decimal).
    check_arg(shares[e] <= most * (1 + 1e-9), "expert_shares",
              "expert {} has {:.6g} of the choices, more than 1/top_k = {:.6g}: each token picks {} distinct "
              "experts, so no expert can take more (a histogram of a top-{} routing)",
              e, shares[e], most, top_k, top_k);
  }
  return shares;
}

double expected_distinct_experts(int64_t experts, int64_t top_k, double tokens) {
  check_routing_sizes(experts, top_k, tokens);
  const double e = static_cast<double>(experts);
  return e * read_at_all(static_cast<double>(top_k) / e, tokens);
}

double expected_distinct_experts(const std::vector<double>& shares, int64_t top_k, double tokens) {
  const auto experts = static_cast<int64_t>(shares.size());
  check_routing_sizes(experts, top_k, tokens);
  double sum = 0, read = 0;
  for (double p : shares) {
    check_arg(std::isfinite(p) && p >= 0 && p * static_cast<double>(top_k) <= 1 + 1e-9, "expert_shares",
              "{} is not a share (0 .. 1/top_k; see routing_shares)", p);
    sum += p;
    read += read_at_all(std::min(1.0, p * static_cast<double>(top_k)), tokens);
  }
  check_arg(std::fabs(sum - 1) <= 1e-9, "expert_shares", "the shares sum to {}, not 1 (see routing_shares)",
            sum);
  return read;
}

}  // namespace ridge::roofline
