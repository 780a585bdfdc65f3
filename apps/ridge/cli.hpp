// The CLI's plumbing. Each subcommand lives in its own file and registers itself with
// RIDGE_COMMAND(name, setup); `setup` adds the subcommand to the root app and sets its callback.
// Callbacks report bad input by throwing ridge::Error; main prints that one line and exits 2.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <string>
#include <utility>
#include <vector>
#include "core/json.hpp"

#include "ridge/core/error.hpp"

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

// Accepts only a plain decimal integer ("16", "-1"); CLI11 alone would also take "0x10" or "0b1".
inline CLI::Validator decimal_integer() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        size_t i = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
        if (i == s.size()) return "'" + s + "' is not a decimal integer";
        for (; i < s.size(); ++i)
          if (s[i] < '0' || s[i] > '9') return "'" + s + "' is not a decimal integer";
        return {};
      },
      "");
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

// What every rank of an MPI job must be given alike (dist::agree_to_start's fingerprint): the command
// being run ("command" -> "'ridge bench allreduce'") and each of its options the user gave, named by its
// first long flag, with the values as typed ("--steps" -> "'3'", a flag -> "given"), except the flags in
// `skip` (per-rank settings such as --threads). Defined in main.cpp, which holds the parsed app.
std::vector<std::pair<std::string, std::string>> command_line_fingerprint(
    const std::vector<std::string>& skip = {});

// Prints a JSON document the way every --json output does: indented, newline-terminated.
// Writes `prefix` + `text` + newline to stderr in one write(2). Under mpirun the ranks' stderr and the
// launcher's own banners share one stream; a line written in pieces can be split by them.
inline void say(const std::string& prefix, const std::string& text) {
  const std::string line = prefix + text + "\n";
  std::fflush(stderr);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

inline void print_json(const nlohmann::json& j) { std::cout << j.dump(2) << "\n"; }

}  // namespace ridge::cli

#define RIDGE_COMMAND(name, setup) \
  static const ::ridge::cli::Register ridge_command_registration_##name(#name, setup)
