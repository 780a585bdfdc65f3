// The Python interpreter the benchmarks' tools/ peers run under: the one given (--python), else the
// checkout's .venv (where scripts/setup-peers installs PyTorch and llama.cpp), else python3; and how a
// peer's answer is read.
#pragma once

#include <unistd.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "ridge/build_paths.h"  // RIDGE_SOURCE_DIR (generated)
#include "ridge/core/process.hpp"

namespace ridge::bench_peers {

inline std::string python(const std::string& given = "") {
  if (!given.empty()) return given;
  const std::string venv = std::string(RIDGE_SOURCE_DIR) + "/.venv/bin/python";
  return ::access(venv.c_str(), X_OK) == 0 ? venv : "python3";
}

// Runs a tools/ peer (argv[0] the interpreter) and reads its answer, the JSON object on its last line.
// True with `out` set, or false with `why`: it could not start, its output held no JSON (its exit code
// and the start of its output), or the object is {"error": "..."} (that text).
inline bool run_json(const std::vector<std::string>& argv, nlohmann::json& out, std::string& why) {
  const auto run = process::run(argv);
  if (!run.started) {
    why = fmt::format("cannot run '{}'", argv.front());
    return false;
  }
  const auto brace = run.output.rfind("\n{");
  try {
    out = input::parse_json(run.output.substr(brace == std::string::npos ? 0 : brace + 1), "peer output");
  } catch (const std::exception&) {
    why = fmt::format("failed (exit {}): {}", run.exit_code, run.output.substr(0, 160));
    return false;
  }
  if (out.contains("error")) {
    why = out["error"].get<std::string>();
    return false;
  }
  return true;
}

}  // namespace ridge::bench_peers
