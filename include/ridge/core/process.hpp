// Starting helper programs (python3 for plots and peers) without a shell: the program and its
// arguments are passed as an argv vector, so nothing a user typed is ever interpreted by a shell.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ridge::process {

struct Result {
  bool started = false;       // false: the program could not be run (not found, not executable)
  int exit_code = -1;         // the exit status; -1 when it ended by a signal or did not start
  std::string output;         // stdout and stderr together (when captured)
  double seconds = 0;         // wall time from the start to the end of the program
  int64_t max_rss_bytes = 0;  // the program's peak resident set (its rusage, from wait4)
  bool timed_out = false;     // it ran past the timeout and was killed (exit_code is then -1)
};

// Runs argv[0] (searched on PATH when it has no '/') with argv; waits for it to end.
// capture: collect stdout and stderr into Result::output; otherwise they go to ridge's own. Reading
// stops when the program ends, even while a process it left behind still holds the pipe open.
// timeout_s > 0: the program runs in a process group of its own, and the whole group (a compiler
// driver and the cc1plus/as/ld it started) is killed with SIGKILL once it has run that long, so a
// hung helper never hangs ridge. 0: no limit, and the program stays in ridge's group (Ctrl-C reaches it).
Result run(const std::vector<std::string>& argv, bool capture = true, int timeout_s = 0);

// The last non-empty line of a program's output (a Python traceback's final "Error: ..." line).
std::string last_line(const std::string& output);

}  // namespace ridge::process
