// Private to ridge (never installed): the trace and memory-snapshot documents as nlohmann-json, for
// the CLI, the benchmarks, the bindings and the tests. The public headers give them as text.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "ridge/bench/memory.hpp"
#include "ridge/bench/trace.hpp"

namespace ridge::memory {

nlohmann::json snapshot_json(const History& h);
History history_from_json(const nlohmann::json& doc, const std::string& origin);

}  // namespace ridge::memory

namespace ridge::trace {

// The Chrome trace-event document: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}.
nlohmann::json to_json();

}  // namespace ridge::trace
