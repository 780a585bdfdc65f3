// ridge: the command-line program. Parsing and printing only; the work is in the libraries.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>
#include <system_error>

#include "cli.hpp"
#include "ridge/core.hpp"
#ifdef RIDGE_HAVE_DISTRIBUTED
#include "ridge/distributed.hpp"
#endif

namespace ridge::cli {
std::vector<Registration>& registry() {
  static std::vector<Registration> r;
  return r;
}
}  // namespace ridge::cli

namespace {

// Before every shared library's constructor (the loader runs an executable's .preinit_array first),
// libgomp's among them, which reads OMP_NUM_THREADS and warns on stderr about a value it cannot read:
// a value ridge refuses is taken out of the environment and kept for ridge's own one-line error
// (env::before_openmp, ridge/core/env.hpp). The only code ridge runs before main.
[[gnu::used, gnu::section(".preinit_array")]] void (*before_openmp)(int, char**,
                                                                    char**) = &ridge::env::before_openmp;

// CLI11 messages can span lines; ridge promises one line per error.
std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

const CLI::App* g_app = nullptr;  // the root, for command_line_fingerprint()

// "ridge bench allreduce": "ridge" and the words of argv that name its subcommands, one level after the
// other, up to the first that does not (an option, a typo).
std::string command_path(const CLI::App& app, int argc, char** argv) {
  std::string path = "ridge";
  const CLI::App* parent = &app;
  for (int i = 1; i < argc && argv[i][0] != '-'; ++i) {
    const CLI::App* found = nullptr;
    for (const auto* s : parent->get_subcommands([](const CLI::App*) { return true; }))
      if (s->get_name() == argv[i]) found = s;
    if (!found) break;
    parent = found;
    path += " " + found->get_name();
  }
  return path;
}

// What this process ends with: the exit status, the error line (without "ridge: "), and help or
// version text, which under mpirun waits for the ranks to agree.
struct Outcome {
  int code = 0;
  std::string error, text, asked;  // asked: the flag that asked for text ("--help", "--version")
};

// Under mpirun with several ranks (the launcher says so; a launcher variable that is not a number is
// the command's to report, alone), every process takes part in one agreement before it ends: the MPI
// commands at their start (distributed::agree_to_start), everything else here. An error found before it is
// then one line for the job, printed by rank 0 (prefixed with the rank that found it), and a rank
// whose command differs, or that asked for help while another did not, stops every rank instead of
// leaving it waiting in MPI forever.
int finish(Outcome o, const std::string& path) {
#ifdef RIDGE_HAVE_DISTRIBUTED
  bool several = false;
  try {
    several = ridge::env::launcher().several_ranks();
  } catch (const ridge::Error&) {
  }
  if (several) {
    // Help is printed by rank 0 alone when every rank asked for it alike (the options parsed so far,
    // --help among them, are compared); a command that ran (not an MPI one) is held to its name only.
    ridge::distributed::Fingerprint fp{{"command", "'" + path + "'"}};
    if (!o.asked.empty()) {
      fp = ridge::cli::command_line_fingerprint({"--threads"});
      fp.emplace_back(o.asked, "given");
    }
    const auto j = ridge::distributed::join_to_finish(o.code != 0 ? o.error : std::string(), fp);
    if (j.joined && !j.agreed) return o.code != 0 ? o.code : 2;  // the job's one line is printed
    if (j.joined && j.rank != 0) o.text.clear();                 // help once per job, by rank 0
  }
#else
  (void)path;
#endif
  if (!o.text.empty()) std::fwrite(o.text.data(), 1, o.text.size(), stdout);  // checked by stdout_error()
  if (o.code != 0) ridge::cli::say("ridge: ", o.error);
  return o.code;
}

// Why what went to standard output did not all arrive ("" when it did): the buffer flushed, every
// earlier write's error flag checked, and a close of a duplicate of the descriptor (where a file system
// such as NFS reports a write it could not make). The reason is the failing call's own errno; a write
// that failed earlier without being checked (its errno gone by now) is reported as such.
std::string stdout_error() {
  if (std::fflush(stdout) != 0) {
    const int e = errno;
    return std::strerror(e);
  }
  if (std::ferror(stdout) || std::cout.fail()) return "an earlier write to it failed";
  const int fd = ::dup(STDOUT_FILENO);
  if (fd >= 0 && ::close(fd) != 0) {
    const int e = errno;
    return std::strerror(e);
  }
  return "";
}

// A write that fmt::print could not make (it throws std::system_error): standard output's, when its
// error flag is set.
bool stdout_failed(const std::system_error& e, std::string& why) {
  if (!std::ferror(stdout)) return false;
  why = "stdout: cannot write: " + e.code().message();
  return true;
}

}  // namespace

namespace ridge::cli {
std::vector<std::pair<std::string, std::string>> command_line_fingerprint(
    const std::vector<std::string>& skip) {
  std::vector<std::pair<std::string, std::string>> out;
  const CLI::App* cmd = g_app;
  std::string path = "ridge";
  while (cmd) {
    const auto subs = cmd->get_subcommands();
    if (subs.empty()) break;
    cmd = subs.front();
    path += " " + cmd->get_name();
  }
  out.emplace_back("command", "'" + path + "'");
  if (!cmd) return out;
  for (const CLI::Option* opt : cmd->get_options()) {
    if (opt->count() == 0) continue;
    std::string name = opt->get_name();
    if (name.empty()) name = opt->get_name(true, true);
    if (std::find(skip.begin(), skip.end(), name) != skip.end()) continue;
    if (opt->get_expected_max() == 0) {  // a flag
      out.emplace_back(name, "given");
      continue;
    }
    std::string v;
    for (const auto& r : opt->results()) v += (v.empty() ? "" : " ") + r;
    out.emplace_back(name, "'" + v + "'");
  }
  return out;
}
}  // namespace ridge::cli

int main(int argc, char** argv) {
  CLI::App app{"ridge: roofline-guided LLM performance engineering (analyzer, probe, benchmarks, kernels)",
               "ridge"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("ridge ") + ridge::version());
  auto& reg = ridge::cli::registry();
  std::sort(reg.begin(), reg.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (const auto& r : reg) r.setup(app);

  g_app = &app;
  const std::string path = command_path(app, argc, argv);
  Outcome o;
  try {
    // A bad RIDGE_* knob or OMP_NUM_THREADS is a user error: report it before any work.
    ridge::env::knobs();
    // CLI11 answers an unknown subcommand with "A subcommand is required"; name it and the choices,
    // at the top level and one level down (`ridge bench bogus`, `ridge roofline bogus`).
    const CLI::App* parent = &app;
    std::string words = "ridge";
    for (int i = 1; i < argc && i <= 2 && argv[i][0] != '-'; ++i) {
      const auto subs = parent->get_subcommands([](const CLI::App*) { return true; });
      if (subs.empty()) break;
      const std::string word = argv[i];
      const CLI::App* found = nullptr;
      std::string names;
      for (const auto* s : subs) {
        if (s->get_name() == word) found = s;
        names += (names.empty() ? "" : ", ") + s->get_name();
      }
      if (!found)
        throw ridge::Error("'" + word + "' is not a " + words + " subcommand (accepted: " + names + ")");
      parent = found;
      words += " " + word;
    }
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    o.text = app.help();
    o.asked = "--help";
  } catch (const CLI::CallForAllHelp&) {
    o.text = app.help("", CLI::AppFormatMode::All);
    o.asked = "--help-all";
  } catch (const CLI::CallForVersion& e) {
    o.text = std::string(e.what()) + "\n";
    o.asked = "--version";
  } catch (const CLI::Success&) {
  } catch (const CLI::ParseError& e) {
    // Help requested on a subcommand surfaces as CallForHelp above; everything else is bad input.
    o = {2, one_line(e.what()) + " (see 'ridge --help')", "", ""};
#ifdef RIDGE_HAVE_DISTRIBUTED
  } catch (const ridge::distributed::PeerFailed&) {
    return 2;  // the ranks' agreement printed the job's line
#endif
  } catch (const ridge::Error& e) {
    o = {2, one_line(e.what()), "", ""};
  } catch (const std::bad_alloc&) {
    o = {1, "out of memory", "", ""};
  } catch (const std::system_error& e) {
    std::string why;
    o = stdout_failed(e, why) ? Outcome{2, why, "", ""}
                              : Outcome{1, "internal error: " + one_line(e.what()), "", ""};
  } catch (const std::exception& e) {
    o = {1, "internal error: " + one_line(e.what()), "", ""};
  }
  const int code = finish(std::move(o), path);
  // Standard output is an output like any file: what did not arrive is the run's error (one line, exit 2),
  // unless the run failed already and said so.
  if (const std::string why = stdout_error(); !why.empty() && code == 0) {
    ridge::cli::say("ridge: ", "stdout: cannot write: " + why);
    return 2;
  }
  return code;
}
