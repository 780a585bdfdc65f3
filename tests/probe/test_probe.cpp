// The probe: its kernels compute what they claim (against scalar references written here), the
// plateau finder recovers known plateaus from synthetic sweeps, quick measurements fall within what
// the hardware can physically do on every kernel the machine supports, and the chip file it writes
// loads back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/amx.hpp"
#include "probe/kernels.hpp"
#include "ridge/core.hpp"
#include "ridge/probe.hpp"
#include "ridge/roofline.hpp"
#include "probe/json.hpp"

namespace {

using namespace ridge;
using namespace ridge::probe;

bool has(const std::string& isa) {
  for (const auto& k : supported_peak_kernels())
    if (k.isa == isa) return true;
  return false;
}

// Reference for the FMA kernels: each chain's lanes iterate x <- fma(x, a, b) from 1 + 0.01 i;
// the kernel returns the sum over chains and lanes.
template <typename T>
double fma_reference(int chains, int64_t iters, int lanes, bool fused) {
  T s = 0;
  for (int i = 0; i < chains; ++i) {
    T x = T(1) + T(0.01) * static_cast<T>(i);
    for (int64_t n = 0; n < iters; ++n)
      x = fused ? std::fma(x, T(0.999999), T(1e-3)) : T(x * T(0.999999)) + T(1e-3);
    s = i == 0 ? x : T(s + x);
  }
  return static_cast<double>(s) * lanes;
}

TEST(ProbeKernels, FmaKernelsComputeTheirRecurrence) {
  for (int chains : {8, 12, 16, 24}) {
    const int64_t iters = 37;
    EXPECT_NEAR(probe::detail::peak_fp32_scalar(chains, iters), fma_reference<float>(chains, iters, 1, false),
                1e-3);
    EXPECT_NEAR(probe::detail::peak_fp64_scalar(chains, iters),
                fma_reference<double>(chains, iters, 1, false), 1e-9);
    if (has("avx2")) {
      // Exactly the chains asked for: the probe counts chains x lanes x 2 FLOP per step (the ymm kernels
      // once capped at 14 and were counted at 16 and 24).
      EXPECT_NEAR(probe::detail::peak_fp32_avx2(chains, iters), fma_reference<float>(chains, iters, 8, true),
                  1e-2);
      EXPECT_NEAR(probe::detail::peak_fp64_avx2(chains, iters), fma_reference<double>(chains, iters, 4, true),
                  1e-9);
    }
    if (has("avx512")) {
      EXPECT_NEAR(probe::detail::peak_fp32_avx512(chains, iters),
                  fma_reference<float>(chains, iters, 16, true), 1e-2);
      EXPECT_NEAR(probe::detail::peak_fp64_avx512(chains, iters),
                  fma_reference<double>(chains, iters, 8, true), 1e-9);
    }
  }
}

TEST(ProbeKernels, DotProductKernelsComputeTheirSums) {
  for (int chains : {8, 12, 16, 24}) {
    const int64_t iters = 100;
    if (has("avx512bf16")) {
      // Each vdpbf16ps adds two products of 2^-4 * 2^-4 to every fp32 lane.
      double want = 0;
      for (int i = 0; i < chains; ++i)
        want += 16.0 * (static_cast<double>(1.0f + 0.01f * static_cast<float>(i)) + iters * 2.0 / 256.0);
      EXPECT_NEAR(probe::detail::peak_bf16_avx512bf16(chains, iters), want, 1e-3 * want);
    }
    if (has("avx512vnni")) {
      // Each vpdpbusd adds four products 3 * -2 to every int32 lane, which starts at the chain index.
      const double want = 16.0 * (chains * (chains - 1) / 2.0 - 24.0 * static_cast<double>(iters) * chains);
      EXPECT_EQ(probe::detail::peak_int8_avx512vnni(chains, iters), want);
    }
  }
}

// The AMX kernels on the emulator (every machine) and on the instructions (where the CPU has AMX): four
// accumulator tiles of 256 elements; each TDPBF16PS adds 32 x 2^-4 x 2^-4 = 1/8 to every fp32 element,
// each TDPBSSD 64 x 3 x -2 = -384 to every int32 element.
TEST(ProbeKernels, AmxKernelsComputeTheirSums) {
  for (int64_t iters : {1, 3, 100}) {
    const double bf16 = 4 * 256 * 0.125 * static_cast<double>(iters);
    const double int8 = 4 * 256 * -384.0 * static_cast<double>(iters);
    EXPECT_EQ(probe::detail::peak_bf16_amxemu(4, iters), bf16);
    EXPECT_EQ(probe::detail::peak_int8_amxemu(4, iters), int8);
    if (has("amx")) {
      EXPECT_EQ(probe::detail::peak_bf16_amx(4, iters), bf16);
      EXPECT_EQ(probe::detail::peak_int8_amx(4, iters), int8);
    }
  }
  // The tiles are released after every call, on the emulator as on the machine.
  EXPECT_FALSE(amx::emu::configured());
  EXPECT_EQ(amx::loaded_config(false), nullptr);
  EXPECT_EQ(amx::loaded_config(true), nullptr);
}

TEST(ProbeKernels, AmxRunsOnlyWhereTheCpuHasIt) {
  bool listed = false;
  for (const auto& k : supported_peak_kernels())
    if (k.isa == "amx") {
      listed = true;
      EXPECT_EQ(k.chains, 4);
      EXPECT_EQ(k.ops_per_instruction, k.dtype == "bf16" ? 16384.0 : 32768.0);
      EXPECT_THROW(measure_peak(k, 8, 1, 1, 1e-4), ridge::Error);  // four tiles, no other count
    }
  EXPECT_EQ(listed, cpu::supported(cpu::Isa::amx));
  EXPECT_EQ(cpu::amx_off_reason().empty(), cpu::supported(cpu::Isa::amx));
  if (!cpu::supported(cpu::Isa::amx)) {
    EXPECT_THROW(measure_peak({"bf16", "amx", "tdpbf16ps tmm", 16384, 4}, 4, 1, 1, 1e-4), ridge::Error);
  }
}

TEST(ProbeKernels, BandwidthKernelsReadAndUpdateEveryByte) {
  const size_t bytes = 64 * 1024 + 512;  // not a power of two
  ridge::Buffer<int64_t> buf(bytes / 8);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<int64_t>(i % 1000);
  double sum = 0;
  for (size_t i = 0; i < buf.size(); ++i) sum += static_cast<double>(buf[i]);

  struct Bw {
    const char* isa;
    double (*read)(const void*, size_t, int64_t);
    void (*update)(void*, size_t, int64_t);
  };
  std::vector<Bw> ks = {{"scalar", probe::detail::read_scalar, probe::detail::update_scalar}};
  if (has("avx2")) ks.push_back({"avx2", probe::detail::read_avx2, probe::detail::update_avx2});
  if (has("avx512")) ks.push_back({"avx512", probe::detail::read_avx512, probe::detail::update_avx512});
  for (const auto& k : ks) {
    SCOPED_TRACE(k.isa);
    EXPECT_EQ(k.read(buf.data(), bytes, 3), 3 * sum);
    k.update(buf.data(), bytes, 2);
    for (size_t i = 0; i < buf.size(); ++i) ASSERT_EQ(buf[i], static_cast<int64_t>(i % 1000) + 2) << i;
    for (size_t i = 0; i < buf.size(); ++i) buf[i] -= 2;
  }
}

// A synthetic sweep: known plateaus per level, transitions smeared over a factor ~2 around each
// capacity (a logistic in log2 size), multiplicative noise and a few wild outliers.
std::vector<SweepPoint> synthetic(const Hierarchy& h, const std::vector<double>& bw, int per_octave,
                                  int64_t top, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0, 0.03);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> caps;
  for (int64_t c : {h.l1, h.l2, h.l3})
    if (c > 0) caps.push_back(static_cast<double>(c));
  std::vector<SweepPoint> out;
  for (int i = 0;; ++i) {
    const double s = 16384.0 * std::pow(2.0, double(i) / per_octave);
    if (s > double(top)) break;
    double v = bw[0];
    for (size_t l = 0; l < caps.size(); ++l) {
      const double w = 1 / (1 + std::exp(-(std::log2(s / caps[l])) * 4));  // 0 below the cap, 1 above
      v = v * (1 - w) + bw[l + 1] * w;
    }
    v *= std::exp(noise(rng));
    if (u(rng) < 0.08) v *= u(rng) < 0.5 ? 0.2 : 4.0;  // a preempted trial or a timer glitch
    SweepPoint p;
    p.total_bytes = static_cast<int64_t>(s);
    p.bytes_per_thread = p.total_bytes;
    p.read = v;
    p.read_write = 0.6 * v;
    out.push_back(p);
  }
  return out;
}

TEST(ProbePlateaus, RecoversKnownPlateausFromNoisySweeps) {
  const Hierarchy h{64 << 10, 2 << 20, 32 << 20};
  const std::vector<double> bw = {600e9, 200e9, 90e9, 35e9};
  for (unsigned seed = 1; seed <= 20; ++seed) {
    const auto sweep = synthetic(h, bw, 4, int64_t{256} << 20, seed);
    const auto pl = find_plateaus(sweep, h);
    ASSERT_EQ(pl.size(), 4u);
    const char* names[] = {"l1", "l2", "l3", "dram"};
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(pl[i].level, names[i]);
      EXPECT_NEAR(pl[i].read, bw[i], 0.1 * bw[i]) << names[i] << " seed " << seed;
      EXPECT_NEAR(pl[i].read_write, 0.6 * bw[i], 0.1 * 0.6 * bw[i]) << names[i];
      EXPECT_GE(pl[i].points, 2) << names[i];
    }
    EXPECT_EQ(pl[3].capacity, 0);
    EXPECT_EQ(pl[2].capacity, h.l3);
  }
}

TEST(ProbePlateaus, SparseSweepFallsBackToTheWholeRange) {
  // One point per octave from 16 KiB leaves nothing inside (32 KiB .. 32 KiB] for a 64 KiB L1.
  const Hierarchy h{64 << 10, 1 << 20, 8 << 20};
  const auto sweep = synthetic(h, {500e9, 150e9, 80e9, 20e9}, 1, int64_t{64} << 20, 7);
  const auto pl = find_plateaus(sweep, h);
  ASSERT_EQ(pl.size(), 4u);
  EXPECT_EQ(pl[0].level, "l1");
  EXPECT_GE(pl[0].points, 1);
  EXPECT_EQ(pl.back().level, "dram");
}

TEST(ProbePlateaus, UnknownLevelsAreSkippedAndEmptyRangesDropped) {
  const Hierarchy h{32 << 10, 512 << 10, 0};  // no L3 reported
  const auto sweep = synthetic(h, {400e9, 120e9, 25e9}, 4, int64_t{16} << 20, 3);
  const auto pl = find_plateaus(sweep, h);
  ASSERT_EQ(pl.size(), 3u);
  EXPECT_EQ(pl[2].level, "dram");
  EXPECT_NEAR(pl[2].read, 25e9, 2.5e9);
  // A sweep that stops inside L2 has no dram plateau at all.
  std::vector<SweepPoint> short_sweep;
  for (const auto& p : sweep)
    if (p.total_bytes <= (256 << 10)) short_sweep.push_back(p);
  const auto pl2 = find_plateaus(short_sweep, h);
  for (const auto& p : pl2) EXPECT_NE(p.level, "dram");
  EXPECT_TRUE(find_plateaus({}, h).empty());
}

// A lower path (RIDGE_ISA) leaves the kernels above it out, so `RIDGE_ISA=avx2 ridge probe` writes the
// AVX2 tier's own roof on a host with wider units; every path keeps its own tier and those below it.
TEST(ProbeMeasure, TheActivePathBoundsTheKernels) {
  const auto tier = [](const std::string& isa) {
    if (isa == "scalar") return cpu::Isa::scalar;
    if (isa == "avx2") return cpu::Isa::avx2;
    if (isa == "amx") return cpu::Isa::amx;
    if (isa == "avx512bf16") return cpu::Isa::avx512bf16;
    return cpu::Isa::avx512;  // avx512, avx512vnni
  };
  for (const cpu::Isa path : cpu::supported_isas()) {
    const cpu::ScopedIsa scope(path);
    SCOPED_TRACE(cpu::isa_name(path));
    bool own_tier = false;
    for (const auto& k : supported_peak_kernels()) {
      EXPECT_LE(static_cast<int>(tier(k.isa)), static_cast<int>(path)) << k.dtype << " " << k.isa;
      own_tier = own_tier || tier(k.isa) == path;
    }
    EXPECT_TRUE(own_tier) << "no kernel of the path's own tier";
  }
}

TEST(ProbeMeasure, QuickPeakIsPositiveAndFiniteForEverySupportedKernel) {
  const auto ks = supported_peak_kernels();
  ASSERT_FALSE(ks.empty());
  for (const auto& k : ks) {
    SCOPED_TRACE(k.dtype + " " + k.isa);
    for (int threads : {1, std::max(1, get_num_threads())}) {
      const Trials t = measure_peak(k, k.chains > 0 ? k.chains : 8, threads, 1, 2e-4, 0);
      ASSERT_EQ(t.rates.size(), 1u);
      EXPECT_GE(t.attempted, 1);
      EXPECT_TRUE(std::isfinite(t.median()) && t.median() > 0);
      EXPECT_GE(t.best(), t.median());
      // A figure beyond what the silicon can issue means the probe counts work it did not do (or
      // times the wrong interval): at most 4 vector instructions per cycle per thread at 6 GHz, far
      // above any x86 core. And the kernel issued at least one instruction per 1000 cycles at
      // 1 GHz: anything lower means the timer or the count is off by orders of magnitude.
      const double per_thread_ceiling = k.ops_per_instruction * 4 * 6e9;
      EXPECT_LE(t.best(), threads * per_thread_ceiling);
      EXPECT_GE(t.median(), k.ops_per_instruction * 1e6);
    }
  }
}

TEST(ProbeMeasure, QuickBandwidthIsPositiveAndFinite) {
  for (bool update : {false, true}) {
    const int threads = std::max(1, get_num_threads());
    const Trials t = measure_bandwidth(48 << 10, threads, update, 2, 2e-4, 0);
    ASSERT_EQ(t.rates.size(), 2u);
    EXPECT_TRUE(std::isfinite(t.median()) && t.median() > 0);
    // 48 KiB per thread sits in L1/L2: at most 4 x 64-byte accesses per cycle per thread at 6 GHz
    // (1.5 TB/s, several times any core's L1), at least 1 byte per ns (a broken count or timer).
    EXPECT_LE(t.best(), threads * 4.0 * 64 * 6e9);
    EXPECT_GE(t.median(), 1e9);
  }
}

TEST(ProbeMeasure, BadArgumentsAreErrors) {
  const auto k = supported_peak_kernels().front();
  EXPECT_THROW(measure_peak(k, 7, 1, 1, 1e-4), ridge::Error);
  EXPECT_THROW(measure_peak(k, 8, 0, 1, 1e-4), ridge::Error);
  EXPECT_THROW(measure_peak(k, 8, 1, 0, 1e-4), ridge::Error);
  EXPECT_THROW(measure_peak({"fp8", "magic", "", 1}, 8, 1, 1, 1e-4), ridge::Error);
  EXPECT_THROW(measure_bandwidth(0, 1, false, 1, 1e-4), ridge::Error);
  EXPECT_THROW(measure_bandwidth(4096, 1, false, 0, 1e-4), ridge::Error);
}

TEST(ProbeChip, TinyRunWritesAChipFileThatLoadsBack) {
  ProbeOptions o;
  o.quick = true;
  o.trials = 1;
  o.max_bytes = 1 << 20;
  o.max_seconds = 2;
  const ProbeResult r = run(o);
  ASSERT_FALSE(r.peaks.empty());
  ASSERT_FALSE(r.sweep.empty());
  const auto j = to_chip_json(r);
  EXPECT_EQ(j["id"], "this");
  EXPECT_EQ(j["kind"], "cpu");
  EXPECT_TRUE(j["name"].is_string());
  ASSERT_TRUE(j["peak_flops"].contains("fp32"));
  for (const auto& [dtype, v] : j["peak_flops"].items()) {
    EXPECT_GT(v["value"].get<double>(), 0) << dtype;
    EXPECT_EQ(v["source"].get<std::string>().rfind("measured by ridge probe on ", 0), 0u) << dtype;
    EXPECT_NE(v["source"].get<std::string>().find("median of 1 trials"), std::string::npos);
  }
  ASSERT_TRUE(j["memory"].is_array());
  ASSERT_FALSE(j["memory"].empty());
  for (const auto& m : j["memory"]) {
    EXPECT_GT(m["bandwidth"]["value"].get<double>(), 0);
    EXPECT_EQ(m["bandwidth"]["source"].get<std::string>().rfind("measured by ridge probe on ", 0), 0u);
  }
  EXPECT_TRUE(j["measured"]["sweep"].is_array());
  EXPECT_EQ(j["measured"]["threads"], r.threads);

  // 1 MiB stops inside the caches: no dram plateau. A chip file needs the outermost level, so
  // give the loader a full-hierarchy result built from the same run.
  ProbeResult full = r;
  full.plateaus.clear();
  for (const char* l : {"l1", "l2", "l3", "dram"}) full.plateaus.push_back({l, 0, 1, 2, 1, 1e10, 5e9, 0.1});
  const auto path = (std::filesystem::temp_directory_path() / "ridge_probe_test" / "this.json").string();
  write_chip_file(to_chip_json(full), path);
  const auto chip = roofline::load_chip_file(path);
  EXPECT_EQ(chip.id, "this");
  EXPECT_EQ(chip.kind, "cpu");
  for (const auto& p : r.peaks)
    EXPECT_DOUBLE_EQ(chip.peak(p.kernel.dtype), roof_peak(r.peaks, p.kernel.dtype)->all_threads.median())
        << p.kernel.dtype;
  // The AMX figures are measured exactly where the CPU has AMX, and the file says which.
  const bool amx = cpu::supported(cpu::Isa::amx);
  EXPECT_EQ(r.amx_absent.empty(), amx);
  int amx_peaks = 0;
  for (const auto& p : r.peaks) amx_peaks += p.kernel.isa == "amx";
  EXPECT_EQ(amx_peaks, amx ? 2 : 0);
  const std::string amx_note = j["measured"]["amx"].get<std::string>();
  EXPECT_EQ(amx_note.rfind(amx ? "measured: " : "not on this machine: ", 0), 0u) << amx_note;
  EXPECT_EQ(chip.memory.front().level, "dram");
  EXPECT_DOUBLE_EQ(chip.bandwidth(), 1e10);
  EXPECT_DOUBLE_EQ(chip.bandwidth("l1"), 1e10);
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

// A peak figure of the synthetic results below: the same all-threads median in every trial.
PeakResult synthetic_peak(const std::string& dtype, const std::string& isa, const std::string& instruction,
                          double ops, double all_threads) {
  PeakResult p;
  p.kernel = {dtype, isa, instruction, ops, isa == "amx" ? 4 : 0};
  p.chains = isa == "amx" ? 4 : 16;
  p.one_thread.rates = {all_threads / 2};
  p.all_threads.rates = {all_threads, all_threads};
  p.one_thread.attempted = p.one_thread.clean = 1;
  p.all_threads.attempted = p.all_threads.clean = 2;
  return p;
}

ProbeResult synthetic_result(bool amx, double amx_bf16, double amx_int8) {
  ProbeResult r;
  r.date = "2026-11-30T12:00:00Z";
  r.threads = 2;
  r.trials = 3;
  r.peaks.push_back(synthetic_peak("fp32", "avx512", "vfmadd231ps zmm", 32, 4.7e11));
  if (amx) r.peaks.push_back(synthetic_peak("bf16", "amx", "tdpbf16ps tmm", 16384, amx_bf16));
  r.peaks.push_back(synthetic_peak("bf16", "avx512bf16", "vdpbf16ps zmm", 64, 2.3e11));
  if (amx) r.peaks.push_back(synthetic_peak("int8", "amx", "tdpbssd tmm", 32768, amx_int8));
  r.peaks.push_back(synthetic_peak("int8", "avx512vnni", "vpdpbusd zmm", 128, 4.6e11));
  if (!amx) r.amx_absent = "cpuid has no amx_tile, amx_bf16 and amx_int8";
  return r;
}

std::string source_of(const nlohmann::json& chip, const std::string& dtype) {
  return chip["peak_flops"][dtype]["source"].get<std::string>();
}

// The chip file's bf16 and int8 are the fastest instruction's, whichever it is, named in the source.
TEST(ProbeChip, PeakIsTheFastestInstructionPerDtype) {
  {
    const ProbeResult r = synthetic_result(true, 5e12, 1e13);
    EXPECT_EQ(roof_peak(r.peaks, "bf16")->kernel.isa, "amx");
    EXPECT_EQ(roof_peak(r.peaks, "fp32")->kernel.isa, "avx512");
    EXPECT_EQ(roof_peak(r.peaks, "fp64"), nullptr);
    const auto j = to_chip_json(r);
    EXPECT_EQ(j["peak_flops"]["bf16"]["value"].get<double>(), 5e12);
    EXPECT_EQ(j["peak_flops"]["int8"]["value"].get<double>(), 1e13);
    EXPECT_EQ(j["peak_flops"]["fp32"]["value"].get<double>(), 4.7e11);
    EXPECT_EQ(source_of(j, "bf16"),
              "measured by ridge probe on 2026-11-30, median of 3 trials (tdpbf16ps tmm, 2 threads)");
    EXPECT_NE(source_of(j, "int8").find("(tdpbssd tmm, 2 threads)"), std::string::npos);
    EXPECT_NE(source_of(j, "fp32").find("(vfmadd231ps zmm, 2 threads)"), std::string::npos);
    // measured.peaks keeps every figure, and marks the one the chip file took.
    int roofs = 0;
    for (const auto& p : j["measured"]["peaks"]) {
      roofs += p["roof"].get<bool>();
      EXPECT_EQ(p["roof"].get<bool>(), p["isa"] == "amx" || p["dtype"] == "fp32") << p["instruction"];
    }
    EXPECT_EQ(roofs, 3);
    EXPECT_EQ(j["measured"]["amx"].get<std::string>().rfind("measured: ", 0), 0u);
  }
  {
    // No AMX: today's vector figures, as before.
    const ProbeResult r = synthetic_result(false, 0, 0);
    const auto j = to_chip_json(r);
    EXPECT_EQ(j["peak_flops"]["bf16"]["value"].get<double>(), 2.3e11);
    EXPECT_EQ(j["peak_flops"]["int8"]["value"].get<double>(), 4.6e11);
    EXPECT_NE(source_of(j, "bf16").find("(vdpbf16ps zmm, 2 threads)"), std::string::npos);
    EXPECT_NE(source_of(j, "int8").find("(vpdpbusd zmm, 2 threads)"), std::string::npos);
    EXPECT_EQ(j["measured"]["amx"], "not on this machine: cpuid has no amx_tile, amx_bf16 and amx_int8");
    EXPECT_EQ(amx_status(r), j["measured"]["amx"].get<std::string>());
  }
  {
    // A tile figure that came out slower (a throttled or disturbed run) does not lower the roof.
    const ProbeResult r = synthetic_result(true, 1e11, 1e13);
    const auto j = to_chip_json(r);
    EXPECT_EQ(j["peak_flops"]["bf16"]["value"].get<double>(), 2.3e11);
    EXPECT_NE(source_of(j, "bf16").find("vdpbf16ps zmm"), std::string::npos);
    EXPECT_NE(source_of(j, "int8").find("tdpbssd tmm"), std::string::npos);
  }
  {
    // bf16 widened onto the fp32 FMAs: the roof where it beats vdpbf16ps (Intel's cores), not where
    // vdpbf16ps is faster (AMD's Zen 4).
    for (const double widened : {4.6e11, 1.1e11}) {
      ProbeResult r = synthetic_result(false, 0, 0);
      r.peaks.push_back(synthetic_peak("bf16", "avx512", "vfmadd231ps zmm, widened", 32, widened));
      const auto j = to_chip_json(r);
      EXPECT_EQ(j["peak_flops"]["bf16"]["value"].get<double>(), std::max(widened, 2.3e11));
      EXPECT_NE(source_of(j, "bf16").find(widened > 2.3e11 ? "(vfmadd231ps zmm, widened, 2 threads)"
                                                           : "(vdpbf16ps zmm, 2 threads)"),
                std::string::npos)
          << source_of(j, "bf16");
    }
  }
}

// The probe measures bf16 widened onto the FMAs wherever the FMA kernels run, as one more bf16 figure.
TEST(ProbeKernels, Bf16WidenedIsMeasuredWhereTheFmaKernelsRun) {
  int widened = 0;
  for (const auto& k : supported_peak_kernels())
    if (k.widened) {
      ++widened;
      EXPECT_EQ(k.dtype, "bf16");
      EXPECT_TRUE(k.isa == "avx512" || k.isa == "avx2") << k.isa;
    }
  EXPECT_EQ(widened, has("avx512") + has("avx2"));
}

TEST(ProbeChip, WriteErrorsNameThePath) {
  try {
    write_chip_file(nlohmann::json::object(), "/proc/ridge-no-such-dir/this.json");
    FAIL() << "expected ridge::Error";
  } catch (const ridge::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/ridge-no-such-dir/this.json"), std::string::npos);
    EXPECT_EQ(e.argument(), "path");  // the function's argument; `ridge probe` names it -o
  }
}

TEST(ProbeChip, DefaultPathFollowsRidgeHome) {
  const char* old = std::getenv("RIDGE_HOME");
  const std::string saved = old ? old : "";
  setenv("RIDGE_HOME", "/tmp/ridge-home-test", 1);
  EXPECT_EQ(default_output_path(), "/tmp/ridge-home-test/this.json");
  EXPECT_EQ(default_output_path(), roofline::probe_result_path());
  if (old)
    setenv("RIDGE_HOME", saved.c_str(), 1);
  else
    unsetenv("RIDGE_HOME");
}

}  // namespace
