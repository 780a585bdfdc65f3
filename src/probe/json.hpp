// Private to ridge (never installed): the probe's result as an nlohmann-json chip document, for the
// CLI (`ridge probe`, `ridge report`) and the tests.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "ridge/probe.hpp"

namespace ridge::probe {

// The chip file: kind "cpu", id "this", peak_flops per dtype (all threads), memory levels
// dram, l3, l2, l1 (read bandwidth, all threads), and the details under "measured".
nlohmann::json to_chip_json(const ProbeResult& r);

// Writes `chip` to `path`, creating parent folders; ridge::Error about the argument `path` on failure.
void write_chip_file(const nlohmann::json& chip, const std::string& path);

}  // namespace ridge::probe
