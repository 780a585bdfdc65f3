// Private to ridge (never installed): the roofline types as nlohmann-json documents, for the CLI's
// --json output, the probe, the report and the Python bindings. The public header ridge/roofline.hpp
// offers the chip file as text (chip_json_text, parse_chip_text) and needs no JSON library.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "ridge/roofline.hpp"
#include "ridge/roofline/ddp.hpp"

namespace ridge::roofline {

nlohmann::json to_json(const Chip& c);  // the chip-file schema, round-trips through parse_chip
nlohmann::json to_json(const Cost& c);
nlohmann::json to_json(const Bound& b);
nlohmann::json to_json(const CriticalBatch& c);
nlohmann::json to_json(const CriticalSplit& c);
nlohmann::json to_json(const DdpPrediction& p);
nlohmann::json to_json(const DdpMemory& m);

// Validates a parsed document; errors name `origin` and the offending field.
Chip parse_chip(const nlohmann::json& doc, const std::string& origin);

// The JSON document tools/plot_roofline.py draws: roofs (per chip, dtype and memory level),
// predicted points (each op on each chip at min(peak, I * bw)) and measured points.
nlohmann::json plot_spec(const std::vector<Chip>& chips, const std::vector<NamedCost>& ops,
                         const std::vector<MeasuredPoint>& measured, const std::string& title);
// Writes `spec` beside `out` and runs python3 tools/plot_roofline.py on it, producing out.png and
// out.svg (`out` without extension). Returns the paths written; ridge::Error when python3 or
// matplotlib is missing, naming what to install.
// The spec is written (through ridge::files) only once the plot succeeded: a failed plot leaves an
// old out.json as it was.
std::vector<std::string> render_plot(const nlohmann::json& spec, const std::string& out);

}  // namespace ridge::roofline
