// The CLI's plumbing. Each subcommand lives in its own file and registers itself with
// RIDGE_COMMAND(name, setup); `setup` adds the subcommand to the root app and sets its callback.
// Callbacks report bad input by throwing ridge::Error; main prints that one line and exits 2.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <fmt/format.h>
#include <iostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include "core/json.hpp"

#include "ridge/core/error.hpp"
#include "ridge/core/numbers.hpp"

namespace ridge::cli {

using Setup = void (*)(CLI::App& root);

struct Registration {
  std::string name;
  Setup setup;
};
std::vector<Registration>& registry();

struct Register {
  Register(const char* name, Setup setup) { registry().push_back({name, setup}); }
};

// Number options: transforms (`option->transform(cli::integer_in(1))`; `check` would not let them rewrite
// the text) over core's one parser (ridge/core/numbers.hpp), which every number a user types goes through.
// Each runs on the text before CLI11 converts it, refuses what the parser refuses (naming the range), and
// rewrites the text to canonical decimal, so that CLI11's own conversion, which reads "010" as octal,
// takes "0x10" and saturates on overflow, sees only the value checked here.

// A decimal integer in [lo, hi] (numbers::IntegerRule; "010" is ten, "+5" is five).
inline CLI::Validator integer_in(int64_t lo, int64_t hi = std::numeric_limits<int64_t>::max()) {
  return CLI::Validator(
      [rule = numbers::IntegerRule{lo, hi}](std::string& s) -> std::string {
        const auto r = numbers::read_integer(s, rule);
        if (r.fault != numbers::Fault::none) return numbers::refusal(s, r.fault, rule);
        s = std::to_string(r.value);
        return {};
      },
      "INT");
}

// A finite decimal number in [lo, hi] (open_low, open_high: without that end; numbers::RealRule): nan,
// inf, hexadecimal floats, values that overflow a double and trailing junk are refused.
inline CLI::Validator number_in(double lo, double hi, bool open_low = false, bool open_high = false) {
  return CLI::Validator(
      [rule = numbers::RealRule{lo, hi, open_low, open_high}](std::string& s) -> std::string {
        const auto r = numbers::read_real(s, rule);
        if (r.fault != numbers::Fault::none) return numbers::refusal(s, r.fault, rule);
        s = fmt::format("{}", r.value);  // the shortest text that reads back as exactly r.value
        return {};
      },
      "FLOAT");
}

// Library errors name the function argument a value was passed as (ridge::Error::argument);
// the user gave it as a flag. Runs `body` and throws such an error again naming the flag instead
// ("inputs: 17 is not an input count" -> "--inputs: 17 is not an input count"). An argument with
// a qualifier after a space keeps it ("grid n: ..." -> "--set n: ..."). Arguments not listed pass
// through as they are.
using FlagNames = std::vector<std::pair<std::string, std::string>>;  // {argument, flag}
template <typename F>
decltype(auto) with_flags(const FlagNames& names, F&& body) {
  try {
    return body();
  } catch (const ridge::Error& e) {
    const std::string& a = e.argument();
    for (const auto& [argument, flag] : names) {
      if (a.empty() || a.compare(0, argument.size(), argument) != 0) continue;
      if (a.size() == argument.size()) throw e.renamed(flag);
      if (a[argument.size()] == ' ') throw e.renamed(flag + a.substr(argument.size()));
    }
    throw;
  }
}

// What every rank of an MPI job must be given alike (distributed::agree_to_start's fingerprint): the command
// being run ("command" -> "'ridge bench allreduce'") and each of its options the user gave, named by its
// first long flag, with the values as typed ("--steps" -> "'3'", a flag -> "given"), except the flags in
// `skip` (per-rank settings such as --threads). Defined in main.cpp, which holds the parsed app.
std::vector<std::pair<std::string, std::string>> command_line_fingerprint(
    const std::vector<std::string>& skip = {});

// The arguments a chip is loaded under (roofline::load_chip and the chip file's parser), as `flag`.
inline FlagNames chip_flags(const std::string& flag) {
  return {{"name_or_path", flag}, {"chip file", flag}};
}

// Prints a JSON document the way every --json output does: indented, newline-terminated.
// Writes `prefix` + `text` + newline to stderr in one write(2). Under mpirun the ranks' stderr and the
// launcher's own banners share one stream; a line written in pieces can be split by them.
inline void say(const std::string& prefix, const std::string& text) {
  const std::string line = prefix + text + "\n";
  std::fflush(stderr);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

// Standard output is an output like any file: every write to it is checked. A short write or a failed
// flush is one line, "stdout: cannot write: REASON" (REASON from the call that failed), exit 2. What
// fmt::print writes is checked by fmt (it throws std::system_error, which main maps to that line), and
// main flushes and checks stdout once more before exit, so that what sat in the buffer is checked too.
inline void write_stdout(std::string_view text) {
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size()) {
    const int e = errno;
    throw Error("stdout", std::string("cannot write: ") + std::strerror(e));
  }
}
inline void flush_stdout() {
  if (std::fflush(stdout) != 0) {
    const int e = errno;
    throw Error("stdout", std::string("cannot write: ") + std::strerror(e));
  }
}

inline void print_json(const nlohmann::json& j) {
  write_stdout(j.dump(2) + "\n");
}

}  // namespace ridge::cli

#define RIDGE_COMMAND(name, setup) \
  static const ::ridge::cli::Register ridge_command_registration_##name(#name, setup)
