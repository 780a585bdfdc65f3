#include <fmt/format.h>

#include <fstream>
#include <unordered_map>

#include "ridge/bench/memory.hpp"
#include "ridge/bench/result.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/files.hpp"

namespace ridge::memory {

using nlohmann::json;

namespace {

json event_json(const Event& e, const History& h) {
  const auto tag = e.tag >= 0 && static_cast<size_t>(e.tag) < h.tags.size() ? h.tags[static_cast<size_t>(e.tag)]
                                                                              : std::string("?");
  return {{"t_us", static_cast<double>(e.t_ns - h.t0_ns) / 1e3},
          {"action", e.alloc ? "alloc" : "free"},
          {"address", fmt::format("0x{:x}", e.address)},
          {"bytes", e.bytes},
          {"tag", tag},
          {"thread", e.thread}};
}

Event event_from_json(const json& j, const std::string& where, History& h,
                      std::unordered_map<std::string, int32_t>& tag_ids) {
  check(j.is_object(), "{}: expected an event object", where);
  Event e;
  try {
    e.t_ns = h.t0_ns + static_cast<int64_t>(std::llround(j.at("t_us").get<double>() * 1e3));
    const auto action = j.at("action").get<std::string>();
    check(action == "alloc" || action == "free", "{}: action '{}' must be 'alloc' or 'free'", where, action);
    e.alloc = action == "alloc";
    const auto addr = j.at("address").get<std::string>();
    size_t used = 0;
    e.address = std::stoull(addr, &used, 16);
    check(used == addr.size(), "{}: address '{}' is not hexadecimal", where, addr);
    e.bytes = j.at("bytes").get<int64_t>();
    check(e.bytes >= 0, "{}: bytes {} is negative", where, e.bytes);
    const auto tag = j.at("tag").get<std::string>();
    auto it = tag_ids.find(tag);
    if (it == tag_ids.end()) {
      it = tag_ids.emplace(tag, static_cast<int32_t>(h.tags.size())).first;
      h.tags.push_back(tag);
    }
    e.tag = it->second;
    e.thread = j.value("thread", 0);
  } catch (const json::exception& ex) {
    fail("{}: {}", where, ex.what());
  } catch (const std::invalid_argument&) {
    fail("{}: address is not hexadecimal", where);
  } catch (const std::out_of_range&) {
    fail("{}: address out of range", where);
  }
  return e;
}

}  // namespace

json snapshot_json(const History& h) {
  json baseline = json::array(), events = json::array();
  for (const auto& e : h.baseline) baseline.push_back(event_json(e, h));
  for (const auto& e : h.events) events.push_back(event_json(e, h));
  const Timeline tl = replay(h);
  json peak_tags = json::object(), end_tags = json::object();
  for (const auto& [k, v] : tl.live_at_peak) peak_tags[k] = v;
  for (const auto& [k, v] : tl.live_at_end) end_tags[k] = v;
  return {{"format", "ridge-memory-snapshot"},
          {"version", 1},
          {"recording", h.recording},
          {"max_entries", h.max_entries},
          {"dropped", h.dropped},
          {"duration_us", static_cast<double>(h.now_ns - h.t0_ns) / 1e3},
          {"peak_rss_bytes", h.peak_rss_bytes},
          {"machine", bench::machine_context()},
          {"tags", h.tags},
          {"summary",
           {{"start_bytes", tl.start_bytes},
            {"peak_bytes", tl.peak_bytes},
            {"peak_t_us", tl.peak_t_s * 1e6},
            {"live_at_peak", peak_tags},
            {"end_bytes", tl.end_bytes},
            {"live_at_end", end_tags},
            {"allocs", tl.allocs},
            {"frees", tl.frees}}},
          {"baseline", baseline},
          {"events", events}};
}

History history_from_json(const json& doc, const std::string& origin) {
  check(doc.is_object() && doc.value("format", "") == "ridge-memory-snapshot",
        "{}: not a ridge memory snapshot (expected \"format\": \"ridge-memory-snapshot\"; write one with "
        "--memory FILE or ridge::memory::dump_snapshot)",
        origin);
  check(doc.value("version", 0) == 1, "{}: snapshot version {} is not supported (expected 1)", origin,
        doc.value("version", 0));
  History h;
  std::unordered_map<std::string, int32_t> tag_ids;
  try {
    h.recording = doc.value("recording", false);
    h.max_entries = doc.value("max_entries", size_t{0});
    h.dropped = doc.value("dropped", uint64_t{0});
    h.t0_ns = 0;
    h.now_ns = static_cast<int64_t>(std::llround(doc.value("duration_us", 0.0) * 1e3));
    h.peak_rss_bytes = doc.value("peak_rss_bytes", int64_t{0});
    for (const auto& t : doc.at("tags")) {
      const auto s = t.get<std::string>();
      tag_ids.emplace(s, static_cast<int32_t>(h.tags.size()));
      h.tags.push_back(s);
    }
  } catch (const json::exception& e) {
    fail("{}: {}", origin, e.what());
  }
  check(doc.contains("events") && doc["events"].is_array(), "{}: missing the \"events\" array", origin);
  if (doc.contains("baseline")) {
    check(doc["baseline"].is_array(), "{}: \"baseline\" must be an array", origin);
    size_t i = 0;
    for (const auto& e : doc["baseline"])
      h.baseline.push_back(event_from_json(e, fmt::format("{}: baseline[{}]", origin, i++), h, tag_ids));
  }
  size_t i = 0;
  for (const auto& e : doc["events"])
    h.events.push_back(event_from_json(e, fmt::format("{}: events[{}]", origin, i++), h, tag_ids));
  return h;
}

void dump_snapshot(const std::string& path) {
  const History h = history();
  check(h.recording, "memory: dump_snapshot('{}') needs record_history() to be running", path);
  const json doc = snapshot_json(h);
  files::write_text(path, doc.dump() + "\n",
                    "memory snapshot");  // temp + rename: a failure keeps the old file
}

History load_snapshot(const std::string& path) {
  std::ifstream in(path);
  check(in.good(), "memory: cannot read snapshot '{}'", path);
  json doc;
  try {
    doc = json::parse(in);
  } catch (const json::exception& e) {
    fail("memory: '{}' is not valid JSON: {}", path, e.what());
  }
  return history_from_json(doc, path);
}

Timeline replay(const History& h) {
  Timeline tl;
  tl.peak_rss_bytes = h.peak_rss_bytes;
  tl.dropped = h.dropped;
  std::unordered_map<uint64_t, std::pair<int64_t, int32_t>> live;
  std::vector<int64_t> by_tag(h.tags.size() + 1, 0);
  const auto tag_index = [&](int32_t t) {
    return t >= 0 && static_cast<size_t>(t) < h.tags.size() ? static_cast<size_t>(t) : h.tags.size();
  };
  int64_t total = 0;
  for (const auto& e : h.baseline) {
    live[e.address] = {e.bytes, e.tag};
    by_tag[tag_index(e.tag)] += e.bytes;
    total += e.bytes;
  }
  const auto snapshot_tags = [&] {
    std::map<std::string, int64_t> m;
    for (size_t i = 0; i < by_tag.size(); ++i)
      if (by_tag[i] != 0) m[i < h.tags.size() ? h.tags[i] : "?"] += by_tag[i];
    return m;
  };
  tl.start_bytes = total;
  tl.peak_bytes = total;
  tl.live_at_peak = snapshot_tags();
  for (const auto& e : h.events) {
    if (e.alloc) {
      live[e.address] = {e.bytes, e.tag};
      by_tag[tag_index(e.tag)] += e.bytes;
      total += e.bytes;
      ++tl.allocs;
    } else {
      auto it = live.find(e.address);
      // A free whose allocation was never seen (history truncated) cannot be attributed; the
      // baseline makes this impossible for snapshots ridge writes.
      if (it != live.end()) {
        by_tag[tag_index(it->second.second)] -= it->second.first;
        total -= it->second.first;
        live.erase(it);
      }
      ++tl.frees;
    }
    tl.t_s.push_back(static_cast<double>(e.t_ns - h.t0_ns) / 1e9);
    tl.total.push_back(total);
    if (total > tl.peak_bytes) {
      tl.peak_bytes = total;
      tl.peak_t_s = tl.t_s.back();
      tl.live_at_peak = snapshot_tags();
    }
  }
  tl.end_bytes = total;
  tl.live_at_end = snapshot_tags();
  return tl;
}

}  // namespace ridge::memory
