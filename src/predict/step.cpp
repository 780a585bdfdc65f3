// A step predicted from its roofline and the efficiencies, and held against the measured step.
#include <algorithm>

#include "ridge/predict.hpp"

namespace ridge::predict {

StepPrediction predict_step(const model::StepRoofline& step, const std::vector<std::string>& passes,
                            model::Precision precision, const Efficiencies* eff) {
  StepPrediction p;
  for (const auto& e : step.ops) {
    if (std::find(passes.begin(), passes.end(), e.op.pass) == passes.end()) continue;
    p.bound_s += e.t_lower;
    p.bytes += e.bound.memory_bytes * static_cast<double>(e.op.count);
    const double ef = eff ? eff->of(e.op, precision) : 1.0;
    p.predicted_s += e.t_lower / ef;
    KindCheck& k = p.kinds[e.op.kind];
    k.bound_ms += e.t_lower * 1e3;
    k.predicted_ms += e.t_lower / ef * 1e3;
  }
  return p;
}

PredictionCheck check_prediction(const StepPrediction& prediction, double measured_s,
                                 const std::map<std::string, double>& shares) {
  PredictionCheck c;
  c.predicted_ms = prediction.predicted_s * 1e3;
  c.measured_ms = measured_s * 1e3;
  c.kinds = prediction.kinds;
  for (auto& [kind, k] : c.kinds) {
    const auto it = shares.find(kind);
    k.measured_ms = it != shares.end() ? it->second * c.measured_ms : 0;
  }
  return c;
}

}  // namespace ridge::predict
