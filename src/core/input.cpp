#include "ridge/core/input.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "ridge/core/error.hpp"
#include "ridge/core/units.hpp"
#include "core/check.hpp"
#include "core/json.hpp"

namespace ridge::input {
namespace {

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  return "not a regular file";
}

// Line and column (both from 1) of the byte at `offset` (0-based) in `text`.
std::pair<size_t, size_t> line_column(const std::string& text, size_t offset) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

// The JSON library's message without its "[json.exception.x.y] " code and position prefix.
std::string plain_message(const std::string& what) {
  std::string s = what;
  if (s.rfind("[json.exception.", 0) == 0) {
    const auto close = s.find("] ");
    if (close != std::string::npos) s = s.substr(close + 2);
  }
  if (s.rfind("parse error", 0) == 0) {
    const auto colon = s.find(": ");
    if (colon != std::string::npos) s = s.substr(colon + 2);
  }
  return s;
}

// Refuses nesting deeper than kMaxJsonDepth before the JSON library sees the text: the library and
// every recursive walk over its tree would otherwise exhaust the stack on a hostile file.
void check_depth(const std::string& text, const std::string& what) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        const auto [line, col] = line_column(text, i);
        fail_arg(what, "nested deeper than {} levels at line {}, column {} (not a ridge input)",
                 kMaxJsonDepth, line, col);
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

}  // namespace

std::string read_input_file(const std::string& path, const std::string& what, int64_t max_bytes) {
  check_arg(!path.empty(), what, "empty file name");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    fail_arg(what, "'{}' cannot be read ({})", path, errno == ENOENT ? "no such file" : std::strerror(errno));
  check_arg(S_ISREG(st.st_mode), what, "'{}' is {}; expected a regular file", path, kind_of(st.st_mode));
  // O_NONBLOCK: should the path be swapped for a FIFO after the stat, open must still not block.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail_arg(what, "'{}' cannot be read ({})", path, std::strerror(errno));
  std::string text;
  try {
    check_arg(::fstat(fd, &st) == 0 && S_ISREG(st.st_mode), what, "'{}' is {}; expected a regular file", path,
              kind_of(st.st_mode));
    check_arg(st.st_size <= max_bytes, what, "'{}' is {}, above the {} limit for this input", path,
              units::format_bytes(static_cast<double>(st.st_size)),
              units::format_bytes(static_cast<double>(max_bytes)));
    text.reserve(static_cast<size_t>(st.st_size));
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail_arg(what, "error reading '{}' ({})", path, std::strerror(errno));
      if (n == 0) break;
      text.append(buf, static_cast<size_t>(n));
      check_arg(static_cast<int64_t>(text.size()) <= max_bytes, what,
                "'{}' is above the {} limit for this input", path,
                units::format_bytes(static_cast<double>(max_bytes)));
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return text;
}

nlohmann::json parse_json(const std::string& text, const std::string& what) {
  check_depth(text, what);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    if (text.find_first_not_of(" \t\r\n") == std::string::npos)
      fail_arg(what, "empty, expected a JSON document");
    const auto [line, col] = line_column(text, e.byte > 0 ? e.byte - 1 : 0);
    fail_arg(what, "not valid JSON at line {}, column {}: {}", line, col, plain_message(e.what()));
  } catch (const nlohmann::json::out_of_range& e) {
    // A number beyond a double (1e400): the library names the literal; say where it is.
    std::string msg = plain_message(e.what());
    const auto q1 = msg.find('\''), q2 = msg.rfind('\'');
    if (q1 != std::string::npos && q2 > q1) {
      const std::string lit = msg.substr(q1 + 1, q2 - q1 - 1);
      const auto at = text.find(lit);
      const auto [line, col] = line_column(text, at == std::string::npos ? 0 : at);
      fail_arg(what, "number {} at line {}, column {} is out of range (beyond a double)", lit, line, col);
    }
    fail_arg(what, "{}", msg);
  } catch (const nlohmann::json::exception& e) {
    fail_arg(what, "not valid JSON: {}", plain_message(e.what()));
  }
}

nlohmann::json read_json_file(const std::string& path, const std::string& what, int64_t max_bytes) {
  return parse_json(read_input_file(path, what, max_bytes), fmt::format("{} '{}'", what, path));
}

std::string plain_json_error(const nlohmann::json::exception& e) {
  return plain_message(e.what());
}

namespace {

// The JSON text of the first bytes of `s` (enough for an excerpt of `limit` characters).
std::string string_excerpt(const std::string& s, size_t limit) {
  const nlohmann::json cut = s.size() > limit + 1 ? s.substr(0, limit + 1) : s;
  return cut.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Appends v's JSON text to `out` until `out` holds more than `limit` characters; containers deeper than
// kMaxDepth below the value are shown as "...", so the recursion is bounded whatever the value.
void append_excerpt(const nlohmann::json& v, std::string& out, size_t limit, int depth) {
  constexpr int kMaxDepth = 8;
  if (v.is_object() || v.is_array()) {
    const bool obj = v.is_object();
    out += obj ? '{' : '[';
    bool first = true;
    for (auto it = v.begin(); it != v.end() && out.size() <= limit; ++it) {
      if (!first) out += ',';
      first = false;
      if (obj) out += string_excerpt(it.key(), limit) + ':';
      if (depth >= kMaxDepth && (it->is_object() || it->is_array()))
        out += "...";
      else
        append_excerpt(*it, out, limit, depth + 1);
    }
    out += obj ? '}' : ']';
  } else if (v.is_string()) {
    out += string_excerpt(v.get_ref<const std::string&>(), limit);
  } else {
    out += v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
}

}  // namespace

std::string excerpt(const nlohmann::json& v, size_t max_chars) {
  max_chars = std::max<size_t>(max_chars, 4);
  std::string out;
  append_excerpt(v, out, max_chars, 0);
  if (out.size() > max_chars) out = out.substr(0, max_chars - 3) + "...";
  return out;
}

const nlohmann::json& field(const nlohmann::json& obj, const std::string& key, const std::string& path,
                            const std::string& what) {
  check_arg(obj.is_object(), what, "'{}' must be a JSON object (got {})", path, obj.type_name());
  const auto it = obj.find(key);
  check_arg(it != obj.end(), what, "field '{}{}{}' is missing", path, path.empty() ? "" : ".", key);
  return *it;
}

double number(const nlohmann::json& v, const std::string& path, const std::string& what) {
  check_arg(v.is_number(), what, "field '{}' must be a number (got {})", path, v.type_name());
  const double x = v.get<double>();
  check_arg(std::isfinite(x), what, "field '{}' must be finite", path);
  return x;
}

int64_t integer(const nlohmann::json& v, const std::string& path, const std::string& what) {
  if (v.is_number_unsigned()) {
    check_arg(v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX), what, "field '{}' is {}, above 2^63-1",
              path, v.get<uint64_t>());
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  check_arg(v.is_number_integer(), what, "field '{}' must be an integer (got {})", path,
            v.is_number() ? fmt::format("{}", v.get<double>()) : std::string(v.type_name()));
  return v.get<int64_t>();
}

std::string string(const nlohmann::json& v, const std::string& path, const std::string& what) {
  check_arg(v.is_string(), what, "field '{}' must be a string (got {})", path, v.type_name());
  return v.get<std::string>();
}

}  // namespace ridge::input
