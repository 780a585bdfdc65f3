// The standard benchmark shapes of bench/shapes/ as costs (for `ridge report` and `ridge roofline
// plot`), found through $RIDGE_SHAPES_DIR or the source tree.
#include <fmt/format.h>

#include <filesystem>

#include "core/json.hpp"
#include "core/check.hpp"
#include "ridge/build_paths.h"  // RIDGE_SOURCE_DIR (generated)
#include "ridge/core/env.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/input.hpp"
#include "report/report.hpp"

namespace ridge::report {
namespace fs = std::filesystem;
using namespace ridge::roofline;
namespace {

nlohmann::json read_json_file(const fs::path& p) {
  return input::read_json_file(p.string(), "shapes");
}

int64_t get_int(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j.at(key).is_number_integer()) fail("shapes: {} lacks integer '{}'", where, key);
  return j.at(key).get<int64_t>();
}

}  // namespace

std::string shapes_location() {
  std::vector<fs::path> dirs;
  if (auto d = env::text("RIDGE_SHAPES_DIR"); !d.empty()) dirs.emplace_back(d);
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
      ops.push_back(
          {"attention-flash", fmt::format("flash seq={} d=64 bf16 causal", s.seq_q), attention_flash(s)});
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

}  // namespace ridge::report
