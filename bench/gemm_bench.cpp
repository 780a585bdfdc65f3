// `ridge bench gemm`: the published GEMM shape sets (bench/shapes/gemm-shapes.json: DeepGEMM's
// dense, grouped contiguous and grouped masked tables plus memory-bound decode shapes) for fp32,
// bf16 and fp8, each against its peer measured in the same run. --quick runs a subset (< 2 min)
// that still has, per dtype, shapes with m >= 64 and decode shapes with m <= 16.
#include "ridge/build_paths.h"  // RIDGE_SOURCE_DIR, RIDGE_BINARY (generated)
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gemm_bench.hpp"
#include "gemm_bench_fp8.hpp"
#include "bench/registry.hpp"
#include "ridge/core.hpp"
#include "report/report.hpp"
#include "core/check.hpp"
#include "core/json.hpp"

namespace ridge::gemm_bench {
namespace {

std::string g_dtypes = "fp32,bf16,fp8";
std::string g_shapes_file;
bool g_warm = false;
bool g_check = false;

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

nlohmann::json load_shapes() {
  std::vector<std::string> candidates;
  if (!g_shapes_file.empty())
    candidates.push_back(g_shapes_file);
  else {
    // bench/shapes as the report layer finds it ($RIDGE_SHAPES_DIR, the source tree, ./bench/shapes),
    // else the project's shared list.
    try {
      candidates.push_back(report::shapes_location() + "/gemm-shapes.json");
    } catch (const Error&) {
    }
    candidates.push_back(std::string(RIDGE_SOURCE_DIR) + "/../shared/benchmarks/gemm-shapes.json");
  }
  for (const auto& path : candidates) {
    std::error_code ec;
    if (g_shapes_file.empty() && !std::filesystem::exists(path, ec)) continue;
    auto j = input::read_json_file(path, "--shapes", 16 << 20);
    check(j.is_object(), "--shapes '{}': must hold a JSON object of set name -> list of shapes", path);
    // A user's own file may list only the sets it cares about: a missing set is an empty one.
    for (const char* set : {"dense", "grouped_contiguous", "grouped_masked", "decode"}) {
      if (!j.contains(set)) j[set] = nlohmann::json::array();
      check(j[set].is_array(), "--shapes '{}': field '{}' must be an array of shapes", path, set);
    }
    return j;
  }
  fail("bench gemm: no shape file found (looked for bench/shapes/gemm-shapes.json); pass --shapes FILE");
}

struct Item {
  std::string set;
  int64_t m, n, k, groups = 0;
};

int64_t get(const nlohmann::json& j, const char* key, const std::string& set) {
  check(j.contains(key) && j[key].is_number_integer() && j[key].get<int64_t>() > 0,
        "gemm shapes: an entry of '{}' lacks a positive integer '{}'", set, key);
  // The limit --set sizes have (numbers::kCount): a k of 2^62 would wrap the blocking's products.
  check(j[key].get<int64_t>() <= (int64_t{1} << 40),
        "gemm shapes: '{}' = {} in '{}' is too large (at most 2^40)", key, j[key].get<int64_t>(), set);
  return j[key].get<int64_t>();
}

std::vector<Item> items(const nlohmann::json& shapes, const std::vector<std::string>& sets, bool quick) {
  std::vector<Item> out;
  for (const auto& set : sets) {
    check(shapes.contains(set),
          "--set set={}: unknown (expected dense, grouped_contiguous, grouped_masked, decode)", set);
    for (const auto& e : shapes[set]) {
      Item it{set, 0, get(e, "n", set), get(e, "k", set)};
      if (set == "grouped_contiguous" || set == "grouped_masked") {
        it.groups = get(e, "groups", set);
        it.m = get(e, "m_per_group", set);
      } else {
        it.m = get(e, "m", set);
      }
      const double g = it.groups ? static_cast<double>(it.groups) : 1.0, m = static_cast<double>(it.m),
                   n = static_cast<double>(it.n), k = static_cast<double>(it.k);
      memory::check_fits(4.0 * g * (m * k + n * k + m * n),
                         fmt::format("gemm shapes: '{}' entry m={} n={} k={}", set, it.m, it.n, it.k));
      out.push_back(it);
    }
  }
  if (!quick) return out;
  // The quick subset: two m >= 64 shapes, two decode shapes, and one of each grouped layout with
  // fewer rows per group than published (marked in the row's note).
  std::vector<Item> q;
  auto pick = [&](const std::string& set, int64_t m, int64_t n, int64_t k) {
    for (const auto& it : out)
      if (it.set == set && it.m == m && it.n == n && it.k == k) q.push_back(it);
  };
  pick("dense", 64, 2112, 7168);
  pick("dense", 128, 7168, 2048);
  pick("decode", 1, 4096, 7168);
  pick("decode", 16, 24576, 1536);
  for (const auto& it : out)
    if (it.set == "grouped_masked" && it.groups == 4 && it.k == 2048) q.push_back(it);
  for (const auto& it : out)
    if (it.set == "grouped_contiguous" && it.groups == 4 && it.k == 2048) {
      Item s = it;
      s.m = 256;
      q.push_back(s);
      break;
    }
  return q;
}

void run_gemm(bench::Context& ctx) {
  ctx.grid.check_keys({"set", "dtype", "threads", "peer"}, ctx.benchmark);
  const auto shapes = load_shapes();
  const auto sets = ctx.grid.values("set", {"dense", "grouped_contiguous", "grouped_masked", "decode"});
  auto dtypes = ctx.grid.values("dtype", split(g_dtypes));
  for (const auto& d : dtypes)
    check(d == "fp32" || d == "bf16" || d == "fp8", "--dtype: '{}' (expected fp32, bf16 or fp8)", d);
  const auto threads = ctx.grid.counts("threads", {get_num_threads()});
  check(!dtypes.empty(), "--dtype: empty (expected a comma-separated list of fp32, bf16, fp8)");
  const bool peer = ctx.grid.switches("peer", {true}).front();
  const auto list = items(shapes, sets, ctx.quick);
  const int restore = get_num_threads();
  size_t total = 0;
  for (const auto& it : list) total += it.groups ? 1 : dtypes.size();
  ctx.progress.start(total * threads.size());
  for (int64_t t : threads) {
    check(t >= 1 && t <= 1024, "--set threads={}: expected a thread count >= 1", t);
    set_num_threads(static_cast<int>(t));
    for (const auto& it : list) {
      const bool quick_scaled = ctx.quick && it.set == "grouped_contiguous";
      for (const auto& dt : dtypes) {
        if (it.groups && dt != "fp8") continue;  // grouped layouts exist for fp8 only
        bench::Row row;
        if (dt == "fp8") {
          Fp8Case c;
          c.m = it.m;
          c.n = it.n;
          c.k = it.k;
          c.groups = it.groups;
          c.layout = it.set == "grouped_contiguous" ? "contiguous"
                     : it.set == "grouped_masked"   ? "masked"
                                                    : "";
          c.peer = peer;
          c.warm = g_warm;
          c.check = g_check;
          row = run_fp8_case(c, ctx.options, ctx.chip());
        } else {
          GemmCase c;
          c.m = it.m;
          c.n = it.n;
          c.k = it.k;
          c.dtype = dt == "fp32" ? DType::f32 : DType::bf16;
          c.out = dt == "fp32" ? DType::f32 : DType::bf16;
          c.peer = peer;
          c.warm = g_warm;
          c.check = g_check;
          row = run_dense_case(c, ctx.options);
        }
        row.case_["set"] = it.set;
        if (quick_scaled) row.note = "m_per_group scaled down from the published shape for --quick";
        ctx.emit(std::move(row));
        ctx.progress.tick(it.set + " " + dt);
      }
    }
  }
  set_num_threads(restore);
}

void gemm_options(CLI::App& app) {
  app.add_option("--dtype", g_dtypes, "comma-separated dtypes: fp32, bf16, fp8 (default all)");
  app.add_option("--shapes", g_shapes_file, "shape-set JSON (default bench/shapes/gemm-shapes.json)");
  app.add_flag(
      "--warm", g_warm,
      "time every call on the same operands (they stay in cache) instead of rotating through copies that "
      "span 4x the last-level cache, so each call reads its operands from DRAM as in a model");
  app.add_flag("--check", g_check,
               "also hold each dense row's result against ridge's scalar reference twin on the same operands "
               "(max_rel_diff_vs_reference: largest difference over the largest magnitude)");
}

}  // namespace
}  // namespace ridge::gemm_bench

RIDGE_BENCHMARK(gemm, "gemm",
                "GEMM shape sets: fp32 vs OpenBLAS, bf16 vs oneDNN, fp8 (DeepGEMM semantics) vs oneDNN on "
                "dequantized operands; grouped MoE layouts vs dense",
                ridge::gemm_bench::run_gemm, ridge::gemm_bench::gemm_options);
