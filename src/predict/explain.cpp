// Why a prediction missed: per kind, the efficiency it ran at against the one fitted, and a hint from
// the case's shapes against the shapes the fit timed (fit_shapes.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "predict/fit_shapes.hpp"
#include "ridge/predict.hpp"

namespace ridge::predict {

namespace fsh = fit_shapes;

std::string kind_hint(const std::string& kind, const Case& c, const KindCheck& k) {
  const bool slower = k.ran_eff() < k.fitted_eff();
  const int64_t dh = c.config.d_model / c.config.num_heads;
  if (kind == "attention")
    return fmt::format(
        "{} at head_dim {}, T={} causal; fitted on head_dim {}, T={}{}", c.attention, dh, c.seq,
        fsh::kHeadDim, fsh::kSeq,
        slower ? ": the exp/softmax work per tile weighs more than the roof's FLOPs count" : "");
  if (kind == "gemm") {
    std::string experts;
    if (c.config.is_moe())
      experts = fmt::format(
          "; experts: {} of width {}, ~{} rows each under uniform routing (fitted: {} x {} rows)",
          c.config.num_experts, c.config.expert_width(),
          c.batch * c.seq * c.config.top_k / c.config.num_experts, fsh::kExperts, fsh::kExpertRows);
    return fmt::format("M=batch*context={}, sides {}..{}; fitted on {} tokens x sides {}..{}{}{}",
                       c.batch * c.seq, std::min(c.config.d_model, c.config.d_ff),
                       std::max<int64_t>(c.config.vocab_size, c.config.d_ff), fsh::kTokens, fsh::kDModel,
                       fsh::kVocab, experts,
                       slower ? ": packing and small-k/odd-edge tiles cost more at these shapes" : "");
  }
  if (kind == "elementwise")
    return slower ? "norms, RoPE and casts ran below the stream the fit timed (short rows, reductions)"
                  : "operands stay in cache between the fused passes";
  if (kind == "optimizer")
    return fmt::format("AdamW over the flat fp32 buffers; fitted on {}M parameters",
                       fsh::kParams / 1'000'000);
  return "";
}

std::vector<std::string> explain_misses(const Case& c, const PredictionCheck& p, double limit_pct) {
  std::vector<std::string> out;
  const double step_err = 100.0 * (p.predicted_ms - p.measured_ms) / p.measured_ms;
  // The kind that carries most of the step's error.
  std::string worst;
  double worst_abs = -1;
  for (const auto& [k, v] : p.kinds)
    if (std::abs(v.predicted_ms - v.measured_ms) > worst_abs) {
      worst_abs = std::abs(v.predicted_ms - v.measured_ms);
      worst = k;
    }
  if (std::abs(step_err) > limit_pct && !worst.empty()) {
    const auto& w = p.kinds.at(worst);
    out.push_back(fmt::format(
        "{} (whole): predicted {:.1f} ms, measured {:.1f} ms ({:+.1f}%); {} carries {:+.1f} of the {:+.1f} "
        "ms: it ran "
        "at {:.1f}% of its roof vs fitted {:.1f}% ({})",
        c.label, p.predicted_ms, p.measured_ms, step_err, worst, w.predicted_ms - w.measured_ms,
        p.predicted_ms - p.measured_ms, 100 * w.ran_eff(), 100 * w.fitted_eff(), kind_hint(worst, c, w)));
  }
  for (const auto& [k, v] : p.kinds) {
    if (std::abs(v.error_pct()) <= limit_pct || v.measured_ms <= 0) continue;
    out.push_back(fmt::format(
        "{} {}: predicted {:.1f} ms, measured {:.1f} ms ({:+.1f}%, {:.0f}% of the step): ran "
        "at {:.1f}% of its roof vs fitted {:.1f}% ({})",
        c.label, k, v.predicted_ms, v.measured_ms, v.error_pct(), 100 * v.measured_ms / p.measured_ms,
        100 * v.ran_eff(), 100 * v.fitted_eff(), kind_hint(k, c, v)));
  }
  return out;
}

}  // namespace ridge::predict
