// The chip database: every file loads, carries its sources, and holds the corrected figures
// (not the seed tables' errors); malformed files are rejected naming the file and the field.
#include "ridge/build_paths.h"  // RIDGE_SOURCE_DIR, RIDGE_BINARY (generated)
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "ridge/core/error.hpp"
#include "ridge/roofline.hpp"
#include "roofline/embedded.hpp"
#include "roofline/json.hpp"

namespace rr = ridge::roofline;
namespace fs = std::filesystem;

namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const auto dir = fs::temp_directory_path() / "ridge_test_chips";
  fs::create_directories(dir);
  const auto p = dir / name;
  std::ofstream(p) << text;
  return p.string();
}

std::string error_of(const std::string& path) {
  try {
    rr::load_chip(path);
  } catch (const ridge::Error& e) {
    return e.what();
  }
  return "";
}

const char* kGood = R"({"id": "toy", "name": "Toy", "kind": "gpu",
  "peak_flops": {"bf16": {"value": 1e14, "source": "made up"}},
  "memory": [{"level": "hbm", "name": "HBM", "bandwidth": {"value": 1e12, "source": "made up"}}]})";

}  // namespace

TEST(Chips, DatabaseHoldsTheTenChips) {
  const auto ids = rr::chip_ids();
  for (const char* id : {"v100", "a100", "h100", "h200", "b200", "tpu-v5e", "tpu-v5p", "tpu-v6e",
                         "xeon-8480plus", "epyc-9654"})
    EXPECT_NE(std::find(ids.begin(), ids.end(), id), ids.end()) << id;
}

// GPUs and TPUs: HBM and a chip-to-chip link. CPUs (one socket): DRAM, and no link listed (UPI or
// Infinity Fabric between sockets is not modelled).
TEST(Chips, EveryFigureHasASourceAndTheOutermostLevelIsHbmOrDram) {
  for (const auto& id : rr::chip_ids()) {
    const auto c = rr::load_chip(id);
    EXPECT_EQ(c.id, id);
    for (const auto& [k, v] : c.peak_flops) EXPECT_FALSE(v.source.empty()) << id << " " << k;
    ASSERT_FALSE(c.memory.empty());
    for (const auto& m : c.memory) {
      EXPECT_FALSE(m.bandwidth.source.empty()) << id << " " << m.level;
      if (m.capacity) {
        EXPECT_FALSE(m.capacity->source.empty()) << id << " " << m.level;
      }
    }
    ASSERT_TRUE(c.memory[0].capacity.has_value()) << id;
    if (c.kind == "cpu") {
      EXPECT_EQ(c.memory[0].level, "dram") << id;
    } else {
      EXPECT_EQ(c.memory[0].level, "hbm") << id;
      ASSERT_TRUE(c.intra_node.has_value()) << id;
      EXPECT_FALSE(c.intra_node->bandwidth_per_direction.source.empty());
    }
    // Dense, never "with sparsity": bf16 (or fp16) above fp32 and below fp8/int8 by the usual 2x.
    // (1979 vs 2 x 989 is the vendors' rounding.)
    if (c.has_peak("fp8") && c.has_peak("bf16")) {
      EXPECT_NEAR(c.peak("fp8") / c.peak("bf16"), 2, 0.002) << id;
    }
    if (c.has_peak("int8") && c.has_peak("bf16")) {
      EXPECT_NEAR(c.peak("int8") / c.peak("bf16"), 2, 0.002) << id;
    }
    if (c.has_peak("fp32") && c.has_peak("bf16")) {
      EXPECT_GT(c.peak("bf16"), c.peak("fp32")) << id;
    }
  }
}

// The figures the seed tables get wrong (hardware-sources.md), pinned to the corrected values.
TEST(Chips, CorrectedFiguresNotTheSeedErrors) {
  const auto v100 = rr::load_chip("v100");
  EXPECT_DOUBLE_EQ(v100.bandwidth(), 9.0e11);  // not 300 GB/s (its NVLink total)
  EXPECT_DOUBLE_EQ(v100.peak("fp16"), 1.25e14);
  EXPECT_FALSE(v100.has_peak("bf16"));  // Volta has no bf16
  EXPECT_DOUBLE_EQ(v100.link_bandwidth(), 1.5e11);

  const auto a100 = rr::load_chip("a100");
  EXPECT_DOUBLE_EQ(a100.peak("bf16"), 3.12e14);  // not 156 (TF32)
  EXPECT_DOUBLE_EQ(a100.peak("tf32"), 1.56e14);
  EXPECT_DOUBLE_EQ(a100.peak("int8"), 6.24e14);
  EXPECT_DOUBLE_EQ(a100.bandwidth(), 2.039e12);
  EXPECT_FALSE(a100.has_peak("fp8"));
  EXPECT_DOUBLE_EQ(a100.link_bandwidth(), 3.0e11);

  for (const char* id : {"h100", "h200"}) {
    const auto h = rr::load_chip(id);
    EXPECT_DOUBLE_EQ(h.peak("bf16"), 9.89e14) << id;  // not 495 (TF32)
    EXPECT_DOUBLE_EQ(h.peak(ridge::DType::fp8_e4m3), 1.979e15) << id;
    EXPECT_DOUBLE_EQ(h.link_bandwidth(), 4.5e11) << id;
  }
  EXPECT_DOUBLE_EQ(rr::load_chip("h100").bandwidth(), 3.35e12);
  EXPECT_DOUBLE_EQ(rr::load_chip("h200").bandwidth(), 4.8e12);
  EXPECT_DOUBLE_EQ(rr::load_chip("h200").memory[0].capacity->value, 1.41e11);

  const auto b200 = rr::load_chip("b200");
  EXPECT_DOUBLE_EQ(b200.peak("bf16"), 2.25e15);
  EXPECT_DOUBLE_EQ(b200.peak("fp8"), 4.5e15);
  EXPECT_NEAR(b200.bandwidth(), 8e12, 0.4e12);                 // one GPU, not the NVL72 rack's 576 TB/s
  EXPECT_NEAR(b200.peak("bf16") / b200.bandwidth(), 281, 12);  // not 3.9
  EXPECT_DOUBLE_EQ(b200.link_bandwidth(), 9.0e11);

  const auto v5e = rr::load_chip("tpu-v5e");
  EXPECT_DOUBLE_EQ(v5e.peak("bf16"), 1.97e14);
  EXPECT_DOUBLE_EQ(v5e.peak("int8"), 3.94e14);
  EXPECT_NEAR(v5e.bandwidth(), 8.15e11, 0.05e11);
  EXPECT_DOUBLE_EQ(v5e.link_bandwidth(), 4.5e10);
  const auto v5p = rr::load_chip("tpu-v5p");
  EXPECT_DOUBLE_EQ(v5p.peak("bf16"), 4.59e14);
  EXPECT_DOUBLE_EQ(v5p.bandwidth(), 2.765e12);
  EXPECT_DOUBLE_EQ(v5p.link_bandwidth(), 9e10);
  const auto v6e = rr::load_chip("tpu-v6e");
  EXPECT_NEAR(v6e.peak("bf16"), 9.15e14, 0.05e14);
  EXPECT_DOUBLE_EQ(v6e.bandwidth(), 1.64e12);
  EXPECT_DOUBLE_EQ(v6e.link_bandwidth(), 9e10);
}

// The CPU entries: no vendor publishes FLOP/s per SKU, so each peak is cores x base clock x the
// instruction's per-cycle figure, and DRAM is channels x transfer rate x 8 bytes. The numbers stated
// here are the ones the files' sources state; the files must hold exactly their products, and the
// analyzer's ridge point (machine balance) must be peak / DRAM bandwidth.
TEST(Chips, CpuPeaksAreCoresTimesBaseClockTimesPerCycle) {
  struct Cpu {
    const char* id;
    double cores, clock;               // one socket, base clock in Hz
    double fp32, bf16, int8;           // FLOP (OP) per cycle per core
    double channels, transfers_per_s;  // DDR5 channels and MT/s
    const char* bf16_ridge;            // as `ridge hw show` prints it
  };
  // Sapphire Rapids: 2 AVX-512 FMA units x 16 fp32 lanes x 2; AMX TMUL does a full-tile
  // TDPBF16PS (16 x 16 x 32 multiply-adds) or TDPBUSD (16 x 16 x 64) every 16 cycles.
  const double amx_bf16 = 16.0 * 16 * 32 * 2 / 16;  // 1024
  const double amx_int8 = 16.0 * 16 * 64 * 2 / 16;  // 2048
  // Zen 4: 2 FMA pipes of 256 bits = 8 fp32 lanes each; vdpbf16ps does 2 bf16 multiply-adds per
  // 32-bit lane (4 FLOP), vpdpbusd 4 int8 ones (8 OP).
  const Cpu cpus[] = {
      {"xeon-8480plus", 56, 2.0e9, 2 * 16 * 2, amx_bf16, amx_int8, 8, 4800e6, "373.3"},
      {"epyc-9654", 96, 2.4e9, 2 * 8 * 2, 2 * 8 * 4, 2 * 8 * 8, 12, 4800e6, "32"},
  };
  EXPECT_EQ(amx_bf16, 1024);
  EXPECT_EQ(amx_int8, 2048);
  for (const auto& x : cpus) {
    const auto c = rr::load_chip(x.id);
    EXPECT_EQ(c.kind, "cpu") << x.id;
    EXPECT_DOUBLE_EQ(c.peak("fp32"), x.cores * x.clock * x.fp32) << x.id;
    EXPECT_DOUBLE_EQ(c.peak("bf16"), x.cores * x.clock * x.bf16) << x.id;
    EXPECT_DOUBLE_EQ(c.peak("int8"), x.cores * x.clock * x.int8) << x.id;
    EXPECT_DOUBLE_EQ(c.peak("fp64"), x.cores * x.clock * x.fp32 / 2) << x.id;  // half the lanes
    const double bw = x.channels * x.transfers_per_s * 8;
    EXPECT_DOUBLE_EQ(c.bandwidth(), bw) << x.id;
    EXPECT_EQ(c.bandwidth(), c.bandwidth("dram")) << x.id;
    EXPECT_FALSE(c.has_peak("fp8")) << x.id;  // neither has fp8 arithmetic

    // Machine balance as the analyzer computes and prints it: the bound of a bf16 matmul, the
    // asymptotic critical batch (bf16 weights: peak / bw x 2 bytes / 2) and `ridge hw show`.
    const double balance = x.cores * x.clock * x.bf16 / bw;
    const auto b = rr::bound(rr::matmul(4096, 8192, 8192), c);
    EXPECT_EQ(b.level, "dram") << x.id;
    EXPECT_DOUBLE_EQ(b.ridge_intensity, balance) << x.id;
    EXPECT_DOUBLE_EQ(rr::critical_batch(c, 8192, 8192).asymptotic, balance) << x.id;
    const auto shown = rr::describe(c);
    EXPECT_NE(shown.find(fmt::format("  bf16   {} FLOP/B\n", x.bf16_ridge)), std::string::npos) << shown;
    EXPECT_NE(rr::describe(rr::matmul(64, 4096, 4096), rr::bound(rr::matmul(64, 4096, 4096), c), c)
                  .find(fmt::format("ridge point of {} at dram: {} FLOP/B", x.id, x.bf16_ridge)),
              std::string::npos)
        << x.id;
  }
  // The published figures the derivations must agree with: 307.2 GB/s for 8 x DDR5-4800 and AMD's
  // 460.8 GB/s per socket; 114.7 bf16 TFLOP/s on AMX at base against 7.2 fp32 (16x: AMX is the point).
  EXPECT_DOUBLE_EQ(rr::load_chip("xeon-8480plus").bandwidth(), 307.2e9);
  EXPECT_DOUBLE_EQ(rr::load_chip("epyc-9654").bandwidth(), 460.8e9);
  EXPECT_DOUBLE_EQ(rr::load_chip("xeon-8480plus").peak("bf16") / rr::load_chip("xeon-8480plus").peak("fp32"),
                   16);
  EXPECT_DOUBLE_EQ(rr::load_chip("epyc-9654").peak("bf16") / rr::load_chip("epyc-9654").peak("fp32"), 2);
  EXPECT_FALSE(rr::load_chip("epyc-9654").has_peak("fp16"));  // no AVX512-FP16 on Zen 4
  // Sapphire Rapids' fp16 is AVX512-FP16 on the same FMA units, twice the lanes of fp32 (no AMX-FP16).
  EXPECT_DOUBLE_EQ(rr::load_chip("xeon-8480plus").peak("fp16"), 56 * 2.0e9 * 2 * 32 * 2);
}

TEST(Chips, EmbeddedCopyMatchesTheFiles) {
  size_t n = 0;
  const auto* t = rr::detail::embedded_chips(&n);
  EXPECT_GE(n, 10u);
  for (size_t i = 0; i < n; ++i) {
    const auto a = rr::parse_chip(nlohmann::json::parse(t[i].json), t[i].id);
    const auto b = rr::load_chip(std::string(RIDGE_SOURCE_DIR) + "/hardware/" + t[i].id + ".json");
    EXPECT_EQ(to_json(a), to_json(b)) << t[i].id;
  }
}

TEST(Chips, ToJsonRoundTrips) {
  const auto c = rr::load_chip("h100");
  const auto again = rr::parse_chip(to_json(c), "roundtrip");
  EXPECT_EQ(to_json(again), to_json(c));
}

// The public text form (ridge/roofline.hpp needs no JSON library): the same document, the same chip
// back, and a probe's "measured" section (kept as JSON text in Chip::measured) carried through unchanged.
TEST(Chips, JsonTextRoundTripsAndKeepsMeasured) {
  const auto c = rr::load_chip("h100");
  const std::string text = rr::chip_json_text(c);
  EXPECT_EQ(nlohmann::json::parse(text), to_json(c));
  EXPECT_EQ(to_json(rr::parse_chip_text(text, "text")), to_json(c));
  EXPECT_TRUE(c.measured.empty());
  auto doc = to_json(c);
  doc["measured"] = {{"trials", 5}, {"sweep", {1.5, 2.25}}, {"isa", "avx512"}};
  const auto m = rr::parse_chip_text(doc.dump(), "with measured");
  EXPECT_EQ(nlohmann::json::parse(m.measured), doc["measured"]);
  EXPECT_EQ(nlohmann::json::parse(rr::chip_json_text(m, -1)), doc);
  doc["measured"] = nullptr;  // null, as before: no measured section written back
  EXPECT_FALSE(to_json(rr::parse_chip_text(doc.dump(), "null measured")).contains("measured"));
  EXPECT_THROW(rr::parse_chip_text("{", "broken.json"), ridge::Error);
}

TEST(Chips, LoadsAUsersFileByPath) {
  const auto c = rr::load_chip(write_temp("toy.json", kGood));
  EXPECT_EQ(c.id, "toy");
  EXPECT_DOUBLE_EQ(c.peak("bf16"), 1e14);
  EXPECT_DOUBLE_EQ(c.bandwidth(), 1e12);
  EXPECT_THROW(c.peak("fp32"), ridge::Error);
  EXPECT_THROW(c.link_bandwidth(), ridge::Error);
  EXPECT_THROW(c.bandwidth("l2"), ridge::Error);
}

TEST(Chips, MalformedFilesNameTheFileAndTheField) {
  struct Case {
    const char* name;
    std::string text;
    const char* field;
  };
  auto with = [](const std::string& from, const std::string& to) {
    std::string s = kGood;
    auto p = s.find(from);
    EXPECT_NE(p, std::string::npos) << from;
    return s.replace(p, from.size(), to);
  };
  const Case cases[] = {
      {"notjson.json", "{ not json", "not valid JSON"},
      {"noid.json", with("\"id\": \"toy\",", ""), "'id'"},
      {"kind.json", with("\"gpu\"", "\"fpga\""), "'kind'"},
      {"negbw.json", with("\"value\": 1e12", "\"value\": -5"), "'memory[0].bandwidth.value'"},
      {"zeropeak.json", with("\"value\": 1e14", "\"value\": 0"), "'peak_flops.bf16.value'"},
      {"hugepeak.json", with("\"value\": 1e14", "\"value\": 1e30"), "'peak_flops.bf16.value'"},
      {"strpeak.json", with("\"value\": 1e14", "\"value\": \"lots\""), "'peak_flops.bf16.value'"},
      {"nosource.json", with("\"source\": \"made up\"}}", "\"source\": \"\"}}"), "source"},
      {"baddtype.json", with("\"bf16\":", "\"bf17\":"), "'peak_flops.bf17'"},
      {"nomem.json", with("\"memory\"", "\"memories\""), "'memory'"},
      {"level.json", with("\"hbm\"", "\"sram\""), "'memory[0].level'"},
  };
  for (const auto& c : cases) {
    const auto path = write_temp(c.name, c.text);
    const auto msg = error_of(path);
    EXPECT_NE(msg.find(path), std::string::npos) << c.name << ": " << msg;
    EXPECT_NE(msg.find(c.field), std::string::npos) << c.name << ": " << msg;
  }
  EXPECT_NE(error_of("/nonexistent/chip.json").find("cannot be read"), std::string::npos);
}

TEST(Chips, UnknownNameListsTheChips) {
  const auto msg = error_of("h1000");
  EXPECT_NE(msg.find("h1000"), std::string::npos);
  EXPECT_NE(msg.find("tpu-v5e"), std::string::npos);
}

TEST(Chips, ThisNeedsAProbeResult) {
  const auto dir = fs::temp_directory_path() / "ridge_test_home_empty";
  fs::create_directories(dir);
  fs::remove(dir / "this.json");
  setenv("RIDGE_HOME", dir.c_str(), 1);
  EXPECT_EQ(rr::probe_result_path(), (dir / "this.json").string());
  EXPECT_FALSE(rr::has_probe_result());
  EXPECT_NE(error_of("this").find("ridge probe"), std::string::npos);
  std::ofstream(dir / "this.json") << kGood;
  EXPECT_TRUE(rr::has_probe_result());
  EXPECT_EQ(rr::load_chip("this").id, "toy");
  unsetenv("RIDGE_HOME");
}
