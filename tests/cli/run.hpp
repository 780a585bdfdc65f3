// Runs the real `ridge` binary for the CLI tests: stdout through a pipe, stderr through a temp file
// made for this one call (mkstemp) and removed afterwards, so that tests ctest runs at the same time,
// even two of one file, never share a file.
#pragma once

#include "ridge/build_paths.h"  // RIDGE_SOURCE_DIR, RIDGE_BINARY (generated)
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef RIDGE_BINARY
#error "RIDGE_BINARY must name the ridge executable (CMakeLists.txt defines it for test_cli)"
#endif

namespace ridge::test {

struct RunResult {
  int code = -1;  // the exit status; -1 when the binary did not exit (a signal)
  std::string out, err;
};

// A shell command line: stdout through the pipe, stderr (the command's and, for mpirun, the ranks')
// through the temp file.
inline RunResult run_shell(const std::string& command) {
  std::string err_path = (std::filesystem::temp_directory_path() / "ridge_cli_err.XXXXXX").string();
  const int fd = ::mkstemp(err_path.data());
  if (fd < 0) throw std::runtime_error("mkstemp failed for " + err_path);
  ::close(fd);
  const std::string cmd = command + " 2>" + err_path;
  RunResult r;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    std::remove(err_path.c_str());
    throw std::runtime_error("popen failed for " + cmd);
  }
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  {
    std::ifstream e(err_path);
    r.err.assign(std::istreambuf_iterator<char>(e), {});
  }
  std::remove(err_path.c_str());
  return r;
}

// `ridge args` through the shell; env, when given, is NAME=value words set for the binary (env(1)).
inline RunResult run(const std::string& args, const std::string& env = "") {
  return run_shell((env.empty() ? std::string() : "env " + env + " ") + RIDGE_BINARY + " " + args);
}

// Bad input's contract (docs/contract.md): `ridge args` exits 2 with nothing on stdout and one line on
// stderr, "ridge: ...", holding `mention` (the flag the user typed, and what was wrong).
inline void expect_refused_in_one_line(const std::string& args, const std::string& mention) {
  const RunResult r = run(args);
  EXPECT_EQ(r.code, 2) << args << "\n" << r.out << r.err;
  EXPECT_TRUE(r.out.empty()) << args << ": " << r.out;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << args << ": one line: " << r.err;
  EXPECT_EQ(r.err.rfind("ridge: ", 0), 0u) << args << ": " << r.err;
  EXPECT_NE(r.err.find(mention), std::string::npos) << args << ": '" << mention << "' in " << r.err;
}

// The lines of stderr that ridge printed ("ridge: ..."), without mpirun's or a shell's own.
inline std::vector<std::string> ridge_lines(const std::string& err) {
  std::vector<std::string> v;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("ridge: ", 0) == 0) v.push_back(line);
  return v;
}

}  // namespace ridge::test
