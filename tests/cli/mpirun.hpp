// The CLI tests' MPI runs (test_cli_dist*.cpp): mpirun with what OpenMPI needs on this machine, and the
// losses a `ridge train --json` run logged.
#pragma once

#include <nlohmann/json.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "run.hpp"

#ifdef RIDGE_MPIEXEC

namespace ridge::test {

// OpenMPI refuses root without the first two variables, and this machine has fewer cores than some runs
// want ranks (--oversubscribe, one OpenMP thread per rank). OpenMPI's plugins leak at exit (from dlopen'ed
// modules LeakSanitizer cannot name, so no suppression file can match them): under the sanitizer build,
// leak checking is off for MPI runs only. `timeout` (its arguments, e.g. "120" or "-k 5 60") ends a hang.
inline std::string mpirun(const std::string& timeout) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 "
         "ASAN_OPTIONS=detect_leaks=0 "
         "timeout " +
         timeout + " " + RIDGE_MPIEXEC + " --oversubscribe --bind-to none";
}

// The "loss" of each JSON line (rank 0's log of a --json run), in order.
inline std::vector<double> json_losses(const std::string& out) {
  std::vector<double> l;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') l.push_back(nlohmann::json::parse(line).at("loss").get<double>());
  return l;
}

}  // namespace ridge::test

#endif
