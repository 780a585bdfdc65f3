// Private to ridge (never installed): the roofline types as nlohmann-json documents, for the CLI's
// --json output, the probe, the report and the Python bindings. The public header ridge/roofline.hpp
// offers the chip file as text (chip_json_text, parse_chip_text) and needs no JSON library.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "ridge/roofline.hpp"
#include "ridge/roofline/ddp.hpp"
#include "ridge/roofline/decode.hpp"

namespace ridge::roofline {

nlohmann::json to_json(const Chip& c);  // the chip-file schema, round-trips through parse_chip
nlohmann::json to_json(const Cost& c);
nlohmann::json to_json(const Bound& b);
nlohmann::json to_json(const CriticalBatch& c);
nlohmann::json to_json(const CriticalSplit& c);
nlohmann::json to_json(const DdpPrediction& p);
nlohmann::json to_json(const DdpMemory& m);
nlohmann::json to_json(const DecodeReport& r);  // decode_report_json's document

// Validates a parsed document; errors name `origin` and the offending field.
Chip parse_chip(const nlohmann::json& doc, const std::string& origin);

// The plot (plot_spec, render_plot) is the report layer's: src/report/report.hpp.

}  // namespace ridge::roofline
