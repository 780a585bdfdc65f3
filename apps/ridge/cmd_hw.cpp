// `ridge hw list` and `ridge hw show CHIP`: the chip database.
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "cli.hpp"
#include "ridge/core.hpp"
#include "ridge/roofline.hpp"
#include "core/check.hpp"
#include "roofline/json.hpp"

namespace {

namespace rr = ridge::roofline;

std::string peak_or_dash(const rr::Chip& c, const char* k) {
  return c.has_peak(k) ? ridge::units::format_flops(c.peak(k)) : "-";
}

void setup(CLI::App& root) {
  auto* hw = root.add_subcommand(
      "hw", "the chip database: published figures with sources, and this machine's probe");
  hw->require_subcommand(1);

  static bool list_json = false;
  auto* list = hw->add_subcommand("list", "every chip: dense peaks, memory bandwidth and size, links");
  list->add_flag("--json", list_json, "print one JSON document");
  list->callback([] {
    std::vector<std::string> ids = rr::chip_ids();
    if (rr::has_probe_result()) ids.push_back("this");
    std::vector<rr::Chip> chips;
    for (const auto& id : ids) chips.push_back(rr::load_chip(id));
    if (list_json) {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& c : chips) j.push_back(to_json(c));
      ridge::cli::print_json({{"location", rr::hardware_location()}, {"chips", j}});
      return;
    }
    // The id column fits the longest id (xeon-8480plus), at least the 9 the GPU and TPU ids need.
    size_t idw = 9;
    for (const auto& c : chips) idw = std::max(idw, c.id.size());
    fmt::print("{:<{}} {:<30} {:>12} {:>12} {:>12} {:>12} {:>12} {:>10} {:>12} {:>8}\n", "id", idw, "name",
               "fp32", "bf16", "fp8", "int8", "memory bw", "capacity", "link/dir", "bf16 I*");
    for (const auto& c : chips) {
      const auto& m = c.memory.front();
      const double ridge_pt = c.has_peak("bf16")   ? c.peak("bf16") / m.bandwidth.value
                              : c.has_peak("fp16") ? c.peak("fp16") / m.bandwidth.value
                                                   : c.peak_flops.begin()->second.value / m.bandwidth.value;
      fmt::print("{:<{}} {:<30} {:>12} {:>12} {:>12} {:>12} {:>12} {:>10} {:>12} {:>8.0f}\n", c.id, idw,
                 c.name.size() > 30 ? c.name.substr(0, 29) + "~" : c.name, peak_or_dash(c, "fp32"),
                 peak_or_dash(c, "bf16"), peak_or_dash(c, "fp8"), peak_or_dash(c, "int8"),
                 ridge::units::format_rate(m.bandwidth.value),
                 m.capacity ? ridge::units::format_bytes(m.capacity->value) : "-",
                 c.intra_node ? ridge::units::format_rate(c.intra_node->bandwidth_per_direction.value) : "-",
                 ridge_pt);
    }
    fmt::print(
        "\ndense peaks (never 'with sparsity'); memory = outermost level (HBM/DRAM); link = intra-node, one "
        "direction;\nbf16 I* = ridge point in FLOP/byte (fp16 for V100). Source of every figure: ridge hw "
        "show "
        "ID. Files: {}\n",
        rr::hardware_location());
  });

  static std::string show_id;
  static bool show_json = false;
  auto* show = hw->add_subcommand("show", "one chip's figures, each with its source");
  show->add_option("chip", show_id, "chip id, 'this', or a chip JSON file")->required();
  show->add_flag("--json", show_json, "print the chip file");
  show->callback([] {
    // The positional argument is the chip: an error about it reads "hw show: ...".
    const auto c =
        ridge::cli::with_flags(ridge::cli::chip_flags("chip"), [] { return rr::load_chip(show_id); });
    if (show_json)
      ridge::cli::print_json(rr::to_json(c));
    else
      fmt::print("{}", rr::describe(c));
  });
}

}  // namespace

RIDGE_COMMAND(hw, setup);
