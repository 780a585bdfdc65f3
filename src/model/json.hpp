// Private to ridge (never installed): the model's configuration and step roofline as nlohmann-json
// documents, for the CLI, the checkpoints, the benchmarks, the bindings and the tests.
#pragma once

#include <nlohmann/json.hpp>

#include "ridge/model/config.hpp"
#include "ridge/model/roofline.hpp"
#include "roofline/json.hpp"

namespace ridge::model {

void to_json(nlohmann::json& j, const ModelConfig& c);
// Requires every field but rope_theta (default 10000); throws ridge::Error naming a missing or mistyped
// field, then validates.
void from_json(const nlohmann::json& j, ModelConfig& c);

nlohmann::json to_json(const StepRoofline& r);

}  // namespace ridge::model
