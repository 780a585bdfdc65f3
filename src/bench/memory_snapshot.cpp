#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <unordered_map>

#include "ridge/bench/memory.hpp"
#include "bench/result.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/input.hpp"
#include "ridge/core/files.hpp"
#include "core/check.hpp"
#include "core/json.hpp"
#include "bench/json.hpp"

namespace ridge::memory {

using nlohmann::json;

namespace {

json event_json(const Event& e, const History& h) {
  const auto tag = e.tag >= 0 && static_cast<size_t>(e.tag) < h.tags.size()
                       ? h.tags[static_cast<size_t>(e.tag)]
                       : std::string("?");
  return {{"t_us", static_cast<double>(e.t_ns - h.t0_ns) / 1e3},
          {"action", e.alloc ? "alloc" : "free"},
          {"address", fmt::format("0x{:x}", e.address)},
          {"bytes", e.bytes},
          {"tag", tag},
          {"thread", e.thread}};
}

// Sizes and times beyond these are not from a real run: an allocation above 2^60 bytes (an exabyte)
// and a time beyond 10^15 us (31 years) would only overflow the sums made from them.
constexpr int64_t kMaxEventBytes = int64_t{1} << 60;
constexpr double kMaxMicroseconds = 1e15;

double microseconds(const json& v, const std::string& path, const std::string& where) {
  const double t = input::number(v, path, where);
  check(std::fabs(t) <= kMaxMicroseconds, "{}: field '{}' is {:g} us, beyond the plausible {:g} us", where,
        path, t, kMaxMicroseconds);
  return t;
}

Event event_from_json(const json& j, const std::string& where, History& h,
                      std::unordered_map<std::string, int32_t>& tag_ids) {
  check(j.is_object(), "{}: expected an event object", where);
  Event e;
  e.t_ns = h.t0_ns + static_cast<int64_t>(
                         std::llround(microseconds(input::field(j, "t_us", "", where), "t_us", where) * 1e3));
  const auto action = input::string(input::field(j, "action", "", where), "action", where);
  check(action == "alloc" || action == "free", "{}: action '{}' must be 'alloc' or 'free'", where, action);
  e.alloc = action == "alloc";
  const auto addr = input::string(input::field(j, "address", "", where), "address", where);
  try {
    size_t used = 0;
    e.address = std::stoull(addr, &used, 16);
    check(used == addr.size() && addr.find('-') == std::string::npos, "{}: address '{}' is not hexadecimal",
          where, addr);
  } catch (const std::invalid_argument&) {
    fail("{}: address '{}' is not hexadecimal", where, addr);
  } catch (const std::out_of_range&) {
    fail("{}: address '{}' is above 64 bits", where, addr);
  }
  const json& b = input::field(j, "bytes", "", where);
  check(!(b.is_number_unsigned() && b.get<uint64_t>() > static_cast<uint64_t>(kMaxEventBytes)),
        "{}: field 'bytes' is {}, above the plausible 2^60", where, b.dump());
  e.bytes = input::integer(b, "bytes", where);
  check(e.bytes >= 0 && e.bytes <= kMaxEventBytes, "{}: field 'bytes' is {}, outside 0 .. 2^60", where,
        e.bytes);
  const auto tag = input::string(input::field(j, "tag", "", where), "tag", where);
  auto it = tag_ids.find(tag);
  if (it == tag_ids.end()) {
    it = tag_ids.emplace(tag, static_cast<int32_t>(h.tags.size())).first;
    h.tags.push_back(tag);
  }
  e.tag = it->second;
  if (j.contains("thread")) {
    const int64_t t = input::integer(j.at("thread"), "thread", where);
    check(t >= INT32_MIN && t <= INT32_MAX, "{}: field 'thread' is {}, not a thread id", where, t);
    e.thread = static_cast<int32_t>(t);
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
  check(doc.is_object() && doc.contains("format") && doc.at("format") == "ridge-memory-snapshot",
        "{}: not a ridge memory snapshot (expected \"format\": \"ridge-memory-snapshot\"; write one with "
        "--memory FILE or ridge::memory::dump_snapshot)",
        origin);
  const int64_t version = doc.contains("version") ? input::integer(doc.at("version"), "version", origin) : 0;
  check(version == 1, "{}: snapshot version {} is not supported (expected 1)", origin, version);
  History h;
  std::unordered_map<std::string, int32_t> tag_ids;
  auto count = [&](const char* key) -> int64_t {
    if (!doc.contains(key)) return 0;
    const int64_t v = input::integer(doc.at(key), key, origin);
    check(v >= 0, "{}: field '{}' is {}, must not be negative", origin, key, v);
    return v;
  };
  if (doc.contains("recording")) {
    check(doc.at("recording").is_boolean(), "{}: field 'recording' must be true or false", origin);
    h.recording = doc.at("recording").get<bool>();
  }
  h.max_entries = static_cast<size_t>(count("max_entries"));
  h.dropped = static_cast<uint64_t>(count("dropped"));
  h.t0_ns = 0;
  if (doc.contains("duration_us")) {
    const double d = microseconds(doc.at("duration_us"), "duration_us", origin);
    check(d >= 0, "{}: field 'duration_us' is {:g}, must not be negative", origin, d);
    h.now_ns = static_cast<int64_t>(std::llround(d * 1e3));
  }
  h.peak_rss_bytes = count("peak_rss_bytes");
  const json& tags = input::field(doc, "tags", "", origin);
  check(tags.is_array(), "{}: field 'tags' must be an array of strings", origin);
  for (size_t i = 0; i < tags.size(); ++i) {
    const auto s = input::string(tags[i], fmt::format("tags[{}]", i), origin);
    tag_ids.emplace(s, static_cast<int32_t>(h.tags.size()));
    h.tags.push_back(s);
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

  // A consistent history never allocates an address that is live, and frees only live addresses
  // (unless entries were dropped, when a free's allocation may be among them).
  std::unordered_map<uint64_t, size_t> live;
  for (const auto& e : h.baseline) {
    check(live.emplace(e.address, 0).second, "{}: baseline lists address 0x{:x} twice", origin, e.address);
  }
  for (size_t k = 0; k < h.events.size(); ++k) {
    const auto& e = h.events[k];
    if (e.alloc) {
      check(
          live.emplace(e.address, k).second,
          "{}: events[{}] allocates address 0x{:x} again while it is still live (not a consistent snapshot)",
          origin, k, e.address);
    } else if (live.erase(e.address) == 0) {
      check(h.dropped > 0,
            "{}: events[{}] frees address 0x{:x}, which is not live (not a consistent snapshot)", origin, k,
            e.address);
    }
  }
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
  return history_from_json(input::read_json_file(path, "memory snapshot"),
                           fmt::format("memory snapshot '{}'", path));
}

namespace {

int64_t add_bytes(int64_t total, int64_t delta) {
  int64_t r = 0;
  check(!__builtin_add_overflow(total, delta, &r),
        "memory: live bytes overflow 2^63 (the history's sizes are not "
        "from a real run)");
  return r;
}

}  // namespace

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
  // Applies one event to `live`, `by_tag` and `total`; an allocation of a live address replaces it,
  // and a free whose allocation was never seen (history truncated) cannot be attributed.
  const auto apply = [&](const Event& e) {
    if (e.alloc) {
      auto [it, fresh] = live.try_emplace(e.address, e.bytes, e.tag);
      if (!fresh) {
        by_tag[tag_index(it->second.second)] -= it->second.first;
        total -= it->second.first;
        it->second = {e.bytes, e.tag};
      }
      by_tag[tag_index(e.tag)] = add_bytes(by_tag[tag_index(e.tag)], e.bytes);
      total = add_bytes(total, e.bytes);
    } else if (auto it = live.find(e.address); it != live.end()) {
      by_tag[tag_index(it->second.second)] -= it->second.first;
      total -= it->second.first;
      live.erase(it);
    }
  };
  const auto snapshot_tags = [&] {
    std::map<std::string, int64_t> m;
    for (size_t i = 0; i < by_tag.size(); ++i)
      if (by_tag[i] != 0) m[i < h.tags.size() ? h.tags[i] : "?"] += by_tag[i];
    return m;
  };
  for (const auto& e : h.baseline) apply(e);
  tl.start_bytes = total;
  tl.peak_bytes = total;
  // First pass: the totals and where the peak is. The by-tag table at the peak is built once
  // afterwards, by replaying up to the peak: building it at every new peak is quadratic in tags.
  size_t peak_events = 0;  // events applied when the peak was reached
  tl.t_s.reserve(h.events.size());
  tl.total.reserve(h.events.size());
  for (size_t i = 0; i < h.events.size(); ++i) {
    const auto& e = h.events[i];
    apply(e);
    ++(e.alloc ? tl.allocs : tl.frees);
    tl.t_s.push_back(static_cast<double>(e.t_ns - h.t0_ns) / 1e9);
    tl.total.push_back(total);
    if (total > tl.peak_bytes) {
      tl.peak_bytes = total;
      tl.peak_t_s = tl.t_s.back();
      peak_events = i + 1;
    }
  }
  tl.end_bytes = total;
  tl.live_at_end = snapshot_tags();
  live.clear();
  std::fill(by_tag.begin(), by_tag.end(), 0);
  total = 0;
  for (const auto& e : h.baseline) apply(e);
  for (size_t i = 0; i < peak_events; ++i) apply(h.events[i]);
  tl.live_at_peak = snapshot_tags();
  return tl;
}

std::string snapshot_json_text(const History& h) {
  return snapshot_json(h).dump();
}

History history_from_json_text(const std::string& text, const std::string& origin) {
  return history_from_json(input::parse_json(text, origin), origin);
}

}  // namespace ridge::memory
