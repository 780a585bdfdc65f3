// Measurements held against a chip: the roof a bench row or a measured point is compared with,
// this machine's probe result, and benchmark rows read back as points.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <mutex>
#include <optional>
#include <sstream>

#include "core/check.hpp"
#include "core/json.hpp"
#include "roofline/json.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/input.hpp"
#include "report/report.hpp"

namespace ridge::report {

std::string memory_level_for(const Chip& chip, const std::string& cache, double working_set_bytes) {
  if (chip.memory.empty()) return "";
  if (cache == "warm" && working_set_bytes > 0)
    // Chip files list the outermost level first; the innermost level that holds the set serves it.
    for (auto it = chip.memory.rbegin(); it != chip.memory.rend(); ++it)
      if (it->capacity && it->capacity->value >= working_set_bytes) return it->level;
  return chip.memory.front().level;
}

// The compute roof a dtype's work runs on: its own peak when the chip has one; otherwise the units its
// kernels fall back to on such a chip: FP8 on bf16 units, and bf16/fp16 widened to fp32 FMA (an AVX2
// machine has no bf16 peak; holding its bf16 rows against memory alone printed "0% of bound").
// "" when the chip has none of them.
static std::string compute_roof(const Chip& chip, const std::string& dtype) {
  const bool fp8 = dtype == "fp8_e4m3" || dtype == "fp8_e5m2" || dtype == "fp8";
  const std::string own = fp8 ? "fp8" : dtype;
  if (chip.has_peak(own)) return own;
  if (fp8 && chip.has_peak("bf16")) return "bf16";
  if ((fp8 || dtype == "bf16" || dtype == "fp16") && chip.has_peak("fp32")) return "fp32";
  return "";
}

bool hold_row(bench::Row& row, const Chip& chip) {
  double bw = 0;
  std::string level = row.bound_level;
  if (level.empty()) {
    try {
      level = memory_level_for(chip, row.cache, row.bytes);
    } catch (const std::exception&) {
      level.clear();
    }
  }
  try {
    bw = chip.bandwidth(level);
  } catch (const std::exception&) {
    level.clear();
    try {
      bw = chip.bandwidth();
    } catch (const std::exception&) {
      bw = 0;
    }
  }
  if (level.empty()) {
    try {
      level = chip.memory_level().level;
    } catch (const std::exception&) {
    }
  }
  row.bound_level = level;
  if (bw > 0) row.bound_gbps = bw / 1e9;
  if (row.flops > 0 && row.bound_gflops > 0) {
    // The benchmark chose its own compute roof (e.g. fp8 running on the bf16 units): keep it.
    row.pct_of_bound = row.gflops() / row.bound_gflops * 100.0;
    return true;
  }
  if (row.flops > 0) {
    double peak = 0;
    try {
      const std::string roof = compute_roof(chip, row.dtype);
      peak = roof.empty() ? 0 : chip.peak(roof);
      if (!roof.empty() && roof != row.dtype)
        row.extra["compute_roof"] = roof + " (no " + row.dtype + " units)";
    } catch (const std::exception&) {
      peak = 0;
    }
    double bound = peak;
    if (row.bytes > 0 && bw > 0) {
      const double by_memory = row.flops / row.bytes * bw;
      bound = bound > 0 ? std::min(bound, by_memory) : 0;
    }
    if (bound > 0) {
      row.bound_gflops = bound / 1e9;
      row.pct_of_bound = row.gflops() / row.bound_gflops * 100.0;
      return true;
    }
  }
  if (row.bytes > 0 && row.bound_gbps > 0) {
    row.pct_of_bound = row.gbps() / row.bound_gbps * 100.0;
    return true;
  }
  return false;
}

void hold_fp8_row(bench::Row& row, const Chip& chip) {
  try {
    const std::string roof = compute_roof(chip, "fp8");
    if (roof.empty()) return;
    const double peak = chip.peak(roof);
    row.bound_level = memory_level_for(chip, row.cache, row.bytes);
    const double bw = chip.bandwidth(row.bound_level);
    const double bound = std::min(peak, row.flops / row.bytes * bw);
    row.bound_gflops = bound / 1e9;
    row.pct_of_bound = row.gflops() / row.bound_gflops * 100.0;
    row.extra["compute_roof"] = roof == "fp8" ? roof : roof + " (no fp8 units)";
  } catch (const std::exception&) {
  }
}

bench::RowHook hold_rows_against(ChipSource chip) {
  if (!chip) return {};
  return [chip = std::move(chip)](bench::Row& row) {
    if (const Chip* c = chip()) hold_row(row, *c);
  };
}

namespace {

struct ProbeCache {
  std::once_flag once;
  std::optional<Chip> chip;
};
ProbeCache& probe_cache() {
  static ProbeCache c;
  return c;
}

}  // namespace

const Chip* probed_chip() {
  auto& c = probe_cache();
  std::call_once(c.once, [&] {
    try {
      if (roofline::has_probe_result()) c.chip = roofline::load_chip("this");
    } catch (const std::exception& e) {
      // A broken probe file must not stop a benchmark; its rows carry no bound, and the user is told.
      std::fprintf(stderr,
                   "ridge: warning: ignoring the probe result (%s); rows carry no roofline bound until "
                   "'ridge probe' writes it again\n",
                   e.what());
    }
  });
  return c.chip ? &*c.chip : nullptr;
}

void hold_against(MeasuredPoint& p, const Chip& chip) {
  std::string roof = compute_roof(chip, p.dtype);
  if (roof.empty()) roof = p.dtype;
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

namespace {

// One benchmark row as a point; nullopt for a row without gflops (bandwidth-only rows have no place
// on a FLOP/s axis). Errors are about `argument`, at `where` ("rows.jsonl line 3").
std::optional<MeasuredPoint> point_of(const nlohmann::json& j, const std::string& argument,
                                      const std::string& where) {
  // input::* name the input as their `what`; here that is the argument and the place in it.
  const std::string what = argument + ": " + where;
  try {
    if (!j.contains("gflops")) return std::nullopt;
    MeasuredPoint p;
    p.gflops = input::number(j.at("gflops"), "gflops", what);
    p.benchmark = j.contains("benchmark") ? input::string(j.at("benchmark"), "benchmark", what) : "?";
    p.dtype = j.contains("dtype") ? input::string(j.at("dtype"), "dtype", what) : std::string();
    p.case_ = j.value("case", nlohmann::json::object());
    if (j.contains("cache") && j.at("cache").is_string()) p.cache = j.at("cache").get<std::string>();
    if (j.contains("bytes") && j.at("bytes").is_number()) p.working_set = j.at("bytes").get<double>();
    if (j.contains("intensity") && j.at("intensity").is_number())
      p.intensity = j.at("intensity").get<double>();
    else if (j.contains("flops") && j.contains("bytes") && j.at("flops").is_number() &&
             j.at("bytes").is_number() && j.at("bytes").get<double>() > 0)
      p.intensity = j.at("flops").get<double>() / j.at("bytes").get<double>();
    check_arg(p.gflops > 0 && p.intensity > 0, argument,
              "{}: needs a positive 'gflops' and 'intensity' (or 'flops' and 'bytes')", where);
    std::string c;
    if (p.case_.is_object())
      for (const auto& [k, v] : p.case_.items())
        c += fmt::format(" {}={}", k, v.is_string() ? v.get<std::string>() : v.dump());
    p.label = p.benchmark + c;
    return p;
  } catch (const Error& e) {
    // input::* raise about `what` ("path: file line n"): the error is about the argument.
    if (e.argument() == what) throw Error(argument, std::string(e.what()).substr(argument.size() + 2));
    throw;
  }
}

}  // namespace

std::vector<MeasuredPoint> read_measured(const std::string& path) {
  std::istringstream in(input::read_input_file(path, "path"));
  std::vector<MeasuredPoint> out;
  std::string line;
  int n = 0;
  bool any_row = false;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{} line {}", path, n);
    nlohmann::json j;
    try {
      j = input::parse_json(line, "path: " + where);
    } catch (const Error& e) {
      throw Error("path", std::string(e.what()).substr(6));  // "path: " + the rest
    }
    check_arg(j.is_object(), "path", "{}: not a JSON object (expected JSON lines of benchmark rows)", where);
    any_row = true;
    if (auto p = point_of(j, "path", where)) out.push_back(std::move(*p));
  }
  check_arg(any_row, "path",
            "{} holds no benchmark rows (expected JSON lines, one row per line, as 'ridge bench ... --json' "
            "writes)",
            path);
  return out;
}

std::vector<MeasuredPoint> measured_points(const std::vector<bench::Row>& rows) {
  std::vector<MeasuredPoint> out;
  int n = 0;
  for (const auto& r : rows) {
    ++n;
    if (auto p = point_of(r.to_json(), "rows", fmt::format("row {}", n))) out.push_back(std::move(*p));
  }
  return out;
}

}  // namespace ridge::report
