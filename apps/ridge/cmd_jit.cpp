// `ridge jit list` and `ridge jit clear`: the cache of kernels compiled at run time (ridge/jit.hpp).
#include <fmt/format.h>

#include "cli.hpp"
#include "ridge/core.hpp"
#include "ridge/jit.hpp"
#include "core/check.hpp"

namespace {

namespace rj = ridge::jit;

// An unusable cache directory is the user's setting (RIDGE_JIT_CACHE_DIR, XDG_CACHE_HOME or HOME), not
// an argument they typed; the library's "s.cache_dir" is named as that setting.
template <typename F>
decltype(auto) in_cache(F&& body) {
  return ridge::cli::with_flags({{"s.cache_dir", "RIDGE_JIT_CACHE_DIR"}}, std::forward<F>(body));
}

void setup(CLI::App& root) {
  auto* jit = root.add_subcommand("jit", "kernels compiled at run time (RIDGE_JIT=1): the on-disk cache");
  jit->require_subcommand(1);

  static bool list_json = false;
  auto* list = jit->add_subcommand("list", "the cache's entries, each checked as a run would check it");
  list->add_flag("--json", list_json, "print one JSON document");
  list->callback([] {
    const auto s = rj::settings();
    const auto entries = in_cache([&] { return rj::list(s); });
    const std::string compiler = rj::compiler_signature(s);
    if (list_json) {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& e : entries)
        j.push_back({{"key", e.key},
                     {"name", e.name},
                     {"path", e.path},
                     {"bytes", e.bytes},
                     {"valid", e.valid},
                     {"why", e.why}});
      ridge::cli::print_json({{"cache_dir", s.cache_dir},
                              {"enabled", s.enabled},
                              {"compiler", compiler},
                              {"cpu", rj::cpu_signature()},
                              {"ridge_version", ridge::version()},
                              {"entries", j}});
      return;
    }
    fmt::print("cache     {} ({} {})\n", s.cache_dir.empty() ? "(none: HOME is unset)" : s.cache_dir,
               entries.size(), entries.size() == 1 ? "entry" : "entries");
    fmt::print("jit       {} (RIDGE_JIT={})\n", s.enabled ? "on" : "off", s.enabled ? 1 : 0);
    fmt::print("compiler  {}\n\n", compiler.empty() ? "none found ('" + s.compiler + "')" : compiler);
    if (entries.empty()) return;
    fmt::print("{:<12}  {:<40} {:>9}  {}\n", "key", "name", "size", "status");
    for (const auto& e : entries)
      fmt::print("{:<12}  {:<40} {:>5.1f} KiB  {}\n", e.key.substr(0, 12),
                 e.name.size() > 40 ? e.name.substr(0, 39) + "~"
                 : e.name.empty()   ? "?"
                                    : e.name,
                 static_cast<double>(e.bytes) / 1024.0, e.valid ? "valid" : "invalid: " + e.why);
  });

  auto* clear = jit->add_subcommand("clear", "remove every cached kernel (and temporaries of dead builds)");
  clear->callback([] {
    const auto s = rj::settings();
    const int64_t n = in_cache([&] { return rj::clear(s); });
    fmt::print("removed {} from {}\n", n == 1 ? "1 entry" : fmt::format("{} entries", n),
               s.cache_dir.empty() ? "(no cache: HOME is unset)" : s.cache_dir);
  });
}

}  // namespace

RIDGE_COMMAND(jit, setup);
