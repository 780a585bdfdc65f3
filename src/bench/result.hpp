// One result schema for every benchmark (so dashboards can read any of them), and its printers:
// an aligned table, JSON lines (one object per row) and CSV.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "ridge/bench/measure.hpp"

namespace ridge::bench {

// A peer measured in the same run (OpenBLAS, oneDNN, memcpy, the math path, ...).
struct Peer {
  std::string name;
  double median_ms = 0;
  double speedup = 0;  // peer median / ridge median: > 1 means ridge is faster
};

struct Row {
  std::string benchmark;                            // "stream", "gemm", ...
  nlohmann::json case_ = nlohmann::json::object();  // shape and parameters; written as "case"
  std::string dtype;                                // "fp32", "bf16", "fp8_e4m3", ...
  int threads = 0;                                  // 0: filled with ridge::get_num_threads()
  std::string isa;                                  // empty: filled with the active ISA path
  double median_ms = 0, min_ms = 0;
  double flops = 0;  // per call; 0 means undefined (no "gflops" written)
  double bytes = 0;  // per call, moved to or from memory; 0 means undefined (no "gbps")
  // The roof the row is held against, filled by the caller's row hook (ridge::report::hold_row
  // holds it against a chip: min(peak(dtype), intensity * bandwidth(level)) for ops with flops,
  // else bandwidth(level)); bench itself reads no chip.
  double bound_gflops = 0, bound_gbps = 0, pct_of_bound = 0;
  std::string bound_level;  // memory level to hold the op against ("dram", "l3", ...); "" = chosen by cache
  // Where the operands come from at each timed call: "cold" (the benchmark rotated through enough
  // copies that they come from DRAM, as in a model where other layers run in between), "warm"
  // (the same operands every call: they stay in whatever cache holds them), "" (not stated). With
  // bound_level empty, report::hold_row holds the row against report::memory_level_for(chip, cache,
  // bytes): a warm row against the level its working set fits in, any other the outermost.
  std::string cache;
  // How far the samples disagree (spread_of, set by set_time): figures of a machine whose speed
  // changed during the run are flagged unstable.
  double spread_pct = 0;
  bool unstable = false;
  std::vector<Peer> peers;
  nlohmann::json extra = nlohmann::json::object();  // benchmark-specific fields, merged at top level
  std::string note;
  std::string machine;  // filled with the CPU brand when empty

  double gflops() const { return flops > 0 && median_ms > 0 ? flops / (median_ms * 1e-3) / 1e9 : 0; }
  double gbps() const { return bytes > 0 && median_ms > 0 ? bytes / (median_ms * 1e-3) / 1e9 : 0; }
  // Above its roof: a roof is an upper bound, so the roof is wrong (a probe that under-reported)
  // or the working set came from a faster level than the one the row is held against.
  bool above_roof() const { return pct_of_bound > 100.0 * (1.0 + kAboveRoofTolerance); }
  static constexpr double kAboveRoofTolerance = 0.03;  // timing noise and clock-rate wobble
  // Sets median_ms, min_ms, spread_pct and unstable from a measurement.
  void set_time(const Measurement& m);
  // Adds a peer; speedup is computed against this row's median_ms (set the time first).
  void add_peer(const std::string& name, double peer_median_ms);
  void add_peer(const std::string& name, const Measurement& m) { add_peer(name, m.median_ms()); }

  // One key per field (kFields in result.cpp lists them, with when each is written: undefined
  // figures and empty optional texts are left out), then the extras under keys no field has.
  nlohmann::json to_json() const;
  static Row from_json(const nlohmann::json& j);
};

// Fills threads, isa and machine when empty (the bound fields are the row hook's business).
void fill_defaults(Row& row);

// Called on every row a Sink emits, after fill_defaults and before the row is written: how a caller
// above bench adds what bench does not know (ridge::report::hold_rows_against fills the bound).
using RowHook = std::function<void(Row&)>;

// Cold operands: how many copies of a call's operands (bytes_per_copy) to rotate through so that
// the copies together span at least `factor` x the last-level cache, and each call finds its
// operands evicted by the calls before it. At most max_copies (a tiny operand set would need
// millions); cold is false when that cap leaves the footprint short of factor x llc_bytes.
struct Rotation {
  int64_t copies = 1;
  double footprint = 0;  // copies * bytes_per_copy
  bool cold = false;
};
Rotation plan_rotation(double bytes_per_copy, int64_t llc_bytes, double factor = 4.0,
                       int64_t max_copies = 4096);
// (llc_bytes: cpu::cache_sizes().last_level for this machine.)

enum class Format { table, json, csv };

// Where rows go. JSON lines are written as each row arrives (a long sweep streams); the table and
// CSV are written by finish(), because their columns depend on every row's case keys and peers.
class Sink {
 public:
  explicit Sink(Format format = Format::table, std::FILE* out = stdout, RowHook hook = {});
  ~Sink();
  Sink(const Sink&) = delete;
  Sink& operator=(const Sink&) = delete;

  void emit(Row row);  // fills defaults and runs the hook first
  void finish();       // idempotent
  // Prints nothing from now on, not even "(no results)": an MPI rank other than 0, whose rows rank 0 prints.
  void discard() { finished_ = true; }
  const std::vector<Row>& rows() const { return rows_; }
  Format format() const { return format_; }

 private:
  Format format_;
  std::FILE* out_;
  RowHook hook_;
  std::vector<Row> rows_;
  bool finished_ = false;
};

// Renderers, usable without a Sink.
std::string to_table(const std::vector<Row>& rows);
std::string to_csv(const std::vector<Row>& rows);
std::string to_json_lines(const std::vector<Row>& rows);

// What machine and build produced the results: cpu brand, logical cpus, caches, ISA paths.
nlohmann::json machine_context();

}  // namespace ridge::bench
