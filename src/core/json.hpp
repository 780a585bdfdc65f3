// Private to ridge (never installed): JSON parsing with messages in the user's words, on top of
// read_input_file (ridge/core/input.hpp). nlohmann-json stays out of the public headers.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "ridge/core/input.hpp"

namespace ridge::input {

// Parses `text` as one JSON document. Errors say where (line, column) and what was wrong, never the
// JSON library's own codes; nesting deeper than kMaxJsonDepth and numbers beyond a double's range
// are refused. `what` names the input ("chip file 'x.json'").
nlohmann::json parse_json(const std::string& text, const std::string& what);

// read_input_file, then parse_json, naming `what` and `path` in errors.
nlohmann::json read_json_file(const std::string& path, const std::string& what,
                              int64_t max_bytes = kMaxInputBytes);

// A JSON library error in plain words, without its "[json.exception.type_error.302]" code.
std::string plain_json_error(const nlohmann::json::exception& e);

// A JSON value as a message shows it: its JSON text when that is at most `max_chars` characters, else
// the first max_chars - 3 and "...". Never a dump() of the whole value: the walk stops once the excerpt
// is full and goes at most a few levels deep, so a value nested 300,000 deep or megabytes long costs
// what the excerpt costs (a recursive dump() of such a value ran out of stack).
std::string excerpt(const nlohmann::json& v, size_t max_chars = 40);

// Typed access that names the field's path ("events[3].bytes") when it is missing or of the wrong
// type. `what` is the input's name as in parse_json.
const nlohmann::json& field(const nlohmann::json& obj, const std::string& key, const std::string& path,
                            const std::string& what);
double number(const nlohmann::json& v, const std::string& path, const std::string& what);
int64_t integer(const nlohmann::json& v, const std::string& path, const std::string& what);
std::string string(const nlohmann::json& v, const std::string& path, const std::string& what);

}  // namespace ridge::input
