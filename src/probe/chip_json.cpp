// The probe's result as a chip file, in the same schema as the published chips in hardware/.
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <string_view>

#include "probe/internal.hpp"
#include "ridge/core.hpp"
#include "ridge/probe.hpp"
#include "probe/json.hpp"

namespace ridge::probe {
namespace {

using nlohmann::json;

json sourced(double value, const std::string& source) {
  return {{"value", value}, {"source", source}};
}

json point_json(const SweepPoint& p) {
  return {{"bytes_per_thread", p.bytes_per_thread},
          {"total_bytes", p.total_bytes},
          {"read_bytes_per_s", p.read},
          {"read_write_bytes_per_s", p.read_write},
          {"trials_attempted", p.attempted},
          {"trials_clean", p.clean}};
}

json trials_json(const Trials& t) {
  return {{"median", t.median()},
          {"best", t.best()},
          {"attempted", t.attempted},
          {"clean", t.clean},
          {"trials", t.rates}};
}

json plateau_json(const Plateau& p) {
  return {{"level", p.level},
          {"capacity_bytes", p.capacity},
          {"range_lo_bytes", p.lo},
          {"range_hi_bytes", p.hi},
          {"points", p.points},
          {"read_bytes_per_s", p.read},
          {"read_write_bytes_per_s", p.read_write},
          {"spread", p.spread}};
}

// The features a chip file lists: a subset of cpu::feature_list(), the one list of the features and
// their names, picked by name and written in that list's order.
constexpr std::string_view kChipFeatures[] = {
    "avx2",        "fma",         "avx512f",     "avx512bw", "avx512vl", "avx512dq", "avx512_vbmi",
    "avx512_bf16", "avx512_vnni", "avx512_fp16", "avx_vnni", "amx_bf16", "amx_int8"};

json machine_json() {
  const auto& in = cpu::info();
  json feats = json::array();
  for (const auto& [name, has] : cpu::feature_list(in.features))
    if (has && std::ranges::find(kChipFeatures, std::string_view(name)) != std::end(kChipFeatures))
      feats.push_back(name);
  return {{"vendor", in.vendor},
          {"brand", in.brand},
          {"family", in.family},
          {"model", in.model},
          {"stepping", in.stepping},
          {"logical_cpus", in.logical_cpus},
          {"caches",
           {{"l1d_bytes", in.caches.l1d},
            {"l2_bytes", in.caches.l2},
            {"l3_bytes", in.caches.l3},
            {"l3_shared_by", in.caches.l3_sharing}}},
          {"features", feats}};
}

int64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

}  // namespace

json to_chip_json(const ProbeResult& r) {
  const std::string day = r.date.substr(0, 10);
  const std::string measured_by =
      "measured by ridge probe on " + day + ", median of " + std::to_string(r.trials) + " trials";
  const auto& in = cpu::info();
  json chip;
  chip["id"] = "this";
  chip["name"] = (in.brand.empty() ? std::string("this CPU") : in.brand) + ", " + std::to_string(r.threads) +
                 (r.threads == 1 ? " thread" : " threads") + " (measured)";
  chip["kind"] = "cpu";

  // Per dtype the fastest instruction measured (AMX's tiles where present, else the vector one); its
  // source names that instruction, so a reader sees which unit the roof is.
  json peaks = json::object();
  for (const auto& p : r.peaks) {
    if (peaks.contains(p.kernel.dtype)) continue;
    const PeakResult& roof = *roof_peak(r.peaks, p.kernel.dtype);
    const std::string how = " (" + roof.kernel.instruction + ", " + std::to_string(r.threads) + " threads)";
    peaks[p.kernel.dtype] = sourced(roof.all_threads.median(), measured_by + how);
  }
  chip["peak_flops"] = peaks;

  // Outermost first, as the schema asks; per-core caches' capacities are summed over the threads.
  json mem = json::array();
  const std::pair<const char*, const char*> names[] = {
      {"dram", "DRAM"}, {"l3", "L3"}, {"l2", "L2"}, {"l1", "L1d"}};
  for (const auto& [level, name] : names) {
    const Plateau* pl = nullptr;
    for (const auto& p : r.plateaus)
      if (p.level == level) pl = &p;
    if (!pl) continue;
    json m;
    m["level"] = level;
    m["name"] = name;
    m["bandwidth"] = sourced(pl->read, measured_by + " per size; median over " + std::to_string(pl->points) +
                                           " working-set sizes " + units::format_bytes(double(pl->lo)) +
                                           " .. " + units::format_bytes(double(pl->hi)) + ", " +
                                           std::to_string(r.threads) + " threads, read");
    const int64_t cap = std::string(level) == "dram" ? physical_memory() : pl->capacity;
    if (cap > 0) {
      const std::string lv = level;
      const std::string how =
          lv == "dram" ? " from sysconf (physical memory)"
          : lv == "l3" ? " from cpuid (the L3 instances the threads share)"
                       : " from cpuid, summed over " + std::to_string(r.threads) + " threads' cores";
      m["capacity"] = sourced(double(cap), "read by ridge probe on " + day + how);
    }
    mem.push_back(m);
  }
  chip["memory"] = mem;
  chip["notes"] =
      "This machine as measured by `ridge probe`" + std::string(r.quick ? " --quick" : "") + " on " + r.date +
      ". Peaks: the best of 8-24 independent accumulator chains per dtype, all threads busy; bf16 and "
      "int8: the faster of the vector instruction and, where the CPU has AMX, the tile instruction (four "
      "accumulator tiles); bandwidths: "
      "median over the sizes inside each level's range of an all-threads read sweep (AVX-512 loads when "
      "present). Shared machines are noisy: see measured for every trial.";

  json m;
  m["date"] = r.date;
  m["threads"] = r.threads;
  m["trials"] = r.trials;
  m["quick"] = r.quick;
  m["seconds"] = r.seconds;
  m["machine"] = machine_json();
  json pk = json::array();
  for (const auto& p : r.peaks)
    pk.push_back({{"dtype", p.kernel.dtype},
                  {"roof", roof_peak(r.peaks, p.kernel.dtype) == &p},
                  {"isa", p.kernel.isa},
                  {"instruction", p.kernel.instruction},
                  {"ops_per_instruction", p.kernel.ops_per_instruction},
                  {"chains", p.chains},
                  {"one_thread", trials_json(p.one_thread)},
                  {"all_threads", trials_json(p.all_threads)},
                  {"all_threads_repeats", p.repeats},
                  {"all_threads_first_median", p.first_all_threads}});
  m["peaks"] = pk;
  m["amx"] = amx_status(r);
  m["bandwidth_kernels"] = {
      {"isa", internal::bandwidth_isa()},
      {"read", "each thread streams its own buffer with vector loads into 8 independent accumulators"},
      {"read_write",
       "each thread adds to its own buffer in place with regular stores (bytes read + written)"}};
  json sw = json::array(), sw1 = json::array(), pl = json::array(), pl1 = json::array();
  for (const auto& p : r.sweep) sw.push_back(point_json(p));
  for (const auto& p : r.sweep_one) sw1.push_back(point_json(p));
  for (const auto& p : r.plateaus) pl.push_back(plateau_json(p));
  for (const auto& p : r.plateaus_one) pl1.push_back(plateau_json(p));
  m["sweep"] = sw;
  m["plateaus"] = pl;
  m["sweep_one_thread"] = sw1;
  m["plateaus_one_thread"] = pl1;
  chip["measured"] = m;
  return chip;
}

std::string chip_json_text(const ProbeResult& r, int indent) {
  return to_chip_json(r).dump(indent);
}

}  // namespace ridge::probe
