// Text for the CLI, the standard benchmark shapes, measured points and the plot's input.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ridge/build_paths.h"  // RIDGE_SOURCE_DIR, RIDGE_BINARY (generated)
#include "ridge/core/env.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/input.hpp"
#include "ridge/core/process.hpp"
#include "ridge/core/files.hpp"
#include "ridge/core/units.hpp"
#include "ridge/roofline.hpp"
#include "roofline/json.hpp"
#include "core/json.hpp"
#include "core/check.hpp"

namespace ridge::roofline {
namespace fs = std::filesystem;
namespace {

std::string flop_count(double x) {
  std::string s = units::format_flops(x);
  return s.substr(0, s.size() - 2);  // "550 GFLOP/s" -> "550 GFLOP"
}

std::string intensity_text(double i) { return std::isfinite(i) ? fmt::format("{:.4g} FLOP/B", i) : "-"; }

std::string env_or_empty(const char* name) { return env::text(name); }

nlohmann::json read_json_file(const fs::path& p) { return input::read_json_file(p.string(), "shapes"); }

int64_t get_int(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j.at(key).is_number_integer()) fail("shapes: {} lacks integer '{}'", where, key);
  return j.at(key).get<int64_t>();
}

}  // namespace

std::string describe(const Cost& cost, const Bound& b, const Chip& chip) {
  std::string s;
  s += fmt::format("{} {} on {} ({})\n", cost.op, cost.shape, chip.id, chip.name);
  s += fmt::format("  FLOPs            {} at {} ({})\n", flop_count(b.flops), cost.compute, units::format_flops(b.peak));
  auto traffic = [&](const char* title, const std::vector<Traffic>& v, double total, bool link) {
    if (v.empty()) return;
    s += fmt::format("  {:<16} {}\n", title, units::format_bytes(total));
    for (const auto& t : v)
      s += fmt::format("    {:<28} {:<9} {:>10} elements {:>10}  {}\n", t.name, t.dtype,
                       units::format_count(static_cast<double>(t.elements)),
                       units::format_bytes(static_cast<double>(t.bytes)), link ? "sent" : t.write ? "write" : "read");
  };
  traffic(fmt::format("bytes ({})", b.level).c_str(), cost.memory, b.memory_bytes, false);
  traffic(fmt::format("bytes ({})", b.link).c_str(), cost.link, b.link_bytes, true);
  s += fmt::format("  intensity        {}   (ridge point of {} at {}: {:.4g} FLOP/B)\n", intensity_text(b.intensity),
                   chip.id, b.level, b.ridge_intensity);
  s += fmt::format("  T_math           {}   (FLOPs / {})\n", units::format_seconds(b.t_math),
                   units::format_flops(b.peak));
  if (!cost.memory.empty())
    s += fmt::format("  T_memory         {}   (bytes / {} {})\n", units::format_seconds(b.t_memory),
                     units::format_rate(b.bandwidth), b.level);
  if (!cost.link.empty())
    s += fmt::format("  T_link           {}   (bytes / {} {} per direction)\n", units::format_seconds(b.t_link),
                     units::format_rate(b.link_bandwidth), b.link);
  s += fmt::format("  T_comm           {}\n", units::format_seconds(b.t_comm));
  s += fmt::format("  T_lower = max    {}\n", units::format_seconds(b.t_lower));
  s += fmt::format("  T_upper = sum    {}\n", units::format_seconds(b.t_upper));
  s += fmt::format("  bound by         {}\n", b.binding == "memory" ? "memory (" + b.level + ")"
                                              : b.binding == "link" ? "link (" + b.link + ")"
                                                                    : std::string("compute"));
  s += fmt::format("  attainable       {} = {:.1f}% of peak {}\n", units::format_flops(b.attainable_flops),
                   100 * b.fraction_of_peak, cost.compute);
  return s;
}

std::string describe(const Chip& c) {
  std::string s;
  s += fmt::format("{} — {} ({})\n", c.id, c.name, c.kind);
  s += "peak FLOP/s (dense)\n";
  for (const auto& [k, v] : c.peak_flops)
    s += fmt::format("  {:<6} {:>14}   {}\n", k, units::format_flops(v.value), v.source);
  s += "memory (outermost first)\n";
  for (const auto& m : c.memory) {
    s += fmt::format("  {:<6} {:<8} {:>12}   {}\n", m.level, m.name, units::format_rate(m.bandwidth.value),
                     m.bandwidth.source);
    if (m.capacity)
      s += fmt::format("  {:<6} {:<8} {:>12}   {}\n", "", "capacity", units::format_bytes(m.capacity->value),
                       m.capacity->source);
  }
  if (c.intra_node || c.inter_node) {
    s += "links (per direction)\n";
    for (const auto& [nm, l] : {std::pair{"intra", &c.intra_node}, std::pair{"inter", &c.inter_node}})
      if (*l)
        s += fmt::format("  {:<6} {:<8} {:>12}   {} — {}\n", nm, "", units::format_rate((*l)->bandwidth_per_direction.value),
                         (*l)->name, (*l)->bandwidth_per_direction.source);
  }
  const auto& hbm = c.memory.front();
  s += "ridge points (peak / outermost bandwidth)\n";
  for (const auto& [k, v] : c.peak_flops)
    s += fmt::format("  {:<6} {:.4g} FLOP/B\n", k, v.value / hbm.bandwidth.value);
  if (!c.notes.empty()) s += "notes: " + c.notes + "\n";
  s += "file: " + c.origin + "\n";
  return s;
}

std::string shapes_location() {
  std::vector<fs::path> dirs;
  if (auto d = env_or_empty("RIDGE_SHAPES_DIR"); !d.empty()) dirs.emplace_back(d);
#ifdef RIDGE_SOURCE_DIR
  dirs.emplace_back(fs::path(RIDGE_SOURCE_DIR) / "bench" / "shapes");
#endif
  dirs.emplace_back("bench/shapes");
  for (const auto& d : dirs) {
    std::error_code ec;
    if (fs::is_regular_file(d / "gemm-shapes.json", ec)) return d.string();
  }
  fail("shapes: bench/shapes/gemm-shapes.json not found (set RIDGE_SHAPES_DIR to the folder that holds it)");
}

static std::vector<NamedCost> standard_ops_unchecked(const std::string& dir_in);

std::vector<NamedCost> standard_ops(const std::string& dir_in) {
  try {
    return standard_ops_unchecked(dir_in);
  } catch (const nlohmann::json::exception& e) {
    // A hand-edited shapes file with a field of the wrong type: one line, not the library's text.
    fail("shapes: a field in {} has the wrong type or is missing ({})",
         dir_in.empty() ? shapes_location() : dir_in, input::plain_json_error(e));
  }
}

static std::vector<NamedCost> standard_ops_unchecked(const std::string& dir_in) {
  const fs::path dir = dir_in.empty() ? fs::path(shapes_location()) : fs::path(dir_in);
  const auto g = read_json_file(dir / "gemm-shapes.json");
  const auto a = read_json_file(dir / "attention-shapes.json");
  std::vector<NamedCost> ops;
  const MatmulDtypes bf16{};
  // D[m,n] = A[m,k] B[n,k]^T is the matmul X[B=m, D=k] W[D=k, F=n].
  for (const char* group : {"dense", "decode"}) {
    if (!g.contains(group)) continue;
    for (const auto& s : g.at(group)) {
      const auto m = get_int(s, "m", group), n = get_int(s, "n", group), k = get_int(s, "k", group);
      ops.push_back({group, fmt::format("gemm m={} n={} k={}", m, n, k), matmul(m, k, n, bf16)});
    }
  }
  for (const char* group : {"grouped_contiguous", "grouped_masked"}) {
    if (!g.contains(group)) continue;
    for (const auto& s : g.at(group)) {
      const auto G = get_int(s, "groups", group), m = get_int(s, "m_per_group", group),
                 n = get_int(s, "n", group), k = get_int(s, "k", group);
      check(G >= 1 && G <= 4096, "shapes: {} groups out of range", group);
      std::vector<int64_t> rows(static_cast<size_t>(G), m);
      const bool masked = std::string(group) == "grouped_masked";
      auto c = masked ? grouped_gemm_masked(m, rows, n, k, DType::bf16, DType::bf16)
                      : grouped_gemm_contiguous(rows, n, k, DType::bf16, DType::bf16);
      ops.push_back({masked ? "grouped-masked" : "grouped-contig",
                     fmt::format("{} g={} m={} n={} k={}", masked ? "masked" : "contig", G, m, n, k), c});
    }
  }
  if (a.contains("pytorch_attention")) {
    const auto& p = a.at("pytorch_attention");
    for (const auto& seq : p.at("seq")) {
      AttentionShape s;
      s.batch = p.at("batch").get<int64_t>();
      s.heads = p.value("heads", int64_t{1});
      s.seq_q = s.seq_kv = seq.get<int64_t>();
      s.head_dim = 64;
      s.dtype = DType::f32;
      ops.push_back({"attention-naive", fmt::format("naive b={} seq={} d=64 fp32", s.batch, s.seq_q),
                     attention_naive(s)});
    }
  }
  if (a.contains("flash_sweep")) {
    const auto& p = a.at("flash_sweep");
    for (const auto& seq : p.at("seq")) {
      AttentionShape s;
      s.batch = p.at("batch").get<int64_t>();
      s.heads = p.value("heads", int64_t{1});
      s.seq_q = s.seq_kv = seq.get<int64_t>();
      s.head_dim = 64;
      s.causal = p.value("causal", true);
      ops.push_back({"attention-flash", fmt::format("flash seq={} d=64 bf16 causal", s.seq_q), attention_flash(s)});
    }
  }
  if (a.contains("leaderboard")) {
    const auto& p = a.at("leaderboard");
    AttentionShape s;
    s.batch = p.at("batch").get<int64_t>();
    s.heads = p.at("heads").get<int64_t>();
    s.seq_q = s.seq_kv = p.at("seq").get<int64_t>();
    s.head_dim = p.at("head_dim").get<int64_t>();
    s.causal = p.value("causal", true);
    s.backward = true;
    ops.push_back({"attention-flash",
                   fmt::format("flash fwd+bwd h={} seq={} d={} bf16", s.heads, s.seq_q, s.head_dim),
                   attention_flash(s)});
  }
  return ops;
}

std::vector<MeasuredPoint> read_measured(const std::string& path) {
  std::istringstream in(input::read_input_file(path, "--results"));
  std::vector<MeasuredPoint> out;
  std::string line;
  int n = 0;
  bool any_row = false;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("--results: {} line {}", path, n);
    const nlohmann::json j = input::parse_json(line, where);
    if (!j.is_object()) fail("{}: not a JSON object (expected JSON lines of benchmark rows)", where);
    any_row = true;
    if (!j.contains("gflops")) continue;  // bandwidth-only rows have no place on a FLOP/s axis
    MeasuredPoint p;
    p.gflops = input::number(j.at("gflops"), "gflops", where);
    p.benchmark = j.contains("benchmark") ? input::string(j.at("benchmark"), "benchmark", where) : "?";
    p.dtype = j.contains("dtype") ? input::string(j.at("dtype"), "dtype", where) : std::string();
    const nlohmann::json case_j = j.value("case", nlohmann::json::object());
    p.case_ = case_j.dump();
    if (j.contains("cache") && j.at("cache").is_string()) p.cache = j.at("cache").get<std::string>();
    if (j.contains("bytes") && j.at("bytes").is_number()) p.working_set = j.at("bytes").get<double>();
    if (j.contains("intensity") && j.at("intensity").is_number()) p.intensity = j.at("intensity").get<double>();
    else if (j.contains("flops") && j.contains("bytes") && j.at("flops").is_number() && j.at("bytes").is_number() &&
             j.at("bytes").get<double>() > 0)
      p.intensity = j.at("flops").get<double>() / j.at("bytes").get<double>();
    if (!(p.gflops > 0) || !(p.intensity > 0))
      fail("--results: {} line {}: needs a positive 'gflops' and 'intensity' (or 'flops' and 'bytes')", path, n);
    std::string c;
    if (case_j.is_object())
      for (const auto& [k, v] : case_j.items()) c += fmt::format(" {}={}", k, v.is_string() ? v.get<std::string>() : v.dump());
    p.label = p.benchmark + c;
    out.push_back(std::move(p));
  }
  check(any_row, "--results: {} holds no benchmark rows (expected JSON lines, one row per line, as 'ridge bench "
        "... --json' writes)", path);
  return out;
}

std::string memory_level_for(const Chip& chip, const std::string& cache, double working_set_bytes) {
  if (chip.memory.empty()) return "";
  if (cache == "warm" && working_set_bytes > 0)
    // Chip files list the outermost level first; the innermost level that holds the set serves it.
    for (auto it = chip.memory.rbegin(); it != chip.memory.rend(); ++it)
      if (it->capacity && it->capacity->value >= working_set_bytes) return it->level;
  return chip.memory.front().level;
}

void hold_against(MeasuredPoint& p, const Chip& chip) {
  std::string roof = p.dtype;
  const bool fp8 = roof == "fp8_e4m3" || roof == "fp8_e5m2" || roof == "fp8";
  if (fp8) roof = chip.has_peak("fp8") ? "fp8" : "bf16";
  p.roof_dtype = roof;
  p.bound_flops = p.pct_of_bound = 0;
  p.above_roof = false;
  p.bound_level.clear();
  if (!chip.has_peak(roof) || chip.memory.empty()) return;
  const std::string level = memory_level_for(chip, p.cache, p.working_set);
  p.bound_level = level;
  p.bound_flops = std::min(chip.peak(roof), p.intensity * chip.bandwidth(level));
  if (p.bound_flops > 0) {
    p.pct_of_bound = 100.0 * p.gflops * 1e9 / p.bound_flops;
    p.above_roof = p.pct_of_bound > 100.0 * (1.0 + kAboveRoofTolerance);
  }
}

nlohmann::json plot_spec(const std::vector<Chip>& chips, const std::vector<NamedCost>& ops,
                         const std::vector<MeasuredPoint>& measured, const std::string& title) {
  nlohmann::json spec;
  spec["title"] = title;
  spec["roofs"] = nlohmann::json::array();
  for (const auto& c : chips) {
    for (const auto& [dt, pk] : c.peak_flops) {
      for (const auto& m : c.memory)
        spec["roofs"].push_back({{"chip", c.id},
                                 {"chip_name", c.name},
                                 {"dtype", dt},
                                 {"level", m.level},
                                 {"peak_flops", pk.value},
                                 {"bandwidth", m.bandwidth.value}});
    }
  }
  spec["points"] = nlohmann::json::array();
  for (const auto& c : chips)
    for (const auto& o : ops) {
      if (!c.has_peak(o.cost.compute) || o.cost.memory.empty()) continue;
      const auto b = bound(o.cost, c);
      spec["points"].push_back({{"chip", c.id},
                                {"group", o.group},
                                {"label", o.label},
                                {"dtype", o.cost.compute},
                                {"intensity", b.intensity},
                                {"flops_per_s", b.attainable_flops},
                                {"binding", b.binding},
                                {"kind", "predicted"}});
    }
  // Measured points are numbered from 1 in the order given: the report's table has the same numbers.
  int num = 0;
  for (const auto& m : measured)
    spec["points"].push_back({{"chip", "measured"},
                              {"group", m.benchmark},
                              {"label", m.label},
                              {"dtype", m.dtype},
                              {"intensity", m.intensity},
                              {"flops_per_s", m.gflops * 1e9},
                              {"kind", "measured"},
                              {"num", ++num},
                              {"cache", m.cache},
                              {"above_roof", m.above_roof}});
  return spec;
}

namespace {

std::string find_plot_script() {
  std::vector<fs::path> c;
  if (auto d = env_or_empty("RIDGE_TOOLS_DIR"); !d.empty()) c.emplace_back(fs::path(d) / "plot_roofline.py");
#ifdef RIDGE_SOURCE_DIR
  c.emplace_back(fs::path(RIDGE_SOURCE_DIR) / "tools" / "plot_roofline.py");
#endif
  c.emplace_back("tools/plot_roofline.py");
  for (const auto& p : c) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  fail("plot: tools/plot_roofline.py not found (set RIDGE_TOOLS_DIR to the folder that holds it)");
}

// The first python3 that can import matplotlib: $RIDGE_PYTHON, each python3 on PATH, then the
// system one (a pyenv or venv python3 early on PATH often lacks the Debian matplotlib).
std::string find_python() {
  std::vector<std::string> candidates;
  if (auto p = env_or_empty("RIDGE_PYTHON"); !p.empty()) candidates.push_back(p);
  std::stringstream ss(env_or_empty("PATH"));
  std::string d;
  while (std::getline(ss, d, ':'))
    if (!d.empty()) candidates.push_back((fs::path(d) / "python3").string());
  candidates.push_back("/usr/bin/python3");
  bool any = false;
  for (const auto& c : candidates) {
    std::error_code ec;
    if (!fs::is_regular_file(c, ec)) continue;
    any = true;
    if (process::run({c, "-c", "import matplotlib"}).exit_code == 0) return c;
  }
  if (!any) fail("plot: python3 not found (install python3 and python3-matplotlib, or set RIDGE_PYTHON)");
  fail("plot: matplotlib is missing for every python3 found (Debian: apt-get install python3-matplotlib; "
       "or pip install matplotlib; or set RIDGE_PYTHON to a python3 that has it)");
}

}  // namespace

std::vector<std::string> plot_outputs(const std::string& out) {
  check(!out.empty(), "--out: empty path");
  fs::path base(out);
  if (base.extension() == ".png" || base.extension() == ".svg") base.replace_extension();
  return {base.string() + ".png", base.string() + ".svg", base.string() + ".json"};
}

void check_plot_outputs(const std::string& out, const std::vector<std::string>& inputs) {
  for (const auto& f : plot_outputs(out)) files::check_not_an_input(f, inputs, "--out " + out);
}

std::vector<std::string> render_plot(const nlohmann::json& spec, const std::string& out) {
  const auto outputs = plot_outputs(out);
  const fs::path base = fs::path(outputs[0]).replace_extension();
  std::error_code ec;
  if (base.has_parent_path()) fs::create_directories(base.parent_path(), ec);
  for (const auto& f : outputs) files::check_writable(f, "--out");
  const std::string spec_path = outputs[2];
  // Python reads a private copy; out.json itself is replaced only after the plot succeeded.
  std::string tmp_spec = (fs::temp_directory_path() / "ridge-plot-spec.XXXXXX").string();
  {
    const int fd = ::mkstemp(tmp_spec.data());
    if (fd < 0) fail("plot: cannot create a temporary file in {}", fs::temp_directory_path().string());
    ::close(fd);
  }
  struct Remove {
    std::string p;
    ~Remove() { std::remove(p.c_str()); }
  } remove_tmp{tmp_spec};
  const std::string spec_text = spec.dump(1) + "\n";
  files::write_text(tmp_spec, spec_text, "plot");
  const auto r = process::run({find_python(), find_plot_script(), tmp_spec, base.string()});
  if (!r.started) fail("plot: cannot start python3");
  if (r.exit_code != 0) fail("plot: {}", process::last_line(r.output));
  files::write_text(spec_path, spec_text, "--out");
  return outputs;
}

}  // namespace ridge::roofline
