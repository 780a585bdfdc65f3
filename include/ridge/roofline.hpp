// ridge roofline: chips (loaded from JSON), operation cost models, bounds, collectives and
// critical batch sizes. Everything here is arithmetic on published or measured figures; nothing
// runs a kernel. The schema of a chip file is described in hardware/README.md.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ridge/core/tensor.hpp"

namespace ridge::roofline {

// A figure and where it comes from (a vendor page, a paper, or "measured by ridge probe").
struct Sourced {
  double value = 0;
  std::string source;
};

struct MemoryLevel {
  std::string level;  // "hbm", "dram", "l3", "l2", "l1"
  std::string name;   // "HBM3", "DDR5", ...
  Sourced bandwidth;  // bytes/s, read
  std::optional<Sourced> capacity;  // bytes
};

struct Link {
  std::string name;                 // "NVLink 4", "ICI", ...
  Sourced bandwidth_per_direction;  // bytes/s, one way
};

struct Chip {
  std::string id, name, kind;  // kind: "gpu", "tpu" or "cpu"
  std::map<std::string, Sourced> peak_flops;  // keys: fp64, fp32, tf32, bf16, fp16, fp8, int8
  std::vector<MemoryLevel> memory;            // outermost (HBM or DRAM) first
  std::optional<Link> intra_node, inter_node;
  std::string notes;
  nlohmann::json measured;  // probe details, null for published chips
  std::string origin;       // the file (or "embedded:<id>") it was loaded from

  // Dense FLOP/s (OP/s for int8) for a dtype; ridge::Error naming the chip and the dtypes it has
  // when it lacks this one. fp8_e4m3 and fp8_e5m2 both map to "fp8", int8 to "int8".
  double peak(DType t) const;
  double peak(const std::string& dtype) const;
  bool has_peak(const std::string& dtype) const;
  // Bytes/s of a memory level ("hbm", "dram", "l3", ...); the outermost level when empty.
  double bandwidth(const std::string& level = "") const;
  const MemoryLevel& memory_level(const std::string& level = "") const;
  // Bytes/s one way of "intra_node" or "inter_node"; ridge::Error if the chip has no such link.
  double link_bandwidth(const std::string& which = "intra_node") const;

  nlohmann::json to_json() const;  // the chip-file schema, round-trips through parse_chip
};

// The chip-file key for a dtype: "fp64", "fp32", "bf16", "fp16", "fp8", "int8" (int32 -> error).
std::string peak_key(DType t);

// "h100", "tpu-v5e", ... (from the hardware database), a path to a JSON chip file, or "this"
// (the probe's result at probe_result_path(); ridge::Error telling to run 'ridge probe' if absent).
Chip load_chip(const std::string& name_or_path);
// Validates a parsed document; errors name `origin` and the offending field.
Chip parse_chip(const nlohmann::json& doc, const std::string& origin);
// Reads and validates a chip file; errors name the file and the field.
Chip load_chip_file(const std::string& path);

// $RIDGE_HOME/this.json, default ~/.cache/ridge/this.json.
std::string probe_result_path();
bool has_probe_result();

// Ids of the chips in the database, sorted ("a100", "b200", ..., "v100").
std::vector<std::string> chip_ids();
// Where the database was found: $RIDGE_HW_DIR, the source tree's hardware/, or "(embedded)".
std::string hardware_location();

}  // namespace ridge::roofline
