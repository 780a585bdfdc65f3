#include "ridge/bench/trace.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <vector>

#include "bench/result.hpp"
#include "ridge/core/env.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/files.hpp"

#if defined(RIDGE_HAVE_NVTX)
#include <nvtx3/nvToolsExt.h>
#include "core/check.hpp"
#include "bench/json.hpp"
#endif

namespace ridge::trace {

namespace hooks = memory::hooks;

namespace {

struct Event {
  char ph;  // 'X' complete, 'b'/'e' async begin/end, 'i' instant
  int64_t ts_ns;
  int64_t dur_ns;
  uint64_t id;
  uint32_t colour;
  bool has_payload;
  double payload;
  std::string name;
  std::string cat;
};

// One buffer per thread, owned by the global list so events outlive the thread that wrote them.
// Each has its own mutex: uncontended on the recording path (only its thread writes), taken by the
// writer of the trace file, so no event is lost or torn whichever thread is still running.
struct ThreadBuffer {
  std::mutex mu;
  int32_t tid = 0;
  std::string name;
  std::vector<Event> events;
};

struct Global {
  std::mutex mu;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  std::atomic<int64_t> t0{0};
  std::atomic<uint64_t> next_id{1};
  std::atomic<size_t> max_events{0};
  std::atomic<size_t> count{0};
  std::atomic<uint64_t> dropped{0};
  std::atomic<bool> recording{false};
};

Global& global() {
  static Global* g = new Global;  // leaked: threads may record during static destruction
  return *g;
}

ThreadBuffer& my_buffer() {
  thread_local std::shared_ptr<ThreadBuffer> buf = [] {
    auto b = std::make_shared<ThreadBuffer>();
    b->tid = hooks::thread_id();
    auto& g = global();
    std::lock_guard lock(g.mu);
    g.buffers.push_back(b);
    return b;
  }();
  return *buf;
}

struct Open {
  const char* name;
  int64_t t0;
  unsigned did;
};
thread_local std::vector<Open> t_open;

void append(Event e) {
  auto& g = global();
  const size_t cap = g.max_events.load(std::memory_order_relaxed);
  if (cap > 0 && g.count.fetch_add(1, std::memory_order_relaxed) >= cap) {
    g.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (cap == 0) g.count.fetch_add(1, std::memory_order_relaxed);
  auto& b = my_buffer();
  std::lock_guard lock(b.mu);
  b.events.push_back(std::move(e));
}

#if defined(RIDGE_HAVE_NVTX)
bool nvtx_on(unsigned bits) {
  return (bits & hooks::kNvtx) != 0;
}

nvtxEventAttributes_t nvtx_attributes(const char* message, uint32_t colour) {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = message;
  if (colour != color::none) {
    a.colorType = NVTX_COLOR_ARGB;
    a.color = colour;
  }
  return a;
}
#endif

// NVTX forwarding is on when a tool (Nsight Systems) injected itself, so `nsys profile ridge ...`
// sees ranges without a flag, and costs nothing otherwise.
struct NvtxAutoEnable {
  NvtxAutoEnable() {
#if defined(RIDGE_HAVE_NVTX)
    if (!env::text("NVTX_INJECTION64_PATH").empty()) hooks::set_bits(hooks::kNvtx, true);
#endif
  }
} g_nvtx_auto;

}  // namespace

void start_recording(size_t max_events) {
  clear();
  auto& g = global();
  g.max_events.store(max_events);
  g.t0.store(memory::clock_ns());
  g.recording.store(true);
  hooks::set_bits(hooks::kTrace, true);
}

void stop_recording() {
  global().recording.store(false);
  hooks::set_bits(hooks::kTrace, false);
}

bool recording() {
  return global().recording.load();
}

void clear() {
  auto& g = global();
  std::lock_guard lock(g.mu);
  for (auto& b : g.buffers) {
    std::lock_guard bl(b->mu);
    b->events.clear();
  }
  g.count.store(0);
  g.dropped.store(0);
}

size_t event_count() {
  auto& g = global();
  std::lock_guard lock(g.mu);
  size_t n = 0;
  for (auto& b : g.buffers) {
    std::lock_guard bl(b->mu);
    n += b->events.size();
  }
  return n;
}

uint64_t dropped() {
  return global().dropped.load();
}

void set_nvtx(bool on) {
#if defined(RIDGE_HAVE_NVTX)
  hooks::set_bits(hooks::kNvtx, on);
#else
  (void)on;
#endif
}

bool nvtx_compiled() {
#if defined(RIDGE_HAVE_NVTX)
  return true;
#else
  return false;
#endif
}

void set_thread_name(const std::string& name) {
  auto& b = my_buffer();
  {
    std::lock_guard lock(b.mu);
    b.name = name;
  }
#if defined(RIDGE_HAVE_NVTX)
  if (nvtx_on(hooks::active.load(std::memory_order_relaxed)))
    nvtxNameOsThreadA(static_cast<uint32_t>(b.tid), name.c_str());
#endif
}

namespace detail {
void push_active(const char* name) {
  const unsigned bits = hooks::active.load(std::memory_order_relaxed);
  unsigned did = 0;
  // The name stack feeds both the memory profiler's tags and nothing else, so keep it whenever
  // either recorder listens.
  if (bits & (hooks::kMemory | hooks::kTrace)) {
    hooks::push_range_name(name);
    did |= hooks::kMemory;
  }
  if (bits & hooks::kTrace) did |= hooks::kTrace;
#if defined(RIDGE_HAVE_NVTX)
  if (nvtx_on(bits)) {
    nvtxRangePushA(name);
    did |= hooks::kNvtx;
  }
#endif
  t_open.push_back(Open{name, (did & hooks::kTrace) ? memory::clock_ns() : 0, did});
}
}  // namespace detail

void push(const char* name) {
  detail::push_active(name);
}

void push(const std::string& name) {
  // The stack keeps a pointer, so a dynamic name is interned for the life of the process; use
  // RIDGE_RANGE(std::string) (which owns its copy) for names that vary without bound.
  static std::mutex mu;
  static std::vector<std::unique_ptr<std::string>> names;
  const char* p = nullptr;
  {
    std::lock_guard lock(mu);
    for (const auto& n : names)
      if (*n == name) p = n->c_str();
    if (!p) {
      names.push_back(std::make_unique<std::string>(name));
      p = names.back()->c_str();
    }
  }
  detail::push_active(p);
}

void pop() {
  if (t_open.empty()) return;
  const Open o = t_open.back();
  t_open.pop_back();
  if (o.did & hooks::kMemory) hooks::pop_range_name();
#if defined(RIDGE_HAVE_NVTX)
  if (o.did & hooks::kNvtx) nvtxRangePop();
#endif
  if (o.did & hooks::kTrace) {
    const int64_t t1 = memory::clock_ns();
    append(Event{'X', o.t0, t1 - o.t0, 0, 0, false, 0.0, o.name, "ridge"});
  }
}

Handle start_range(std::string name, uint32_t colour) {
  Handle h;
  const unsigned bits = hooks::active.load(std::memory_order_relaxed);
  if (!(bits & (hooks::kTrace | hooks::kNvtx))) return h;
  h.id = global().next_id.fetch_add(1);
  h.name = std::move(name);
  if (bits & hooks::kTrace) {
    h.did |= hooks::kTrace;
    append(Event{'b', memory::clock_ns(), 0, h.id, colour, false, 0.0, h.name, "ridge"});
  }
#if defined(RIDGE_HAVE_NVTX)
  if (nvtx_on(bits)) {
    auto a = nvtx_attributes(h.name.c_str(), colour);
    h.nvtx_id = nvtxRangeStartEx(&a);
    h.did |= hooks::kNvtx;
  }
#else
  (void)colour;
#endif
  return h;
}

void end_range(const Handle& h) {
  if (h.id == 0) return;
  if (h.did & hooks::kTrace) append(Event{'e', memory::clock_ns(), 0, h.id, 0, false, 0.0, h.name, "ridge"});
#if defined(RIDGE_HAVE_NVTX)
  if (h.did & hooks::kNvtx) nvtxRangeEnd(h.nvtx_id);
#endif
}

void mark(const std::string& name, const Marker& m) {
  const unsigned bits = hooks::active.load(std::memory_order_relaxed);
  if (bits & hooks::kTrace)
    append(Event{'i', memory::clock_ns(), 0, 0, m.colour, m.payload.has_value(), m.payload.value_or(0.0),
                 name, m.category.empty() ? "ridge" : m.category});
#if defined(RIDGE_HAVE_NVTX)
  if (nvtx_on(bits)) {
    auto a = nvtx_attributes(name.c_str(), m.colour);
    if (m.payload) {
      a.payloadType = NVTX_PAYLOAD_TYPE_DOUBLE;
      a.payload.dValue = *m.payload;
    }
    nvtxMarkEx(&a);
  }
#endif
}

nlohmann::json to_json() {
  using nlohmann::json;
  auto& g = global();
  const int64_t t0 = g.t0.load();
  const int pid = static_cast<int>(::getpid());
  struct Flat {
    const Event* e;
    int32_t tid;
  };
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  {
    std::lock_guard lock(g.mu);
    buffers = g.buffers;
  }
  json events = json::array();
  events.push_back(
      {{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", "ridge"}}}});
  // Copy each buffer under its lock, then sort: parents (earlier start, longer) before children.
  std::vector<std::pair<Event, int32_t>> all;
  for (auto& b : buffers) {
    std::lock_guard bl(b->mu);
    if (!b->name.empty())
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", pid},
                        {"tid", b->tid},
                        {"args", {{"name", b->name}}}});
    for (const auto& e : b->events) all.emplace_back(e, b->tid);
  }
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    if (a.first.ts_ns != b.first.ts_ns) return a.first.ts_ns < b.first.ts_ns;
    return a.first.dur_ns > b.first.dur_ns;
  });
  const auto us = [&](int64_t ns) { return static_cast<double>(ns - t0) / 1e3; };
  for (const auto& [e, tid] : all) {
    json j = {{"name", e.name}, {"cat", e.cat}, {"ph", std::string(1, e.ph)},
              {"pid", pid},     {"tid", tid},   {"ts", us(e.ts_ns)}};
    if (e.ph == 'X') j["dur"] = static_cast<double>(e.dur_ns) / 1e3;
    if (e.ph == 'b' || e.ph == 'e') j["id"] = fmt::format("0x{:x}", e.id);
    if (e.ph == 'i') j["s"] = "t";
    json args = json::object();
    if (e.colour != color::none) args["colour"] = fmt::format("#{:06x}", e.colour & 0xFFFFFFu);
    if (e.has_payload) args["payload"] = e.payload;
    if (!args.empty()) j["args"] = args;
    events.push_back(std::move(j));
  }
  json other = {{"machine", bench::machine_context()},
                {"dropped_events", g.dropped.load()},
                {"recorder", "ridge trace"}};
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", other}};
}

void write(const std::string& path) {
  const auto doc = to_json();
  files::write_text(path, doc.dump() + "\n", "trace");  // temp + rename: a failure keeps the old file
}

std::string to_json_text() {
  return to_json().dump();
}

}  // namespace ridge::trace
