// A recorded trace's time by kind of work, each range's kind read from the model's range table.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "core/check.hpp"
#include "core/json.hpp"
#include "ridge/model/ranges.hpp"
#include "ridge/predict.hpp"

namespace ridge::predict {
namespace {

namespace ranges = model::ranges;

// The roofline op kind (roofline::ModelOp::kind) a leaf range's time counts as; nullptr for a range
// that holds no work of its own (a phase, a block, communication).
const char* leaf_kind(const ranges::Name& r) {
  switch (r.kind) {
    case ranges::Kind::gemm:
      return "gemm";
    case ranges::Kind::attention:
      return "attention";
    case ranges::Kind::elementwise:
      return "elementwise";
    // Inside the optimizer phase, whose range counts whole as the optimizer's time.
    case ranges::Kind::optimizer:
    case ranges::Kind::phase:
    case ranges::Kind::block:
    case ranges::Kind::communication:
      return nullptr;
  }
  return nullptr;
}

}  // namespace

TraceTimes trace_times(const std::string& trace_json, const std::string& after_marker) {
  const nlohmann::json doc = input::parse_json(trace_json, "trace_json");
  check_arg(doc.is_object() && doc.contains("traceEvents") && doc["traceEvents"].is_array(), "trace_json",
            "not a trace document (expected an object with a 'traceEvents' array)");
  const auto& events = doc["traceEvents"];
  double since_us = 0;
  for (const auto& e : events)
    if (e.value("name", "") == after_marker) since_us = std::max(since_us, e.value("ts", 0.0));
  TraceTimes t;
  for (const auto& e : events) {
    if (e.value("ph", "") != "X" || e.value("ts", 0.0) < since_us) continue;
    const ranges::Name* r = ranges::find(e.value("name", ""));
    if (!r) continue;  // not one of the model's ranges
    const double d = e.value("dur", 0.0);
    if (r->kind == ranges::Kind::phase) {
      t.total += d;
      if (std::string(r->text) == ranges::optimizer.text) t.by["optimizer"] += d;
    } else if (const char* k = leaf_kind(*r)) {
      t.by[k] += d;
    }
  }
  return t;
}

std::map<std::string, double> trace_summary(const TraceTimes& t) {
  std::map<std::string, double> pct;
  if (t.total <= 0) return pct;
  const std::map<std::string, std::string> label = {{"gemm", "GEMMs"},
                                                    {"attention", "attention"},
                                                    {"elementwise", "elementwise"},
                                                    {"optimizer", "optimizer"}};
  double named = 0;
  for (const auto& [k, v] : t.by) {
    pct[label.at(k)] = 100.0 * v / t.total;
    named += v;
  }
  pct["other (residual adds, casts)"] = 100.0 * std::max(0.0, t.total - named) / t.total;
  return pct;
}

std::map<std::string, double> kind_shares(const TraceTimes& t) {
  std::map<std::string, double> share;
  if (t.total <= 0) return share;
  std::map<std::string, double> by = t.by;
  by["elementwise"] = std::max(0.0, t.total - by["gemm"] - by["attention"] - by["optimizer"]);
  for (const auto& [k, v] : by) share[k] = v / t.total;
  return share;
}

}  // namespace ridge::predict
