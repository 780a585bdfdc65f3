// One result schema for every benchmark (so dashboards can read any of them), and its printers:
// an aligned table, JSON lines (one object per row) and CSV.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "ridge/bench/measure.hpp"

namespace ridge::roofline {
struct Chip;
}

namespace ridge::bench {

// A peer measured in the same run (OpenBLAS, oneDNN, memcpy, the math path, ...).
struct Peer {
  std::string name;
  double median_ms = 0;
  double speedup = 0;  // peer median / ridge median: > 1 means ridge is faster
};

struct Row {
  std::string benchmark;                           // "stream", "gemm", ...
  nlohmann::json case_ = nlohmann::json::object();  // shape and parameters; written as "case"
  std::string dtype;                               // "fp32", "bf16", "fp8_e4m3", ...
  int threads = 0;                                 // 0: filled with ridge::get_num_threads()
  std::string isa;                                 // empty: filled with the active ISA path
  double median_ms = 0, min_ms = 0;
  double flops = 0;  // per call; 0 means undefined (no "gflops" written)
  double bytes = 0;  // per call, moved to or from memory; 0 means undefined (no "gbps")
  // From this machine's probed roofline (filled by fill_bound when a probe result exists):
  // min(peak(dtype), intensity * bandwidth(level)) for ops with flops, else bandwidth(level).
  double bound_gflops = 0, bound_gbps = 0, pct_of_bound = 0;
  std::string bound_level;  // memory level to hold the op against ("dram", "l3", ...); "" = outermost
  std::vector<Peer> peers;
  nlohmann::json extra = nlohmann::json::object();  // benchmark-specific fields, merged at top level
  std::string note;
  std::string machine;  // filled with the CPU brand when empty

  double gflops() const { return flops > 0 && median_ms > 0 ? flops / (median_ms * 1e-3) / 1e9 : 0; }
  double gbps() const { return bytes > 0 && median_ms > 0 ? bytes / (median_ms * 1e-3) / 1e9 : 0; }
  // Sets median_ms and min_ms from a measurement.
  void set_time(const Measurement& m);
  // Adds a peer; speedup is computed against this row's median_ms (set the time first).
  void add_peer(const std::string& name, double peer_median_ms);
  void add_peer(const std::string& name, const Measurement& m) { add_peer(name, m.median_ms()); }

  // Keys: benchmark, case, dtype, threads, isa, machine, median_ms, min_ms, [flops, gflops],
  // [bytes, gbps], [bound_gflops, bound_gbps, bound_level, pct_of_bound], peers, note, extras.
  nlohmann::json to_json() const;
  static Row from_json(const nlohmann::json& j);
};

// Fills threads, isa, machine when empty and, when `ridge probe` has written a result, the bound
// fields from it (the probe result is loaded once per process). Returns false when no probe exists.
bool fill_defaults(Row& row);
bool fill_bound(Row& row);
// This machine's probe result (`ridge probe`), loaded once per process; nullptr when there is none.
// A probe file that cannot be read or parsed gives one warning line on stderr naming it, not silence.
const roofline::Chip* probed_chip();

enum class Format { table, json, csv };

// Where rows go. JSON lines are written as each row arrives (a long sweep streams); the table and
// CSV are written by finish(), because their columns depend on every row's case keys and peers.
class Sink {
 public:
  explicit Sink(Format format = Format::table, std::FILE* out = stdout);
  ~Sink();
  Sink(const Sink&) = delete;
  Sink& operator=(const Sink&) = delete;

  void emit(Row row);  // fills defaults and bound first
  void finish();       // idempotent
  const std::vector<Row>& rows() const { return rows_; }
  Format format() const { return format_; }

 private:
  Format format_;
  std::FILE* out_;
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
