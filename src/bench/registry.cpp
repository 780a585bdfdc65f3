#include "bench/registry.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "ridge/core/error.hpp"
#include "ridge/core/input.hpp"
#include "ridge/core/numbers.hpp"
#include "core/check.hpp"
#include "core/json.hpp"

namespace ridge::bench {

using nlohmann::json;

// ---- Grid ----

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

void set_axis(std::vector<std::pair<std::string, std::vector<std::string>>>& axes, const std::string& key,
              std::vector<std::string> values) {
  for (auto& [k, v] : axes)
    if (k == key) {
      v = std::move(values);
      return;
    }
  axes.emplace_back(key, std::move(values));
}

}  // namespace

Grid Grid::parse(const std::vector<std::string>& items) {
  Grid g;
  for (const auto& item : items) {
    const auto eq = item.find('=');
    check_arg(eq != std::string::npos && eq > 0, "items",
              "'{}' is not key=value[,value...] (e.g. n=1M,4M,16M)", item);
    const std::string key = trim(item.substr(0, eq));
    check_arg(!key.empty(), "items", "'{}' has an empty key", item);
    std::vector<std::string> values;
    std::string rest = item.substr(eq + 1);
    size_t pos = 0;
    while (true) {
      const auto comma = rest.find(',', pos);
      const std::string v =
          trim(rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
      check_arg(!v.empty(), "items", "'{}' has an empty value for '{}'", item, key);
      values.push_back(v);
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    set_axis(g.axes_, key, std::move(values));
  }
  return g;
}

Grid Grid::from_json(const json& doc, const std::string& origin) {
  check_arg(doc.is_object(), origin, "a sweep grid must be a JSON object of key: [values] (got {})",
            doc.type_name());
  Grid g;
  auto scalar = [&](const std::string& key, const json& v) -> std::string {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
    if (v.is_number()) return fmt::format("{}", v.get<double>());
    if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
    fail_arg(origin, "value of '{}' must be a string, number or boolean (got {})", key, v.type_name());
  };
  for (const auto& [k, v] : doc.items()) {
    std::vector<std::string> values;
    if (v.is_array()) {
      check_arg(!v.empty(), origin, "'{}' has an empty list of values", k);
      for (const auto& x : v) values.push_back(scalar(k, x));
    } else {
      values.push_back(scalar(k, v));
    }
    set_axis(g.axes_, k, std::move(values));
  }
  return g;
}

Grid Grid::from_file(const std::string& path) {
  return from_json(input::read_json_file(path, "path", 16 << 20), "path '" + path + "'");
}

void Grid::merge(const Grid& other) {
  for (const auto& [k, v] : other.axes_) set_axis(axes_, k, v);
}

bool Grid::has(const std::string& key) const {
  return std::any_of(axes_.begin(), axes_.end(), [&](const auto& a) { return a.first == key; });
}

std::vector<std::string> Grid::values(const std::string& key, std::vector<std::string> fallback) const {
  for (const auto& [k, v] : axes_)
    if (k == key) return v;
  return fallback;
}

std::vector<int64_t> Grid::counts(const std::string& key, std::vector<int64_t> fallback) const {
  if (!has(key)) return fallback;
  std::vector<int64_t> out;
  // "1M" means 2^20 elements here, the way array sizes are usually written in sweeps; the range
  // (at most 2^40) is checked after the multiplier, so "4294967296G" cannot wrap.
  for (const auto& v : values(key)) out.push_back(numbers::parse_integer(v, "grid " + key, numbers::kCount));
  return out;
}

std::vector<int64_t> Grid::bytes(const std::string& key, std::vector<int64_t> fallback) const {
  if (!has(key)) return fallback;
  std::vector<int64_t> out;
  for (const auto& v : values(key)) out.push_back(numbers::parse_bytes(v, "grid " + key));
  return out;
}

std::vector<double> Grid::numbers(const std::string& key, std::vector<double> fallback) const {
  if (!has(key)) return fallback;
  std::vector<double> out;
  for (const auto& v : values(key)) out.push_back(numbers::parse_real(v, "grid " + key, {}));
  return out;
}

std::vector<bool> Grid::switches(const std::string& key, std::vector<bool> fallback) const {
  if (!has(key)) return fallback;
  std::vector<bool> out;
  for (const auto& v : values(key)) {
    std::string s = v;
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (s == "1" || s == "true" || s == "on" || s == "yes")
      out.push_back(true);
    else if (s == "0" || s == "false" || s == "off" || s == "no")
      out.push_back(false);
    else
      fail_arg("grid " + key, "'{}' is not a switch (accepted: 1, true, on, yes, 0, false, off, no)", v);
  }
  return out;
}

void Grid::check_keys(const std::vector<std::string>& known, const std::string& benchmark) const {
  for (const auto& [k, v] : axes_) {
    if (std::find(known.begin(), known.end(), k) != known.end()) continue;
    std::string list;
    for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
    fail_arg("grid " + k, "benchmark '{}' has no sweep axis '{}' (it has: {})", benchmark, k,
             list.empty() ? "none" : list);
  }
}

std::vector<json> Grid::cases() const {
  std::vector<json> out = {json::object()};
  for (const auto& [k, vals] : axes_) {
    std::vector<json> next;
    for (const auto& c : out)
      for (const auto& v : vals) {
        json d = c;
        d[k] = v;
        next.push_back(std::move(d));
      }
    out = std::move(next);
  }
  return out;
}

json Grid::to_json() const {
  json j = json::object();
  for (const auto& [k, v] : axes_) j[k] = v;
  return j;
}

// ---- Progress ----

Progress::Progress(bool enabled, double quiet_s)
    : enabled_(enabled), tty_(::isatty(2) == 1), quiet_s_(quiet_s), t0_(std::chrono::steady_clock::now()) {}

Progress::~Progress() {
  finish();
}

void Progress::start(size_t total) {
  total_ = total;
  done_ = 0;
  t0_ = std::chrono::steady_clock::now();
}

void Progress::add_total(size_t more) {
  total_ += more;
}

void Progress::tick(const std::string& what) {
  ++done_;
  if (!enabled_) return;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  if (elapsed < quiet_s_) return;
  std::string eta;
  if (total_ > 0 && done_ <= total_) {
    const double left = elapsed / static_cast<double>(done_) * static_cast<double>(total_ - done_);
    eta = fmt::format(", ~{:.0f} s left", left);
  }
  const std::string of = total_ > 0 ? fmt::format("{}/{}", done_, total_) : std::to_string(done_);
  const std::string line =
      fmt::format("[{}] {:.1f} s elapsed{}{}{}", of, elapsed, eta, what.empty() ? "" : ": ", what);
  if (tty_)
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
  else
    std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  printed_ = true;
}

void Progress::finish() {
  if (printed_ && tty_) std::fprintf(stderr, "\n");
  printed_ = false;
}

// ---- Context and registry ----

void Context::emit(Row row) {
  if (row.benchmark.empty()) row.benchmark = benchmark;
  if (row.threads <= 0) row.threads = threads;
  sink.emit(std::move(row));
}

namespace {
std::vector<Benchmark>& registry() {
  static std::vector<Benchmark> r;
  return r;
}
}  // namespace

void register_benchmark(Benchmark b) {
  registry().push_back(std::move(b));
}

std::vector<Benchmark> benchmarks() {
  auto r = registry();
  std::sort(r.begin(), r.end(), [](const Benchmark& a, const Benchmark& b) { return a.name < b.name; });
  return r;
}

const Benchmark& find_benchmark(const std::string& name) {
  for (const auto& b : registry())
    if (b.name == name) return b;
  std::string list;
  for (const auto& b : benchmarks()) list += (list.empty() ? "" : ", ") + b.name;
  fail("bench: no benchmark named '{}' (available: {})", name, list.empty() ? "none" : list);
}

}  // namespace ridge::bench
