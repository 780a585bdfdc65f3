// Plateau detection: which bandwidth each memory level delivers, from a working-set sweep.
// Why medians over ranges set by the cache sizes, rather than fitting change points: a sweep on
// a shared machine has outliers, and the transitions between levels are smeared over a factor of
// about 2 in size (associativity, victim caches, prefetchers), so the robust estimate of a
// level is the median of the points well inside its range, away from both transitions.
#include <algorithm>
#include <limits>

#include "probe/internal.hpp"
#include "ridge/core.hpp"
#include "ridge/probe.hpp"

namespace ridge::probe {

Hierarchy hierarchy_for(int threads) {
  const auto& c = cpu::info().caches;
  const int t = std::max(threads, 1);
  Hierarchy h;
  h.l1 = c.l1d * t;
  h.l2 = c.l2 * t;
  // Threads beyond one L3's sharing group are assumed to spread over further L3 instances.
  const int instances = c.l3_sharing > 0 ? (t + c.l3_sharing - 1) / c.l3_sharing : 1;
  h.l3 = c.l3 * instances;
  return h;
}

std::vector<Plateau> find_plateaus(const std::vector<SweepPoint>& sweep, const Hierarchy& h) {
  struct Level {
    const char* name;
    int64_t cap;
  };
  std::vector<Level> levels;
  for (const Level& l : {Level{"l1", h.l1}, Level{"l2", h.l2}, Level{"l3", h.l3}})
    if (l.cap > 0) levels.push_back(l);
  levels.push_back({"dram", 0});

  constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  auto collect = [&](int64_t lo, int64_t hi, Plateau& p) {
    std::vector<double> rd, rw;
    for (const auto& s : sweep)
      if (s.total_bytes > lo && s.total_bytes <= hi) {
        rd.push_back(s.read);
        rw.push_back(s.read_write);
      }
    p.points = static_cast<int>(rd.size());
    if (rd.empty()) return false;
    p.read = internal::median(rd);
    p.read_write = internal::median(rw);
    const auto [mn, mx] = std::minmax_element(rd.begin(), rd.end());
    p.spread = p.read > 0 ? (*mx - *mn) / p.read : 0;
    p.lo = lo;
    p.hi = hi == kInf ? sweep.back().total_bytes : hi;
    return true;
  };

  std::vector<Plateau> out;
  for (size_t i = 0; i < levels.size(); ++i) {
    const int64_t below = i == 0 ? 0 : levels[i - 1].cap;
    const bool last = i + 1 == levels.size();
    Plateau p;
    p.level = levels[i].name;
    p.capacity = levels[i].cap;
    // Well inside: above twice the level below, at most half of this level.
    const int64_t lo = 2 * below, hi = last ? kInf : levels[i].cap / 2;
    bool found = lo < hi && collect(lo, hi, p);
    // A sparse sweep may leave that core empty: fall back to the whole range between neighbours.
    if (!found) found = collect(below, last ? kInf : levels[i].cap, p);
    if (found) out.push_back(p);
  }
  return out;
}

}  // namespace ridge::probe
