// ridge: the command-line program. Parsing and printing only; the work is in the libraries.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <new>

#include "cli.hpp"
#include "ridge/core.hpp"

namespace ridge::cli {
std::vector<Registration>& registry() {
  static std::vector<Registration> r;
  return r;
}
}  // namespace ridge::cli

namespace {

// CLI11 messages can span lines; ridge promises one line per error.
std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ridge: roofline-guided LLM performance engineering (analyzer, probe, benchmarks, kernels)",
               "ridge"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ridge 0.1.0");
  auto& reg = ridge::cli::registry();
  std::sort(reg.begin(), reg.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (const auto& r : reg) r.setup(app);

  try {
    // A bad RIDGE_* knob or OMP_NUM_THREADS is a user error: report it before any work.
    ridge::env::knobs();
    // CLI11 answers an unknown subcommand with "A subcommand is required"; name it and the choices,
    // at the top level and one level down (`ridge bench bogus`, `ridge roofline bogus`).
    const CLI::App* parent = &app;
    std::string path = "ridge";
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
        throw ridge::Error("'" + word + "' is not a " + path + " subcommand (accepted: " + names + ")");
      parent = found;
      path += " " + word;
    }
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    std::cout << e.what() << "\n";
    return 0;
  } catch (const CLI::Success&) {
    return 0;
  } catch (const CLI::ParseError& e) {
    // Help requested on a subcommand surfaces as CallForHelp above; everything else is bad input.
    ridge::cli::say("ridge: ", one_line(e.what()) + " (see 'ridge --help')");
    return 2;
  } catch (const ridge::Error& e) {
    ridge::cli::say("ridge: ", one_line(e.what()));
    return 2;
  } catch (const std::bad_alloc&) {
    ridge::cli::say("ridge: ", "out of memory");
    return 1;
  } catch (const std::exception& e) {
    ridge::cli::say("ridge: internal error: ", one_line(e.what()));
    return 1;
  }
  return 0;
}
