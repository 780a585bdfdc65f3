// Figures as text: one cost's bound on a chip, and one chip's figures with their sources.
#include <fmt/format.h>

#include <cmath>

#include "ridge/core/units.hpp"
#include "ridge/roofline.hpp"

namespace ridge::roofline {
namespace {

std::string flop_count(double x) {
  std::string s = units::format_flops(x);
  return s.substr(0, s.size() - 2);  // "550 GFLOP/s" -> "550 GFLOP"
}

std::string intensity_text(double i) {
  return std::isfinite(i) ? fmt::format("{:.4g} FLOP/B", i) : "-";
}

}  // namespace

std::string describe(const Cost& cost, const Bound& b, const Chip& chip) {
  std::string s;
  s += fmt::format("{} {} on {} ({})\n", cost.op, cost.shape, chip.id, chip.name);
  s += fmt::format("  FLOPs            {} at {} ({})\n", flop_count(b.flops), cost.compute,
                   units::format_flops(b.peak));
  auto traffic = [&](const char* title, const std::vector<Traffic>& v, double total, bool link) {
    if (v.empty()) return;
    s += fmt::format("  {:<16} {}\n", title, units::format_bytes(total));
    for (const auto& t : v)
      s += fmt::format("    {:<28} {:<9} {:>10} elements {:>10}  {}\n", t.name, t.dtype,
                       units::format_count(static_cast<double>(t.elements)),
                       units::format_bytes(static_cast<double>(t.bytes)),
                       link      ? "sent"
                       : t.write ? "write"
                                 : "read");
  };
  traffic(fmt::format("bytes ({})", b.level).c_str(), cost.memory, b.memory_bytes, false);
  traffic(fmt::format("bytes ({})", b.link).c_str(), cost.link, b.link_bytes, true);
  s += fmt::format("  intensity        {}   (ridge point of {} at {}: {:.4g} FLOP/B)\n",
                   intensity_text(b.intensity), chip.id, b.level, b.ridge_intensity);
  s += fmt::format("  T_math           {}   (FLOPs / {})\n", units::format_seconds(b.t_math),
                   units::format_flops(b.peak));
  if (!cost.memory.empty())
    s += fmt::format("  T_memory         {}   (bytes / {} {})\n", units::format_seconds(b.t_memory),
                     units::format_rate(b.bandwidth), b.level);
  if (!cost.link.empty())
    s += fmt::format("  T_link           {}   (bytes / {} {} per direction)\n",
                     units::format_seconds(b.t_link), units::format_rate(b.link_bandwidth), b.link);
  s += fmt::format("  T_comm           {}\n", units::format_seconds(b.t_comm));
  s += fmt::format("  T_lower = max    {}\n", units::format_seconds(b.t_lower));
  s += fmt::format("  T_upper = sum    {}\n", units::format_seconds(b.t_upper));
  s += fmt::format("  bound by         {}\n", b.binding == "memory" ? "memory (" + b.level + ")"
                                              : b.binding == "link" ? "link (" + b.link + ")"
                                                                    : std::string("compute"));
  s += fmt::format("  attainable       {} = {:.1f}% of peak {}\n", units::format_flops(b.attainable_flops),
                   100 * b.fraction_of_peak, cost.compute);
  return s;
}

std::string describe(const Chip& c) {
  std::string s;
  s += fmt::format("{} — {} ({})\n", c.id, c.name, c.kind);
  s += "peak FLOP/s (dense)\n";
  for (const auto& [k, v] : c.peak_flops)
    s += fmt::format("  {:<6} {:>14}   {}\n", k, units::format_flops(v.value), v.source);
  s += "memory (outermost first)\n";
  for (const auto& m : c.memory) {
    s += fmt::format("  {:<6} {:<8} {:>12}   {}\n", m.level, m.name, units::format_rate(m.bandwidth.value),
                     m.bandwidth.source);
    if (m.capacity)
      s += fmt::format("  {:<6} {:<8} {:>12}   {}\n", "", "capacity", units::format_bytes(m.capacity->value),
                       m.capacity->source);
  }
  if (c.intra_node || c.inter_node) {
    s += "links (per direction)\n";
    for (const auto& [nm, l] : {std::pair{"intra", &c.intra_node}, std::pair{"inter", &c.inter_node}})
      if (*l)
        s += fmt::format("  {:<6} {:<8} {:>12}   {} — {}\n", nm, "",
                         units::format_rate((*l)->bandwidth_per_direction.value), (*l)->name,
                         (*l)->bandwidth_per_direction.source);
  }
  const auto& hbm = c.memory.front();
  s += "ridge points (peak / outermost bandwidth)\n";
  for (const auto& [k, v] : c.peak_flops)
    s += fmt::format("  {:<6} {:.4g} FLOP/B\n", k, v.value / hbm.bandwidth.value);
  if (!c.notes.empty()) s += "notes: " + c.notes + "\n";
  s += "file: " + c.origin + "\n";
  return s;
}

}  // namespace ridge::roofline
