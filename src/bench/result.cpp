#include "bench/result.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <iterator>
#include <type_traits>
#include <utility>

#include "core/check.hpp"
#include "core/json.hpp"
#include "ridge/core/cpu.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/threads.hpp"

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

// ---- The fields of a row ----
//
// kFields lists every field of a Row once: its JSON key (also its CSV column), how it is written to
// and read from JSON, and its column in the text table. to_json, from_json, to_csv and to_table all
// walk this table, so a new field is one entry here.

namespace {

using Rows = std::vector<Row>;

enum class Align { left, right };

// One printed column (CSV or text table): its header, alignment, and each row's cell.
struct Column {
  std::string header;
  Align align = Align::right;
  std::function<std::string(const Row&)> cell;
};
using Columns = std::vector<Column>;

// A field's place in the text table.
struct TableColumn {
  int at = 0;  // position, left to right (columns are sorted by it); 0: not in the table
  const char* header = nullptr;
  Align align = Align::right;
  std::string (*cell)(const Row&) = nullptr;
  bool (*show)(const Rows&) = nullptr;  // shown when this holds; nullptr: when some row's cell is not empty
  Columns (*group)(const Rows&) = nullptr;  // a group's columns (case keys, peers, extras) instead of one
};

struct Field {
  const char* key;                              // JSON key and CSV column; nullptr: the extras
  json (*value)(const Row&) = nullptr;          // the JSON value, whose text is the CSV cell
  bool (*when)(const Row&) = nullptr;           // written (JSON key, CSV cell) only when; nullptr: always
  void (*read)(Row&, const json&) = nullptr;    // from JSON; nullptr: computed from other fields
  std::string (*csv)(const Row&) = nullptr;     // the CSV cell where it is not the value's text
  Columns (*csv_group)(const Rows&) = nullptr;  // a group's CSV columns instead of one named `key`
  TableColumn table = {};
};

template <auto member>
json value_of(const Row& r) {
  return r.*member;
}

template <auto member>
void read_into(Row& r, const json& v) {
  r.*member = v.template get<std::remove_cvref_t<decltype(r.*member)>>();
}

template <auto member>
bool positive(const Row& r) {
  return r.*member > 0;
}

template <auto member>
bool not_empty(const Row& r) {
  return !(r.*member).empty();
}

bool has_bound(const Row& r) {
  return r.bound_gflops > 0 || r.bound_gbps > 0;
}

template <typename Pred>
bool any_row(const Rows& rows, Pred pred) {
  return std::any_of(rows.begin(), rows.end(), pred);
}

bool always(const Rows&) {
  return true;
}

std::string num(double v) {
  return fmt::format("{:.4g}", v);
}
std::string csv_num(double v) {
  return fmt::format("{:.6g}", v);
}

// A field's JSON value as its CSV cell: strings as they are, fractions to 6 significant digits,
// integers and true/false as JSON writes them.
std::string value_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return csv_num(v.get<double>());
  return v.dump();
}

// A case or extra value as a cell: strings as they are, anything else as JSON.
std::string case_value(const json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// The keys of a JSON object member over all rows, in order of first appearance.
std::vector<std::string> keys_of(const Rows& rows, const json Row::*member) {
  std::vector<std::string> keys;
  for (const auto& r : rows)
    if ((r.*member).is_object())
      for (const auto& [k, v] : (r.*member).items())
        if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  return keys;
}

Columns object_columns(const Rows& rows, const json Row::*member, const std::string& prefix, Align align) {
  Columns cols;
  for (const auto& k : keys_of(rows, member))
    cols.push_back({prefix + k, align, [member, k](const Row& r) {
                      return (r.*member).contains(k) ? case_value((r.*member)[k]) : "";
                    }});
  return cols;
}

// The extras' columns, one per key, the same in CSV and in the table.
Columns extra_columns(const Rows& rows) {
  return object_columns(rows, &Row::extra, "", Align::right);
}

std::vector<std::string> peer_names(const Rows& rows) {
  std::vector<std::string> names;
  for (const auto& r : rows)
    for (const auto& p : r.peers)
      if (std::find(names.begin(), names.end(), p.name) == names.end()) names.push_back(p.name);
  return names;
}

// Each peer's two columns: its median and the ratio to ridge's.
Columns peer_columns(const Rows& rows, const std::string& median_header, const std::string& speedup_header,
                     std::string (*median)(double), std::string (*speedup)(double)) {
  Columns cols;
  for (const auto& name : peer_names(rows)) {
    auto cell = [name](double Peer::*member, std::string (*format)(double)) {
      return [name, member, format](const Row& r) {
        for (const auto& p : r.peers)
          if (p.name == name) return format(p.*member);
        return std::string();
      };
    };
    cols.push_back(
        {fmt::format(fmt::runtime(median_header), name), Align::right, cell(&Peer::median_ms, median)});
    cols.push_back(
        {fmt::format(fmt::runtime(speedup_header), name), Align::right, cell(&Peer::speedup, speedup)});
  }
  return cols;
}

constexpr Field kFields[] = {
    {.key = "benchmark",
     .value = value_of<&Row::benchmark>,
     .read = read_into<&Row::benchmark>,
     .table = {.at = 10,
               .header = "benchmark",
               .align = Align::left,
               .cell = [](const Row& r) { return r.benchmark; },
               .show =
                   [](const Rows& rows) {
                     return any_row(rows,
                                    [&](const Row& r) { return r.benchmark != rows.front().benchmark; });
                   }}},
    {.key = "case",
     .value = [](const Row& r) { return r.case_.is_null() ? json::object() : r.case_; },
     .read = read_into<&Row::case_>,
     .csv_group = [](const Rows& rows) { return object_columns(rows, &Row::case_, "case.", Align::left); },
     .table = {.at = 20,
               .group = [](const Rows& rows) { return object_columns(rows, &Row::case_, "", Align::left); }}},
    {.key = "dtype",
     .value = value_of<&Row::dtype>,
     .read = read_into<&Row::dtype>,
     .table = {.at = 30,
               .header = "dtype",
               .align = Align::left,
               .cell = [](const Row& r) { return r.dtype; },
               .show = always}},
    {.key = "threads",
     .value = value_of<&Row::threads>,
     .read = read_into<&Row::threads>,
     .table = {.at = 40,
               .header = "thr",
               .cell = [](const Row& r) { return std::to_string(r.threads); },
               .show = always}},
    {.key = "isa",
     .value = value_of<&Row::isa>,
     .read = read_into<&Row::isa>,
     .table = {.at = 50,
               .header = "isa",
               .align = Align::left,
               .cell = [](const Row& r) { return r.isa; },
               .show = always}},
    {.key = "machine", .value = value_of<&Row::machine>, .read = read_into<&Row::machine>},
    {.key = "median_ms",
     .value = value_of<&Row::median_ms>,
     .read = read_into<&Row::median_ms>,
     .table = {.at = 60,
               .header = "median",
               .cell = [](const Row& r) { return num(r.median_ms) + " ms"; },
               .show = always}},
    {.key = "min_ms",
     .value = value_of<&Row::min_ms>,
     .read = read_into<&Row::min_ms>,
     .table = {.at = 70,
               .header = "min",
               .cell = [](const Row& r) { return num(r.min_ms) + " ms"; },
               .show = always}},
    {.key = "flops",
     .value = value_of<&Row::flops>,
     .when = positive<&Row::flops>,
     .read = read_into<&Row::flops>},
    {.key = "gflops",
     .value = [](const Row& r) { return json(r.gflops()); },
     .when = positive<&Row::flops>,
     .table = {.at = 100,
               .header = "GFLOP/s",
               .cell = [](const Row& r) { return r.flops > 0 ? fmt::format("{:.1f}", r.gflops()) : ""; }}},
    {.key = "bytes",
     .value = value_of<&Row::bytes>,
     .when = positive<&Row::bytes>,
     .read = read_into<&Row::bytes>},
    {.key = "gbps",
     .value = [](const Row& r) { return json(r.gbps()); },
     .when = positive<&Row::bytes>,
     .table = {.at = 110,
               .header = "GB/s",
               .cell = [](const Row& r) { return r.bytes > 0 ? fmt::format("{:.1f}", r.gbps()) : ""; }}},
    {.key = "bound_gflops",
     .value = value_of<&Row::bound_gflops>,
     .when = positive<&Row::bound_gflops>,
     .read = read_into<&Row::bound_gflops>,
     .table = {.at = 120,
               .header = "bound GFLOP/s",
               .cell =
                   [](const Row& r) {
                     return r.bound_gflops > 0 ? fmt::format("{:.1f}", r.bound_gflops) : "";
                   }}},
    // A bandwidth bound is shown only for rows without a FLOP bound, with the level it was read from.
    {.key = "bound_gbps",
     .value = value_of<&Row::bound_gbps>,
     .when = positive<&Row::bound_gbps>,
     .read = read_into<&Row::bound_gbps>,
     .table = {.at = 130,
               .header = "bound GB/s",
               .cell =
                   [](const Row& r) {
                     return r.bound_gflops <= 0 && r.bound_gbps > 0
                                ? fmt::format("{:.1f} ({})", r.bound_gbps, r.bound_level)
                                : "";
                   },
               .show =
                   [](const Rows& rows) {
                     return any_row(rows, [](const Row& r) {
                       return r.bound_gflops <= 0 && r.bound_gbps > 0 && r.bytes > 0;
                     });
                   }}},
    // In JSON only beside a bound; in CSV always (set before the row hook, which may find no chip).
    {.key = "bound_level",
     .value = value_of<&Row::bound_level>,
     .when = has_bound,
     .read = read_into<&Row::bound_level>,
     .csv = [](const Row& r) { return r.bound_level; }},
    {.key = "pct_of_bound",
     .value = value_of<&Row::pct_of_bound>,
     .when = has_bound,
     .read = read_into<&Row::pct_of_bound>,
     .table = {.at = 140,
               .header = "% bound",
               .cell =
                   [](const Row& r) {
                     return r.pct_of_bound > 0 ? fmt::format("{:.0f}%", r.pct_of_bound) : "";
                   }}},
    // The table's flags column also carries `unstable`.
    {.key = "above_roof",
     .value = [](const Row& r) { return json(r.above_roof()); },
     .when = has_bound,
     .table = {.at = 150,
               .header = "flags",
               .align = Align::left,
               .cell =
                   [](const Row& r) {
                     std::string f = r.above_roof() ? "ABOVE-ROOF" : "";
                     if (r.unstable) f += std::string(f.empty() ? "" : ",") + "UNSTABLE";
                     return f;
                   }}},
    {.key = "cache",
     .value = value_of<&Row::cache>,
     .when = not_empty<&Row::cache>,
     .read = read_into<&Row::cache>,
     .table =
         {.at = 90, .header = "cache", .align = Align::left, .cell = [](const Row& r) { return r.cache; }}},
    {.key = "spread_pct",
     .value = value_of<&Row::spread_pct>,
     .read = read_into<&Row::spread_pct>,
     .table = {
         .at = 80,
         .header = "spread",
         .cell = [](const Row& r) { return fmt::format("{:.0f}%", r.spread_pct); },
         .show =
             [](const Rows& rows) { return any_row(rows, [](const Row& r) { return r.spread_pct > 0; }); }}},
    {.key = "unstable", .value = value_of<&Row::unstable>, .read = read_into<&Row::unstable>},
    {.key = "peers",
     .value =
         [](const Row& r) {
           json peers = json::array();
           for (const auto& p : r.peers)
             peers.push_back({{"name", p.name}, {"median_ms", p.median_ms}, {"speedup", p.speedup}});
           return peers;
         },
     .read =
         [](Row& r, const json& peers) {
           for (const auto& p : peers)
             r.peers.push_back(Peer{p.at("name").get<std::string>(), p.at("median_ms").get<double>(),
                                    p.at("speedup").get<double>()});
         },
     .csv_group =
         [](const Rows& rows) {
           return peer_columns(rows, "peer.{}.median_ms", "peer.{}.speedup", csv_num, csv_num);
         },
     .table = {.at = 160,
               .group =
                   [](const Rows& rows) {
                     return peer_columns(
                         rows, "{}", "vs {}", [](double ms) { return num(ms) + " ms"; },
                         [](double x) { return fmt::format("{:.2f}x", x); });
                   }}},
    // Benchmark-specific fields: merged at the JSON object's top level (under keys no field has), and
    // every key left over when reading.
    {.key = nullptr, .csv_group = extra_columns, .table = {.at = 170, .group = extra_columns}},
    {.key = "note",
     .value = value_of<&Row::note>,
     .when = not_empty<&Row::note>,
     .read = read_into<&Row::note>,
     .table =
         {.at = 180, .header = "note", .align = Align::left, .cell = [](const Row& r) { return r.note; }}},
};

bool is_field_key(const std::string& key) {
  return std::any_of(std::begin(kFields), std::end(kFields),
                     [&](const Field& f) { return f.key != nullptr && key == f.key; });
}

}  // namespace

json Row::to_json() const {
  json j = json::object();
  for (const Field& f : kFields)
    if (f.key != nullptr && (f.when == nullptr || f.when(*this))) j[f.key] = f.value(*this);
  if (extra.is_object())
    for (const auto& [k, v] : extra.items())
      if (!j.contains(k)) j[k] = v;
  return j;
}

Row Row::from_json(const json& j) {
  check(j.is_object(), "result row: expected a JSON object, got {}", j.type_name());
  Row r;
  try {
    for (const Field& f : kFields) {
      if (f.read == nullptr) continue;
      const auto it = j.find(f.key);
      if (it != j.end()) f.read(r, *it);
    }
  } catch (const json::exception& e) {
    fail("result row: {}", input::plain_json_error(e));
  }
  for (const auto& [k, v] : j.items())
    if (!is_field_key(k)) r.extra[k] = v;
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

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + "\"";
}

// A field's one CSV column: the JSON value's text, empty where JSON leaves the key out.
Column csv_column(const Field& f) {
  if (f.csv != nullptr) return {f.key, Align::right, f.csv};
  return {f.key, Align::right, [&f](const Row& r) {
            return f.when == nullptr || f.when(r) ? value_text(f.value(r)) : std::string();
          }};
}

}  // namespace

std::string to_table(const std::vector<Row>& rows) {
  if (rows.empty()) return "(no results)\n";
  std::vector<std::pair<int, Columns>> placed;
  for (const Field& f : kFields) {
    const TableColumn& t = f.table;
    if (t.group != nullptr) {
      placed.emplace_back(t.at, t.group(rows));
    } else if (t.header != nullptr) {
      const bool shown =
          t.show != nullptr ? t.show(rows) : any_row(rows, [&](const Row& r) { return !t.cell(r).empty(); });
      if (shown) placed.emplace_back(t.at, Columns{{t.header, t.align, t.cell}});
    }
  }
  std::stable_sort(placed.begin(), placed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Column> cols;
  for (auto& [at, group] : placed) std::move(group.begin(), group.end(), std::back_inserter(cols));

  std::vector<std::vector<std::string>> cells(cols.size());
  std::vector<size_t> width;
  for (size_t i = 0; i < cols.size(); ++i) {
    size_t w = cols[i].header.size();
    for (const auto& r : rows) w = std::max(w, cells[i].emplace_back(cols[i].cell(r)).size());
    width.push_back(w);
  }
  auto line = [&](auto get) {
    std::string l;
    for (size_t i = 0; i < cols.size(); ++i) {
      const std::string s = get(i);
      const size_t pad = width[i] - s.size();
      if (i) l += "  ";
      if (cols[i].align == Align::right)
        l += std::string(pad, ' ') + s;
      else
        l += s + (i + 1 < cols.size() ? std::string(pad, ' ') : "");
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    return l + "\n";
  };
  std::string out = line([&](size_t i) { return cols[i].header; });
  for (size_t r = 0; r < rows.size(); ++r) out += line([&](size_t i) { return cells[i][r]; });
  if (any_row(rows, [](const Row& r) { return r.above_roof(); }))
    out +=
        "ABOVE-ROOF: the point is above its roof: the roof is wrong or the working set came from a faster "
        "level "
        "than the one it is held against\n";
  if (any_row(rows, [](const Row& r) { return r.unstable; }))
    out += fmt::format(
        "UNSTABLE: the rounds' medians differ by more than {:.1f}x (the machine's speed changed during "
        "the run): rerun\n",
        kUnstableRatio);
  if (any_row(rows, [](const Row& r) { return r.cache == "cold"; }))
    out +=
        "cache cold: each call reads its operands from DRAM (rotating through copies >= 4x the last-level "
        "cache); "
        "warm: the same operands every call (--warm)\n";
  return out;
}

std::string to_csv(const std::vector<Row>& rows) {
  std::vector<Column> cols;
  for (const Field& f : kFields) {
    if (f.csv_group == nullptr) {
      cols.push_back(csv_column(f));
      continue;
    }
    Columns group = f.csv_group(rows);
    std::move(group.begin(), group.end(), std::back_inserter(cols));
  }
  std::string out;
  auto line = [&](auto get) {
    for (size_t i = 0; i < cols.size(); ++i) {
      if (i) out += ',';
      out += csv_cell(get(cols[i]));
    }
    out += "\n";
  };
  line([](const Column& c) { return c.header; });
  for (const auto& r : rows) line([&](const Column& c) { return c.cell(r); });
  return out;
}

std::string to_json_lines(const std::vector<Row>& rows) {
  std::string out;
  for (const auto& r : rows) out += r.to_json().dump() + "\n";
  return out;
}

Sink::Sink(Format format, std::FILE* out, RowHook hook)
    : format_(format), out_(out), hook_(std::move(hook)) {}

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
