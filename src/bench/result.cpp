#include "bench/result.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <cmath>
#include <set>

#include "ridge/core/cpu.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/input.hpp"
#include "ridge/core/threads.hpp"
#include "core/check.hpp"
#include "core/json.hpp"

namespace ridge::bench {

using nlohmann::json;

void Row::set_time(const Measurement& m) {
  median_ms = m.median_ms();
  min_ms = m.min_ms();
  const Spread sp = spread_of(m);
  spread_pct = sp.pct;
  unstable = sp.unstable;
}

void Row::add_peer(const std::string& name, double peer_median_ms) {
  peers.push_back(Peer{name, peer_median_ms, median_ms > 0 ? peer_median_ms / median_ms : 0});
}

json Row::to_json() const {
  json j;
  j["benchmark"] = benchmark;
  j["case"] = case_.is_null() ? json::object() : case_;
  j["dtype"] = dtype;
  j["threads"] = threads;
  j["isa"] = isa;
  j["machine"] = machine;
  j["median_ms"] = median_ms;
  j["min_ms"] = min_ms;
  j["spread_pct"] = spread_pct;
  j["unstable"] = unstable;
  if (!cache.empty()) j["cache"] = cache;
  if (flops > 0) {
    j["flops"] = flops;
    j["gflops"] = gflops();
  }
  if (bytes > 0) {
    j["bytes"] = bytes;
    j["gbps"] = gbps();
  }
  if (bound_gflops > 0) j["bound_gflops"] = bound_gflops;
  if (bound_gbps > 0) j["bound_gbps"] = bound_gbps;
  if (bound_gflops > 0 || bound_gbps > 0) {
    j["bound_level"] = bound_level;
    j["pct_of_bound"] = pct_of_bound;
    j["above_roof"] = above_roof();
  }
  json peers_j = json::array();
  for (const auto& p : peers) peers_j.push_back({{"name", p.name}, {"median_ms", p.median_ms}, {"speedup", p.speedup}});
  j["peers"] = peers_j;
  if (!note.empty()) j["note"] = note;
  if (extra.is_object())
    for (const auto& [k, v] : extra.items())
      if (!j.contains(k)) j[k] = v;
  return j;
}

Row Row::from_json(const json& j) {
  check(j.is_object(), "result row: expected a JSON object, got {}", j.type_name());
  static const std::set<std::string> known = {
      "benchmark",    "case",       "dtype",       "threads",      "isa",   "machine",
      "median_ms",    "min_ms",     "flops",       "gflops",       "bytes", "gbps",
      "bound_gflops", "bound_gbps", "bound_level", "pct_of_bound", "peers", "note",
      "cache",        "spread_pct", "unstable",    "above_roof"};
  Row r;
  try {
    r.benchmark = j.value("benchmark", "");
    r.case_ = j.value("case", json::object());
    r.dtype = j.value("dtype", "");
    r.threads = j.value("threads", 0);
    r.isa = j.value("isa", "");
    r.machine = j.value("machine", "");
    r.median_ms = j.value("median_ms", 0.0);
    r.min_ms = j.value("min_ms", 0.0);
    r.flops = j.value("flops", 0.0);
    r.bytes = j.value("bytes", 0.0);
    r.bound_gflops = j.value("bound_gflops", 0.0);
    r.bound_gbps = j.value("bound_gbps", 0.0);
    r.bound_level = j.value("bound_level", "");
    r.pct_of_bound = j.value("pct_of_bound", 0.0);
    r.note = j.value("note", "");
    r.cache = j.value("cache", "");
    r.spread_pct = j.value("spread_pct", 0.0);
    r.unstable = j.value("unstable", false);
    if (j.contains("peers"))
      for (const auto& p : j["peers"])
        r.peers.push_back(Peer{p.at("name").get<std::string>(), p.at("median_ms").get<double>(),
                               p.at("speedup").get<double>()});
  } catch (const json::exception& e) {
    fail("result row: {}", input::plain_json_error(e));
  }
  for (const auto& [k, v] : j.items())
    if (!known.count(k)) r.extra[k] = v;
  return r;
}

Rotation plan_rotation(double bytes_per_copy, int64_t llc_bytes, double factor, int64_t max_copies) {
  check(bytes_per_copy > 0 && std::isfinite(bytes_per_copy),
        "plan_rotation: bytes_per_copy = {} (expected > 0)", bytes_per_copy);
  check(llc_bytes > 0, "plan_rotation: llc_bytes = {} (expected > 0)", llc_bytes);
  check(factor > 0 && std::isfinite(factor), "plan_rotation: factor = {} (expected > 0)", factor);
  check(max_copies >= 1, "plan_rotation: max_copies = {} (expected >= 1)", max_copies);
  const double want = factor * static_cast<double>(llc_bytes);
  Rotation r;
  const double need = std::ceil(want / bytes_per_copy);
  r.copies =
      need >= static_cast<double>(max_copies) ? max_copies : std::max<int64_t>(1, static_cast<int64_t>(need));
  r.footprint = static_cast<double>(r.copies) * bytes_per_copy;
  r.cold = r.footprint >= want;
  return r;
}

void fill_defaults(Row& row) {
  if (row.threads <= 0) row.threads = get_num_threads();
  if (row.isa.empty()) row.isa = cpu::isa_name(cpu::active_isa());
  if (row.machine.empty()) row.machine = cpu::info().brand;
  if (row.case_.is_null()) row.case_ = json::object();
}

json machine_context() {
  const auto& in = cpu::info();
  json paths = json::array();
  for (auto isa : cpu::supported_isas()) paths.push_back(cpu::isa_name(isa));
  return {{"cpu", in.brand},
          {"vendor", in.vendor},
          {"logical_cpus", in.logical_cpus},
          {"threads", get_num_threads()},
          {"l1d_bytes", in.caches.l1d},
          {"l2_bytes", in.caches.l2},
          {"l3_bytes", in.caches.l3},
          {"isa_paths", paths},
          {"active_isa", cpu::isa_name(cpu::active_isa())}};
}

// ---- printers ----

namespace {

std::string case_value(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

std::vector<std::string> case_keys(const std::vector<Row>& rows) {
  std::vector<std::string> keys;
  for (const auto& r : rows)
    if (r.case_.is_object())
      for (const auto& [k, v] : r.case_.items())
        if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  return keys;
}

std::vector<std::string> peer_names(const std::vector<Row>& rows) {
  std::vector<std::string> names;
  for (const auto& r : rows)
    for (const auto& p : r.peers)
      if (std::find(names.begin(), names.end(), p.name) == names.end()) names.push_back(p.name);
  return names;
}

std::vector<std::string> extra_keys(const std::vector<Row>& rows) {
  std::vector<std::string> keys;
  for (const auto& r : rows)
    if (r.extra.is_object())
      for (const auto& [k, v] : r.extra.items())
        if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  return keys;
}

const Peer* find_peer(const Row& r, const std::string& name) {
  for (const auto& p : r.peers)
    if (p.name == name) return &p;
  return nullptr;
}

std::string num(double v) { return fmt::format("{:.4g}", v); }

struct Column {
  std::string header;
  bool right = true;
  std::vector<std::string> cells;
};

}  // namespace

std::string to_table(const std::vector<Row>& rows) {
  if (rows.empty()) return "(no results)\n";
  std::vector<Column> cols;
  auto add = [&](std::string header, bool right, auto cell) {
    Column c{std::move(header), right, {}};
    for (const auto& r : rows) c.cells.push_back(cell(r));
    cols.push_back(std::move(c));
  };
  const bool any = [&] {
    for (const auto& r : rows)
      if (r.benchmark != rows.front().benchmark) return true;
    return false;
  }();
  if (any) add("benchmark", false, [](const Row& r) { return r.benchmark; });
  for (const auto& k : case_keys(rows))
    add(k, false, [&](const Row& r) { return r.case_.contains(k) ? case_value(r.case_[k]) : ""; });
  add("dtype", false, [](const Row& r) { return r.dtype; });
  add("thr", true, [](const Row& r) { return std::to_string(r.threads); });
  add("isa", false, [](const Row& r) { return r.isa; });
  add("median", true, [](const Row& r) { return num(r.median_ms) + " ms"; });
  add("min", true, [](const Row& r) { return num(r.min_ms) + " ms"; });
  const auto has = [&](auto pred) { return std::any_of(rows.begin(), rows.end(), pred); };
  if (has([](const Row& r) { return r.spread_pct > 0; }))
    add("spread", true, [](const Row& r) { return fmt::format("{:.0f}%", r.spread_pct); });
  if (has([](const Row& r) { return !r.cache.empty(); }))
    add("cache", false, [](const Row& r) { return r.cache; });
  if (has([](const Row& r) { return r.flops > 0; }))
    add("GFLOP/s", true, [](const Row& r) { return r.flops > 0 ? fmt::format("{:.1f}", r.gflops()) : ""; });
  if (has([](const Row& r) { return r.bytes > 0; }))
    add("GB/s", true, [](const Row& r) { return r.bytes > 0 ? fmt::format("{:.1f}", r.gbps()) : ""; });
  if (has([](const Row& r) { return r.bound_gflops > 0; }))
    add("bound GFLOP/s", true,
        [](const Row& r) { return r.bound_gflops > 0 ? fmt::format("{:.1f}", r.bound_gflops) : ""; });
  if (has([](const Row& r) { return r.bound_gflops <= 0 && r.bound_gbps > 0 && r.bytes > 0; }))
    add("bound GB/s", true, [](const Row& r) {
      return r.bound_gflops <= 0 && r.bound_gbps > 0 ? fmt::format("{:.1f} ({})", r.bound_gbps, r.bound_level) : "";
    });
  if (has([](const Row& r) { return r.pct_of_bound > 0; }))
    add("% bound", true, [](const Row& r) { return r.pct_of_bound > 0 ? fmt::format("{:.0f}%", r.pct_of_bound) : ""; });
  const bool any_flag = has([](const Row& r) { return r.unstable || r.above_roof(); });
  if (any_flag)
    add("flags", false, [](const Row& r) {
      std::string f = r.above_roof() ? "ABOVE-ROOF" : "";
      if (r.unstable) f += std::string(f.empty() ? "" : ",") + "UNSTABLE";
      return f;
    });
  for (const auto& p : peer_names(rows)) {
    add(p, true, [&](const Row& r) {
      const Peer* q = find_peer(r, p);
      return q ? num(q->median_ms) + " ms" : "";
    });
    add("vs " + p, true, [&](const Row& r) {
      const Peer* q = find_peer(r, p);
      return q ? fmt::format("{:.2f}x", q->speedup) : "";
    });
  }
  for (const auto& k : extra_keys(rows))
    add(k, true, [&](const Row& r) { return r.extra.contains(k) ? case_value(r.extra[k]) : ""; });
  if (has([](const Row& r) { return !r.note.empty(); }))
    add("note", false, [](const Row& r) { return r.note; });

  std::string out;
  std::vector<size_t> width;
  for (const auto& c : cols) {
    size_t w = c.header.size();
    for (const auto& s : c.cells) w = std::max(w, s.size());
    width.push_back(w);
  }
  auto line = [&](auto get) {
    std::string l;
    for (size_t i = 0; i < cols.size(); ++i) {
      const std::string s = get(i);
      const size_t pad = width[i] - s.size();
      if (i) l += "  ";
      if (cols[i].right) l += std::string(pad, ' ') + s;
      else l += s + (i + 1 < cols.size() ? std::string(pad, ' ') : "");
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    return l + "\n";
  };
  out += line([&](size_t i) { return cols[i].header; });
  for (size_t r = 0; r < rows.size(); ++r) out += line([&](size_t i) { return cols[i].cells[r]; });
  if (has([](const Row& r) { return r.above_roof(); }))
    out +=
        "ABOVE-ROOF: the point is above its roof: the roof is wrong or the working set came from a faster "
        "level "
        "than the one it is held against\n";
  if (has([](const Row& r) { return r.unstable; }))
    out += fmt::format(
        "UNSTABLE: the rounds' medians differ by more than {:.1f}x (the machine's speed changed during "
        "the run): rerun\n",
        kUnstableRatio);
  if (has([](const Row& r) { return r.cache == "cold"; }))
    out +=
        "cache cold: each call reads its operands from DRAM (rotating through copies >= 4x the last-level "
        "cache); "
        "warm: the same operands every call (--warm)\n";
  return out;
}

namespace {
std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + "\"";
}
std::string csv_num(double v, bool defined) { return defined ? fmt::format("{:.6g}", v) : ""; }
}  // namespace

std::string to_csv(const std::vector<Row>& rows) {
  const auto ckeys = case_keys(rows);
  const auto peers = peer_names(rows);
  const auto ekeys = extra_keys(rows);
  std::vector<std::string> header = {"benchmark"};
  for (const auto& k : ckeys) header.push_back("case." + k);
  for (const char* h : {"dtype", "threads", "isa", "machine", "median_ms", "min_ms", "flops", "gflops",
                        "bytes", "gbps", "bound_gflops", "bound_gbps", "bound_level", "pct_of_bound",
                        "above_roof", "cache", "spread_pct", "unstable"})
    header.push_back(h);
  for (const auto& p : peers) {
    header.push_back("peer." + p + ".median_ms");
    header.push_back("peer." + p + ".speedup");
  }
  for (const auto& k : ekeys) header.push_back(k);
  header.push_back("note");
  std::string out;
  for (size_t i = 0; i < header.size(); ++i) {
    if (i) out += ',';
    out += csv_cell(header[i]);
  }
  out += "\n";
  for (const auto& r : rows) {
    std::vector<std::string> c = {r.benchmark};
    for (const auto& k : ckeys) c.push_back(r.case_.contains(k) ? case_value(r.case_[k]) : "");
    c.push_back(r.dtype);
    c.push_back(std::to_string(r.threads));
    c.push_back(r.isa);
    c.push_back(r.machine);
    c.push_back(csv_num(r.median_ms, true));
    c.push_back(csv_num(r.min_ms, true));
    c.push_back(csv_num(r.flops, r.flops > 0));
    c.push_back(csv_num(r.gflops(), r.flops > 0));
    c.push_back(csv_num(r.bytes, r.bytes > 0));
    c.push_back(csv_num(r.gbps(), r.bytes > 0));
    c.push_back(csv_num(r.bound_gflops, r.bound_gflops > 0));
    c.push_back(csv_num(r.bound_gbps, r.bound_gbps > 0));
    c.push_back(r.bound_level);
    c.push_back(csv_num(r.pct_of_bound, r.bound_gflops > 0 || r.bound_gbps > 0));
    c.push_back(r.bound_gflops > 0 || r.bound_gbps > 0 ? (r.above_roof() ? "true" : "false") : "");
    c.push_back(r.cache);
    c.push_back(csv_num(r.spread_pct, true));
    c.push_back(r.unstable ? "true" : "false");
    for (const auto& p : peers) {
      const Peer* q = find_peer(r, p);
      c.push_back(q ? csv_num(q->median_ms, true) : "");
      c.push_back(q ? csv_num(q->speedup, true) : "");
    }
    for (const auto& k : ekeys) c.push_back(r.extra.contains(k) ? case_value(r.extra[k]) : "");
    c.push_back(r.note);
    for (size_t i = 0; i < c.size(); ++i) {
      if (i) out += ',';
      out += csv_cell(c[i]);
    }
    out += "\n";
  }
  return out;
}

std::string to_json_lines(const std::vector<Row>& rows) {
  std::string out;
  for (const auto& r : rows) out += r.to_json().dump() + "\n";
  return out;
}

Sink::Sink(Format format, std::FILE* out, RowHook hook) : format_(format), out_(out), hook_(std::move(hook)) {}

Sink::~Sink() {
  // Unwinding from a bad argument before any row: the error line alone, no "(no results)" table.
  if (std::uncaught_exceptions() > 0 && rows_.empty()) return;
  try {
    finish();
  } catch (...) {
  }
}

void Sink::emit(Row row) {
  fill_defaults(row);
  if (hook_) hook_(row);
  if (format_ == Format::json) {
    const std::string s = row.to_json().dump() + "\n";
    std::fputs(s.c_str(), out_);
    std::fflush(out_);
  }
  rows_.push_back(std::move(row));
}

void Sink::finish() {
  if (finished_) return;
  finished_ = true;
  if (format_ == Format::table) std::fputs(to_table(rows_).c_str(), out_);
  if (format_ == Format::csv) std::fputs(to_csv(rows_).c_str(), out_);
  std::fflush(out_);
}

}  // namespace ridge::bench
