// Trace ranges, the NVTX model: push/pop ranges that nest per thread (RIDGE_RANGE as an RAII
// guard), start/end ranges whose handle may end on another thread, instant markers with a category,
// a colour and a payload, and thread names. Recorded as Chrome trace-event JSON (loads in Perfetto
// and chrome://tracing) and, when built with the NVTX3 headers, forwarded to NVTX so Nsight Systems
// sees the same ranges (forwarding is on when a tool is injected via NVTX_INJECTION64_PATH, or by
// set_nvtx(true)).
//
// Off by default: with recording, NVTX forwarding and memory history all off, a RIDGE_RANGE costs
// one relaxed load and a branch. The innermost open range also names untagged allocations in the
// memory profiler while it records.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ridge/core/memory.hpp"

namespace ridge::trace {

// Starts recording (clearing any earlier events); `max_events` caps memory use over all threads
// (0: unlimited); events beyond the cap are counted in dropped(), never silently.
void start_recording(size_t max_events = 0);
void stop_recording();
bool recording();
void clear();
size_t event_count();  // recorded events (excluding thread-name metadata)
uint64_t dropped();
// The Chrome trace-event document: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}},
// as JSON text (one line); the nlohmann-json form (to_json) is in the private header src/bench/json.hpp.
std::string to_json_text();
// Writes the document to a file; ridge::Error naming the path if it cannot be written.
void write(const std::string& path);

// Forward ranges, markers and thread names to NVTX (no effect when built without NVTX).
void set_nvtx(bool on);
bool nvtx_compiled();

// Names the calling thread in the trace (and in NVTX); may be called before recording starts.
void set_thread_name(const std::string& name);

// Push/pop ranges on the calling thread; pop closes the innermost one.
void push(const char* name);  // `name` must stay valid until the matching pop
void push(const std::string& name);
void pop();

// ARGB colours, as NVTX takes them.
namespace color {
inline constexpr uint32_t none = 0, red = 0xFFE53935, green = 0xFF43A047, blue = 0xFF1E88E5,
                          yellow = 0xFFFDD835, orange = 0xFFFB8C00, purple = 0xFF8E24AA, grey = 0xFF757575;
}

struct Handle {
  uint64_t id = 0;  // 0: started while everything was off; end_range ignores it
  std::string name;
  uint64_t nvtx_id = 0;
  unsigned did = 0;  // which sinks saw the start
};
// An async range: may overlap anything and end on any thread (Chrome "b"/"e" events).
Handle start_range(std::string name, uint32_t colour = color::none);
void end_range(const Handle& h);

// An instant event on the calling thread's timeline.
struct Marker {
  std::string category;  // e.g. "step", "checkpoint"; "" -> "ridge"
  uint32_t colour = color::none;
  std::optional<double> payload;  // a number shown with the marker (loss, bytes, ...)
};
void mark(const std::string& name, const Marker& marker = {});

namespace detail {
void push_active(const char* name);  // the guard's slow path, taken only when something is on
}

// RAII push/pop. Prefer the RIDGE_RANGE macro.
class Range {
 public:
  explicit Range(const char* name) noexcept {
    if (memory::hooks::any_active()) begin(name);
  }
  explicit Range(const std::string& name) {
    if (memory::hooks::any_active()) {
      owned_ = name;
      begin(owned_.c_str());
    }
  }
  ~Range() {
    if (active_) pop();
  }
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  void begin(const char* name) noexcept {
    try {
      detail::push_active(name);
      active_ = true;
    } catch (...) {
      // Out of memory while tracing: the range is lost, the program goes on.
    }
  }
  bool active_ = false;
  std::string owned_;
};

}  // namespace ridge::trace

#define RIDGE_TRACE_CONCAT2(a, b) a##b
#define RIDGE_TRACE_CONCAT(a, b) RIDGE_TRACE_CONCAT2(a, b)
// A push/pop range named `name` (a string literal or std::string) until the end of the scope.
#define RIDGE_RANGE(name) const ::ridge::trace::Range RIDGE_TRACE_CONCAT(ridge_range_, __LINE__)(name)
