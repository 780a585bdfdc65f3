// The Python interpreter the benchmarks' tools/ peers run under: the one given (--python), else the
// checkout's .venv (where scripts/setup-peers installs PyTorch and llama.cpp), else python3.
#pragma once

#include <unistd.h>

#include <string>

#include "ridge/build_paths.h"  // RIDGE_SOURCE_DIR (generated)

namespace ridge::bench_peers {

inline std::string python(const std::string& given = "") {
  if (!given.empty()) return given;
  const std::string venv = std::string(RIDGE_SOURCE_DIR) + "/.venv/bin/python";
  return ::access(venv.c_str(), X_OK) == 0 ? venv : "python3";
}

}  // namespace ridge::bench_peers
