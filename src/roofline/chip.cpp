#include "ridge/build_paths.h"  // RIDGE_SOURCE_DIR, RIDGE_BINARY (generated)
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "ridge/core/env.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/input.hpp"
#include "core/json.hpp"
#include "ridge/roofline.hpp"
#include "roofline/embedded.hpp"
#include "roofline/json.hpp"
#include "core/check.hpp"

namespace ridge::roofline {
namespace fs = std::filesystem;
namespace {

// Far above any chip that exists (an exaFLOP/s per chip, a petabyte/s of bandwidth, an exabyte of
// memory): a number past these is a typo in units, and would poison every bound computed from it.
constexpr double kMaxFlops = 1e18;
constexpr double kMaxBandwidth = 1e15;
constexpr double kMaxCapacity = 1e18;
// Far below any real chip (a thousand FLOP/s, bytes/s or bytes): a smaller figure is a typo, and a
// denormal such as 5e-324 would turn every time computed from it into inf.
constexpr double kMinFigure = 1e3;

const std::set<std::string>& known_peak_keys() {
  static const std::set<std::string> k{"fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4"};
  return k;
}

std::string join_keys(const std::map<std::string, Sourced>& m) {
  std::string s;
  for (const auto& [k, v] : m) s += (s.empty() ? "" : ", ") + k;
  return s.empty() ? "(none)" : s;
}

struct Reader {
  const std::string& origin;

  [[noreturn]] void bad(const std::string& field, const std::string& why) const {
    fail_arg("chip file " + origin, "field '{}' {}", field, why);
  }
  const nlohmann::json& member(const nlohmann::json& obj, const std::string& parent,
                               const std::string& key) const {
    const std::string field = parent.empty() ? key : parent + "." + key;
    if (!obj.is_object()) bad(parent, "must be a JSON object");
    auto it = obj.find(key);
    if (it == obj.end()) bad(field, "is missing");
    return *it;
  }
  std::string str(const nlohmann::json& obj, const std::string& parent, const std::string& key,
                  bool required = true) const {
    const std::string field = parent.empty() ? key : parent + "." + key;
    if (!obj.contains(key)) {
      if (required) bad(field, "is missing");
      return {};
    }
    const auto& v = obj.at(key);
    if (!v.is_string()) bad(field, "must be a string");
    return v.get<std::string>();
  }
  Sourced sourced(const nlohmann::json& obj, const std::string& parent, const std::string& key,
                  double max_value, const char* unit) const {
    const std::string field = parent.empty() ? key : parent + "." + key;
    const auto& v = member(obj, parent, key);
    if (!v.is_object()) bad(field, "must be an object {\"value\": number, \"source\": \"...\"}");
    const auto& val = member(v, field, "value");
    if (!val.is_number()) bad(field + ".value", "must be a number");
    const double x = val.get<double>();
    if (!std::isfinite(x) || x <= 0) bad(field + ".value", fmt::format("must be positive (got {})", x));
    if (x < kMinFigure)
      bad(field + ".value",
          fmt::format("is {:g} {}, below the plausible minimum {:g} (wrong units?)", x, unit, kMinFigure));
    if (x > max_value)
      bad(field + ".value",
          fmt::format("is {:g} {}, above the plausible limit {:g} (wrong units?)", x, unit, max_value));
    Sourced s;
    s.value = x;
    s.source = str(v, field, "source");
    if (s.source.empty()) bad(field + ".source", "is empty; every figure needs its source");
    return s;
  }
  Link link(const nlohmann::json& obj, const std::string& parent) const {
    Link l;
    l.name = str(obj, parent, "name");
    l.bandwidth_per_direction = sourced(obj, parent, "bandwidth_per_direction", kMaxBandwidth, "B/s");
    return l;
  }
};

// A chip file is a few KiB; 16 MiB leaves room for a long "measured" section.
std::string read_text(const std::string& path) {
  return input::read_input_file(path, "chip file", 16 << 20);
}

Chip parse_text(const std::string& text, const std::string& origin) {
  return parse_chip(input::parse_json(text, "chip file " + origin), origin);
}

// Memory levels run from the outermost inwards; hbm and dram are both outermost.
int level_rank(const std::string& level) {
  if (level == "hbm" || level == "dram") return 0;
  if (level == "l3") return 1;
  if (level == "l2") return 2;
  return 3;  // l1
}

std::string env_or_empty(const char* name) {
  return env::text(name);
}

// Directories searched for <id>.json, in order: $RIDGE_HW_DIR, then the source tree's hardware/.
std::vector<fs::path> hardware_dirs() {
  std::vector<fs::path> dirs;
  if (auto d = env_or_empty("RIDGE_HW_DIR"); !d.empty()) dirs.emplace_back(d);
#ifdef RIDGE_SOURCE_DIR
  dirs.emplace_back(fs::path(RIDGE_SOURCE_DIR) / "hardware");
#endif
  return dirs;
}

const detail::EmbeddedChip* find_embedded(const std::string& id) {
  size_t n = 0;
  const auto* t = detail::embedded_chips(&n);
  for (size_t i = 0; i < n; ++i)
    if (id == t[i].id) return &t[i];
  return nullptr;
}

bool looks_like_path(const std::string& s) {
  return s.find('/') != std::string::npos || (s.size() > 5 && s.substr(s.size() - 5) == ".json");
}

}  // namespace

std::string peak_key(DType t) {
  switch (t) {
    case DType::f64:
      return "fp64";
    case DType::f32:
      return "fp32";
    case DType::bf16:
      return "bf16";
    case DType::fp16:
      return "fp16";
    case DType::fp8_e4m3:
    case DType::fp8_e5m2:
      return "fp8";
    case DType::i8:
      return "int8";
    case DType::i32:
      break;
  }
  fail(
      "dtype: {} has no peak FLOP/s of its own (a compute dtype is one of fp64, fp32, bf16, fp16, fp8, int8)",
      dtype_name(t));
}

double Chip::peak(DType t) const {
  return peak(peak_key(t));
}

double Chip::peak(const std::string& dtype) const {
  std::string key = dtype;
  if (key == "f32")
    key = "fp32";
  else if (key == "f64")
    key = "fp64";
  else if (key == "f16")
    key = "fp16";
  else if (key == "i8")
    key = "int8";
  else if (key == "fp8_e4m3" || key == "fp8_e5m2" || key == "e4m3" || key == "e5m2")
    key = "fp8";
  auto it = peak_flops.find(key);
  if (it == peak_flops.end()) fail("chip {} has no {} peak (it has: {})", id, dtype, join_keys(peak_flops));
  return it->second.value;
}

bool Chip::has_peak(const std::string& dtype) const {
  try {
    peak(dtype);
    return true;
  } catch (const Error&) {
    return false;
  }
}

const MemoryLevel& Chip::memory_level(const std::string& level) const {
  if (memory.empty()) fail("chip {} has no memory levels", id);
  if (level.empty()) return memory.front();
  for (const auto& m : memory)
    if (m.level == level) return m;
  std::string have;
  for (const auto& m : memory) have += (have.empty() ? "" : ", ") + m.level;
  fail_arg("level", "chip {} has no memory level '{}' (it has: {})", id, level, have);
}

double Chip::bandwidth(const std::string& level) const {
  return memory_level(level).bandwidth.value;
}

double Chip::link_bandwidth(const std::string& which) const {
  if (which == "intra_node" || which == "intra") {
    check(intra_node.has_value(), "chip {} has no intra-node link in its file", id);
    return intra_node->bandwidth_per_direction.value;
  }
  if (which == "inter_node" || which == "inter") {
    check(inter_node.has_value(), "chip {} has no inter-node link in its file", id);
    return inter_node->bandwidth_per_direction.value;
  }
  fail_arg("link", "'{}' is not a link (accepted: intra_node, inter_node)", which);
}

nlohmann::json to_json(const Chip& self) {
  auto src = [](const Sourced& s) { return nlohmann::json{{"value", s.value}, {"source", s.source}}; };
  nlohmann::json j;
  j["id"] = self.id;
  j["name"] = self.name;
  j["kind"] = self.kind;
  j["peak_flops"] = nlohmann::json::object();
  for (const auto& [k, v] : self.peak_flops) j["peak_flops"][k] = src(v);
  j["memory"] = nlohmann::json::array();
  for (const auto& m : self.memory) {
    nlohmann::json mj{{"level", m.level}, {"name", m.name}, {"bandwidth", src(m.bandwidth)}};
    if (m.capacity) mj["capacity"] = src(*m.capacity);
    j["memory"].push_back(mj);
  }
  if (self.intra_node || self.inter_node) {
    j["links"] = nlohmann::json::object();
    auto lj = [&](const Link& l) {
      return nlohmann::json{{"name", l.name}, {"bandwidth_per_direction", src(l.bandwidth_per_direction)}};
    };
    if (self.intra_node) j["links"]["intra_node"] = lj(*self.intra_node);
    if (self.inter_node) j["links"]["inter_node"] = lj(*self.inter_node);
  }
  if (!self.notes.empty()) j["notes"] = self.notes;
  if (!self.measured.empty()) j["measured"] = input::parse_json(self.measured, "chip 'measured'");
  return j;
}

Chip parse_chip(const nlohmann::json& doc, const std::string& origin) {
  Reader r{origin};
  if (!doc.is_object()) fail_arg("chip file " + origin, "must hold a JSON object");
  Chip c;
  c.origin = origin;
  c.id = r.str(doc, "", "id");
  if (c.id.empty()) r.bad("id", "is empty");
  c.name = r.str(doc, "", "name");
  c.kind = r.str(doc, "", "kind");
  if (c.kind != "gpu" && c.kind != "tpu" && c.kind != "cpu")
    r.bad("kind", fmt::format("is '{}' (accepted: gpu, tpu, cpu)", c.kind));

  const auto& peaks = r.member(doc, "", "peak_flops");
  if (!peaks.is_object() || peaks.empty())
    r.bad("peak_flops", "must be a non-empty object of dtype -> figure");
  for (const auto& [k, v] : peaks.items()) {
    (void)v;
    if (!known_peak_keys().count(k))
      r.bad("peak_flops." + k, "is not a dtype (accepted: fp64, fp32, tf32, bf16, fp16, fp8, int8, fp4)");
    c.peak_flops[k] = r.sourced(peaks, "peak_flops", k, kMaxFlops, "FLOP/s");
  }

  const auto& mem = r.member(doc, "", "memory");
  if (!mem.is_array() || mem.empty()) r.bad("memory", "must be a non-empty array of memory levels");
  for (size_t i = 0; i < mem.size(); ++i) {
    const std::string p = fmt::format("memory[{}]", i);
    const auto& m = mem[i];
    if (!m.is_object()) r.bad(p, "must be an object");
    MemoryLevel ml;
    ml.level = r.str(m, p, "level");
    static const std::set<std::string> levels{"hbm", "dram", "l3", "l2", "l1"};
    if (!levels.count(ml.level))
      r.bad(p + ".level", fmt::format("is '{}' (accepted: hbm, dram, l3, l2, l1)", ml.level));
    ml.name = r.str(m, p, "name", false);
    ml.bandwidth = r.sourced(m, p, "bandwidth", kMaxBandwidth, "B/s");
    if (m.contains("capacity")) ml.capacity = r.sourced(m, p, "capacity", kMaxCapacity, "B");
    if (!c.memory.empty() && level_rank(ml.level) <= level_rank(c.memory.back().level))
      r.bad(p + ".level",
            fmt::format("is '{}' after '{}': levels must be distinct and listed outermost first "
                        "(hbm or dram, then l3, l2, l1)",
                        ml.level, c.memory.back().level));
    c.memory.push_back(std::move(ml));
  }

  if (doc.contains("links")) {
    const auto& links = doc.at("links");
    if (!links.is_object()) r.bad("links", "must be an object");
    for (const auto& [k, v] : links.items()) {
      if (k == "intra_node")
        c.intra_node = r.link(v, "links.intra_node");
      else if (k == "inter_node")
        c.inter_node = r.link(v, "links.inter_node");
      else
        r.bad("links." + k, "is not a link (accepted: intra_node, inter_node)");
    }
  }
  c.notes = r.str(doc, "", "notes", false);
  if (doc.contains("measured") && !doc.at("measured").is_null()) c.measured = doc.at("measured").dump();
  return c;
}

Chip parse_chip_text(const std::string& text, const std::string& origin) {
  return parse_text(text, origin);
}

std::string chip_json_text(const Chip& chip, int indent) {
  return to_json(chip).dump(indent);
}

Chip load_chip_file(const std::string& path) {
  return parse_text(read_text(path), path);
}

std::string probe_result_path() {
  if (auto h = env_or_empty("RIDGE_HOME"); !h.empty()) return (fs::path(h) / "this.json").string();
  // Not `home = "."` on an empty string: GCC 12 reports a false -Wrestrict on that assignment.
  const std::string home = env_or_empty("HOME");
  return (fs::path(home.empty() ? std::string(".") : home) / ".cache" / "ridge" / "this.json").string();
}

bool has_probe_result() {
  std::error_code ec;
  return fs::is_regular_file(probe_result_path(), ec);
}

Chip load_chip(const std::string& name) {
  check_arg(!name.empty(), "name_or_path",
            "empty chip name (accepted: {}, this, or a path to a chip JSON file)",
            fmt::join(chip_ids(), ", "));
  if (name == "this") {
    const auto p = probe_result_path();
    check_arg(has_probe_result(), "name_or_path", "'this': no probe result at {}; run 'ridge probe' first",
              p);
    return load_chip_file(p);
  }
  if (looks_like_path(name)) return load_chip_file(name);
  for (const auto& d : hardware_dirs()) {
    std::error_code ec;
    const auto p = d / (name + ".json");
    if (fs::is_regular_file(p, ec)) return load_chip_file(p.string());
  }
  if (const auto* e = find_embedded(name)) return parse_text(e->json, "embedded:" + name + ".json");
  std::error_code ec;
  if (fs::exists(name, ec)) return load_chip_file(name);  // a FIFO or directory: say so
  fail_arg("name_or_path", "unknown chip '{}' (accepted: {}, this, or a path to a chip JSON file)", name,
           fmt::join(chip_ids(), ", "));
}

std::vector<std::string> chip_ids() {
  std::set<std::string> ids;
  for (const auto& d : hardware_dirs()) {
    std::error_code ec;
    if (!fs::is_directory(d, ec)) continue;
    for (const auto& e : fs::directory_iterator(d, ec))
      if (e.path().extension() == ".json") ids.insert(e.path().stem().string());
  }
  size_t n = 0;
  const auto* t = detail::embedded_chips(&n);
  for (size_t i = 0; i < n; ++i) ids.insert(t[i].id);
  return {ids.begin(), ids.end()};
}

std::string hardware_location() {
  for (const auto& d : hardware_dirs()) {
    std::error_code ec;
    if (fs::is_directory(d, ec)) return d.string();
  }
  return "(embedded in the binary)";
}

}  // namespace ridge::roofline
