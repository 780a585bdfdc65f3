// Reading a user's input files safely, and parsing JSON with messages in the user's words.
// Every file a user names (a chip file, a snapshot, benchmark rows, a shapes or grid file, the probe
// cache) goes through read_input_file: a FIFO, device, socket or directory is refused before it is
// opened (so nothing blocks), and the size is capped (so /dev/zero or a huge file cannot eat memory).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace ridge::input {

inline constexpr int64_t kMaxInputBytes = int64_t{256} << 20;  // 256 MiB
inline constexpr int kMaxJsonDepth = 256;

// The whole content of the regular file `path`. `what` names the argument in errors
// ("--hw", "chip file", "memory show"). Throws ridge::Error for a missing, unreadable or
// non-regular file, or one above max_bytes.
std::string read_input_file(const std::string& path, const std::string& what,
                            int64_t max_bytes = kMaxInputBytes);

// Parses `text` as one JSON document. Errors say where (line, column) and what was wrong, never the
// JSON library's own codes; nesting deeper than kMaxJsonDepth and numbers beyond a double's range
// are refused. `what` names the input ("chip file 'x.json'").
nlohmann::json parse_json(const std::string& text, const std::string& what);

// read_input_file, then parse_json, naming `what` and `path` in errors.
nlohmann::json read_json_file(const std::string& path, const std::string& what,
                              int64_t max_bytes = kMaxInputBytes);

// A JSON library error in plain words, without its "[json.exception.type_error.302]" code.
std::string plain_json_error(const nlohmann::json::exception& e);

// Typed access that names the field's path ("events[3].bytes") when it is missing or of the wrong
// type. `what` is the input's name as in parse_json.
const nlohmann::json& field(const nlohmann::json& obj, const std::string& key, const std::string& path,
                            const std::string& what);
double number(const nlohmann::json& v, const std::string& path, const std::string& what);
int64_t integer(const nlohmann::json& v, const std::string& path, const std::string& what);
std::string string(const nlohmann::json& v, const std::string& path, const std::string& what);

}  // namespace ridge::input
