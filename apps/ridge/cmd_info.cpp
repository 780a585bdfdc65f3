// `ridge info`: what this CPU can do and which kernel path ridge takes on it.
#include <fmt/format.h>

#include "cli.hpp"
#include "ridge/core.hpp"
#include "ridge/jit.hpp"
#include "core/check.hpp"
#include "core/json.hpp"

namespace {

nlohmann::json info_json() {
  using namespace ridge;
  const auto& in = cpu::info();
  const auto& f = in.features;
  nlohmann::json j;
  j["vendor"] = in.vendor;
  j["brand"] = in.brand;
  j["family"] = in.family;
  j["model"] = in.model;
  j["stepping"] = in.stepping;
  j["logical_cpus"] = in.logical_cpus;
  j["threads"] = get_num_threads();
  j["caches"] = {{"l1d_bytes", in.caches.l1d},
                 {"l2_bytes", in.caches.l2},
                 {"l3_bytes", in.caches.l3},
                 {"l3_shared_by", in.caches.l3_sharing},
                 {"line_bytes", in.caches.line}};
  j["features"] = nlohmann::json::object();
  for (const auto& [name, has] : cpu::feature_list(f)) j["features"][name] = has;
  j["os_saves"] = {{"avx", f.os_avx}, {"avx512", f.os_avx512}, {"amx", f.os_amx}};
  nlohmann::json paths = nlohmann::json::array();
  for (auto isa : cpu::supported_isas()) paths.push_back(cpu::isa_name(isa));
  j["isa_paths"] = paths;
  nlohmann::json missing = nlohmann::json::array();
  for (int i = 0; i < cpu::kIsaCount; ++i)
    if (!cpu::supported(static_cast<cpu::Isa>(i))) missing.push_back(cpu::isa_name(static_cast<cpu::Isa>(i)));
  j["isa_paths_missing"] = missing;
  // Why the matrix engine is not used, in words: no AMX in cpuid, or the OS refused it.
  std::string amx = cpu::supported(cpu::Isa::amx)
                        ? "on (bf16 and FP8 GEMM and bf16 attention on the tiles; the instructions matched "
                          "the tile emulator at start)"
                        : "off: " + cpu::amx_off_reason();
  if (env::knobs().amx_emulate) amx += "; RIDGE_AMX_EMULATE=1: the tile kernels run on the emulator";
  j["amx"] = amx;
  j["best_isa"] = cpu::isa_name(cpu::best_isa());
  j["active_isa"] = cpu::isa_name(cpu::active_isa());
  const auto js = jit::settings();
  j["jit"] = {{"enabled", js.enabled}, {"cache_dir", js.cache_dir}, {"compiler", js.compiler}};
  return j;
}

void print_table(const nlohmann::json& j) {
  using ridge::units::format_bytes;
  fmt::print("cpu        {} ({}; family {}, model {}, stepping {})\n", j["brand"].get<std::string>(),
             j["vendor"].get<std::string>(), j["family"].get<int>(), j["model"].get<int>(),
             j["stepping"].get<int>());
  fmt::print("cpus       {} logical CPUs available, ridge uses {} threads\n", j["logical_cpus"].get<int>(),
             j["threads"].get<int>());
  const auto& c = j["caches"];
  fmt::print("caches     L1d {} per core, L2 {} per core, L3 {} shared by {} CPUs, line {} B\n",
             format_bytes(c["l1d_bytes"].get<double>()), format_bytes(c["l2_bytes"].get<double>()),
             format_bytes(c["l3_bytes"].get<double>()), c["l3_shared_by"].get<int>(),
             c["line_bytes"].get<int>());
  std::string yes, no;
  for (const auto& [k, v] : j["features"].items()) (v.get<bool>() ? yes : no) += " " + k;
  fmt::print("has       {}\n", yes);
  fmt::print("lacks     {}\n", no.empty() ? " (nothing ridge looks for)" : no);
  const auto& os = j["os_saves"];
  fmt::print("os saves   avx {}, avx512 {}, amx {} (xgetbv)\n", os["avx"].get<bool>() ? "yes" : "no",
             os["avx512"].get<bool>() ? "yes" : "no", os["amx"].get<bool>() ? "yes" : "no");
  std::string paths;
  for (const auto& p : j["isa_paths"]) paths += " " + p.get<std::string>();
  std::string missing;
  for (const auto& p : j["isa_paths_missing"]) missing += " " + p.get<std::string>();
  fmt::print("isa paths {}{}\n", paths, missing.empty() ? "" : " (not on this machine:" + missing + ")");
  fmt::print("amx        {}\n", j["amx"].get<std::string>());
  std::string names;
  for (int i = 0; i < ridge::cpu::kIsaCount; ++i)
    names += (i ? "|" : "") + std::string(ridge::cpu::isa_name(static_cast<ridge::cpu::Isa>(i)));
  fmt::print("active     {} (best {}; RIDGE_ISA={} takes a path at or below it)\n",
             j["active_isa"].get<std::string>(), j["best_isa"].get<std::string>(), names);
  const auto& jit = j["jit"];
  fmt::print("jit        {} (RIDGE_JIT={}; compiler {}, cache {}; see ridge jit list)\n",
             jit["enabled"].get<bool>() ? "on" : "off", jit["enabled"].get<bool>() ? 1 : 0,
             jit["compiler"].get<std::string>(), jit["cache_dir"].get<std::string>());
}

void setup(CLI::App& root) {
  auto* cmd = root.add_subcommand("info", "CPU features, caches and the kernel path ridge takes here");
  static bool json = false;
  cmd->add_flag("--json", json, "print one JSON document");
  cmd->callback([] {
    const auto j = info_json();
    if (json)
      ridge::cli::print_json(j);
    else
      print_table(j);
  });
}

}  // namespace

RIDGE_COMMAND(info, setup);
