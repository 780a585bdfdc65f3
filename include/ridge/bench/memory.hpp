// The memory profiler's files and analysis, on top of the history the allocator records
// (ridge/core/memory.hpp): the PyTorch model of record_history -> dump_snapshot -> stop_recording.
//
//   ridge::memory::record_history(1'000'000);
//   ... work ...
//   ridge::memory::dump_snapshot("mem.json");   // then: ridge memory show mem.json
//   ridge::memory::stop_recording();            //       ridge memory plot mem.json -o mem.png
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ridge/core/memory.hpp"

namespace ridge::memory {

// Snapshot document: {"format": "ridge-memory-snapshot", "version": 1, "tags": [...],
// "baseline": [event...], "events": [{"t_us", "action": "alloc"|"free", "address": "0x..", "bytes",
// "tag", "thread"}...], "dropped", "max_entries", "peak_rss_bytes", "summary": {...}}; times in
// microseconds since recording started.
// The document as JSON text (one line), and back; errors name `origin` and the field. The nlohmann-json
// forms (snapshot_json, history_from_json) are in the private header src/bench/json.hpp.
std::string snapshot_json_text(const History& h);
History history_from_json_text(const std::string& text, const std::string& origin);
// Writes the current history; ridge::Error if not recording or the file cannot be written.
void dump_snapshot(const std::string& path);
// Reads a snapshot file; ridge::Error naming the file and the field on bad input.
History load_snapshot(const std::string& path);

// Live bytes over time, replayed from a history.
struct Timeline {
  std::vector<double> t_s;     // event times since recording started
  std::vector<int64_t> total;  // live bytes after each event
  int64_t start_bytes = 0;     // live at the start (baseline)
  int64_t peak_bytes = 0;
  double peak_t_s = 0;
  std::map<std::string, int64_t> live_at_peak;  // by tag
  std::map<std::string, int64_t> live_at_end;   // by tag
  int64_t end_bytes = 0;
  size_t allocs = 0, frees = 0;
  int64_t peak_rss_bytes = 0;
  uint64_t dropped = 0;
};
Timeline replay(const History& h);

}  // namespace ridge::memory
