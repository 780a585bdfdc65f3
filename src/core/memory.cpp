#include "ridge/core/memory.hpp"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>

#include "ridge/core/error.hpp"
#include "ridge/core/units.hpp"
#include "core/check.hpp"

namespace ridge::memory {

namespace hooks {
std::atomic<unsigned> active{0};

void set_bits(unsigned bits, bool on) noexcept {
  if (on)
    active.fetch_or(bits, std::memory_order_relaxed);
  else
    active.fetch_and(~bits, std::memory_order_relaxed);
}

namespace {
// Deep nesting past this still balances (depth counts) but names the allocation by the deepest
// name kept; 64 levels is far beyond any real call tree.
constexpr int kMaxDepth = 64;
struct RangeStack {
  const char* names[kMaxDepth];
  int depth = 0;
};
thread_local RangeStack t_ranges;
}  // namespace

void push_range_name(const char* name) noexcept {
  auto& s = t_ranges;
  if (s.depth < kMaxDepth) s.names[s.depth] = name;
  ++s.depth;
}

void pop_range_name() noexcept {
  auto& s = t_ranges;
  if (s.depth > 0) --s.depth;
}

const char* current_range_name() noexcept {
  const auto& s = t_ranges;
  if (s.depth == 0) return nullptr;
  return s.names[(s.depth < kMaxDepth ? s.depth : kMaxDepth) - 1];
}

int32_t thread_id() noexcept {
  thread_local int32_t tid = static_cast<int32_t>(::syscall(SYS_gettid));
  return tid;
}
}  // namespace hooks

namespace {

struct Live {
  int64_t bytes;
  int32_t tag;
};

// Everything behind one mutex: allocations are large and rare next to the work done on them, and
// a single lock makes the accounting exact under any interleaving of threads.
struct State {
  std::mutex mu;
  std::unordered_map<uintptr_t, Live> live;
  std::unordered_map<std::string, int32_t> tag_ids;
  std::vector<std::string> tag_names;
  std::vector<int64_t> live_by_tag;  // indexed by tag id
  int64_t current = 0, peak = 0;

  bool recording = false;
  size_t max_entries = 0;
  uint64_t dropped = 0;
  int64_t t0 = 0;
  std::deque<Event> events;
  std::unordered_map<uintptr_t, Event> baseline;  // live before events.front()

  int32_t intern(const char* tag) {
    std::string key = tag;
    auto it = tag_ids.find(key);
    if (it != tag_ids.end()) return it->second;
    const auto id = static_cast<int32_t>(tag_names.size());
    tag_names.push_back(key);
    live_by_tag.push_back(0);
    tag_ids.emplace(std::move(key), id);
    return id;
  }

  void push_event(const Event& e) {
    events.push_back(e);
    while (events.size() > max_entries) {
      // Fold the evicted event into the baseline so replay from the baseline stays exact.
      const Event& old = events.front();
      if (old.alloc)
        baseline[old.address] = old;
      else
        baseline.erase(old.address);
      events.pop_front();
      ++dropped;
    }
  }
};

State& state() {
  // Leaked on purpose: buffers in static objects may be freed after main returns.
  static State* s = new State;
  return *s;
}

}  // namespace

int64_t clock_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t physical_bytes() {
  static const int64_t total = [] {
    const long pages = ::sysconf(_SC_PHYS_PAGES), size = ::sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? static_cast<int64_t>(pages) * size : int64_t{1} << 50;
  }();
  return total;
}

namespace {

// The number on the first line of a file (a cgroup's limit or usage); -1 when unreadable or not a number
// ("max": no limit).
int64_t number_in(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return -1;
  long long v = -1;
  if (std::fscanf(f, "%lld", &v) != 1) v = -1;
  std::fclose(f);
  return v;
}

// A field of a cgroup's memory.stat ("file 123"); 0 when absent.
int64_t stat_field(const std::string& path, const char* key) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return 0;
  char name[128];
  long long v = 0;
  int64_t found = 0;
  while (std::fscanf(f, "%127s %lld", name, &v) == 2)
    if (std::strcmp(name, key) == 0) {
      found = v;
      break;
    }
  std::fclose(f);
  return found;
}

// What this process's memory cgroup still lets it take: its limit less its usage, the page cache not
// counted (the kernel reclaims it before it refuses memory); -1 where it has no limit or none can be read.
// Its cgroup is looked up in /proc/self/cgroup (v2 "0::/path", v1 "N:memory:/path"), then at the mount's
// root, which is the process's own cgroup inside a container's namespace.
int64_t cgroup_headroom() {
  std::string v2 = "/", v1 = "/";
  if (std::FILE* f = std::fopen("/proc/self/cgroup", "r")) {
    char line[4096];
    while (std::fgets(line, sizeof line, f)) {
      std::string l(line);
      while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
      if (l.rfind("0::", 0) == 0) v2 = l.substr(3);
      const auto m = l.find(":memory:");
      if (m != std::string::npos) v1 = l.substr(m + 8);
    }
    std::fclose(f);
  }
  constexpr int64_t kNoLimit = int64_t{1} << 60;  // v1 writes "no limit" as about 2^63
  for (const std::string& dir : {"/sys/fs/cgroup" + v2, std::string("/sys/fs/cgroup")}) {
    const int64_t max = number_in(dir + "/memory.max"), cur = number_in(dir + "/memory.current");
    if (max >= 0 && cur >= 0)
      return std::max<int64_t>(0, max - (cur - stat_field(dir + "/memory.stat", "file")));
  }
  for (const std::string& dir : {"/sys/fs/cgroup/memory" + v1, std::string("/sys/fs/cgroup/memory")}) {
    const int64_t max = number_in(dir + "/memory.limit_in_bytes"),
                  cur = number_in(dir + "/memory.usage_in_bytes");
    if (max >= 0 && max < kNoLimit && cur >= 0)
      return std::max<int64_t>(0, max - (cur - stat_field(dir + "/memory.stat", "total_cache")));
  }
  return -1;
}

// What RLIMIT_AS (`ulimit -v`) still lets the process map: the limit less its virtual size now; -1 when
// there is no limit.
int64_t address_space_headroom() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return -1;
  long long pages = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%lld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  const int64_t used = static_cast<int64_t>(pages) * ::sysconf(_SC_PAGE_SIZE);
  const auto limit = static_cast<int64_t>(std::min<rlim_t>(rl.rlim_cur, INT64_MAX));
  return std::max<int64_t>(0, limit - used);
}

}  // namespace

int64_t available_bytes() {
  int64_t avail = physical_bytes();
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    int64_t kib = -1;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "MemAvailable: %ld kB", &kib) == 1) break;
    std::fclose(f);
    if (kib >= 0) avail = std::min(kib * 1024, avail);
  }
  // A container's memory limit, or `ulimit -v`, can be below what the machine has free.
  for (const int64_t h : {cgroup_headroom(), address_space_headroom()})
    if (h >= 0) avail = std::min(avail, h);
  return avail;
}

void check_fits(double bytes, const std::string& what) {
  const int64_t avail = available_bytes();
  if (!(bytes <= static_cast<double>(avail)))
    fail("{}: needs {}, more than the {} of memory this machine has available", what,
         units::format_bytes(bytes), units::format_bytes(static_cast<double>(avail)));
}

void* allocate(size_t bytes, const char* tag, size_t alignment) {
  check(alignment >= sizeof(void*) && (alignment & (alignment - 1)) == 0,
        "memory: alignment {} must be a power of two >= {}", alignment, sizeof(void*));
  if (bytes > static_cast<size_t>(physical_bytes()))
    fail("{}: {} asked for, more than this machine's {} of memory", tag ? tag : "memory",
         units::format_bytes(static_cast<double>(bytes)),
         units::format_bytes(static_cast<double>(physical_bytes())));
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded);
  if (!p) throw std::bad_alloc();
  if (!tag) tag = hooks::current_range_name();
  if (!tag) tag = "untagged";
  const auto n = static_cast<int64_t>(bytes);
  auto& s = state();
  try {
    std::lock_guard lock(s.mu);
    const int32_t id = s.intern(tag);
    s.live[reinterpret_cast<uintptr_t>(p)] = Live{n, id};
    s.live_by_tag[static_cast<size_t>(id)] += n;
    s.current += n;
    if (s.current > s.peak) s.peak = s.current;
    if (s.recording)
      s.push_event(Event{clock_ns(), reinterpret_cast<uintptr_t>(p), n, id, hooks::thread_id(), true});
  } catch (...) {
    std::free(p);
    throw;
  }
  return p;
}

void deallocate(void* p) noexcept {
  if (!p) return;
  auto& s = state();
  {
    std::lock_guard lock(s.mu);
    auto it = s.live.find(reinterpret_cast<uintptr_t>(p));
    if (it != s.live.end()) {
      const Live l = it->second;
      s.live.erase(it);
      s.live_by_tag[static_cast<size_t>(l.tag)] -= l.bytes;
      s.current -= l.bytes;
      if (s.recording) {
        try {
          s.push_event(
              Event{clock_ns(), reinterpret_cast<uintptr_t>(p), l.bytes, l.tag, hooks::thread_id(), false});
        } catch (...) {
          // Out of memory while recording a free: the history loses one event, the free proceeds.
          ++s.dropped;
        }
      }
    }
  }
  std::free(p);
}

Usage usage() {
  Usage u;
  auto& s = state();
  {
    std::lock_guard lock(s.mu);
    u.current_bytes = s.current;
    u.peak_bytes = s.peak;
    u.live_allocations = static_cast<int64_t>(s.live.size());
    for (size_t i = 0; i < s.tag_names.size(); ++i)
      if (s.live_by_tag[i] != 0) u.live_by_tag[s.tag_names[i]] = s.live_by_tag[i];
  }
  u.peak_rss_bytes = peak_rss_bytes();
  u.current_rss_bytes = current_rss_bytes();
  return u;
}

int64_t current_bytes() {
  auto& s = state();
  std::lock_guard lock(s.mu);
  return s.current;
}

int64_t peak_bytes() {
  auto& s = state();
  std::lock_guard lock(s.mu);
  return s.peak;
}

void reset_peak() {
  auto& s = state();
  std::lock_guard lock(s.mu);
  s.peak = s.current;
}

int64_t peak_rss_bytes() {
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

int64_t current_rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long pages_total = 0, pages_resident = 0;
  const int got = std::fscanf(f, "%ld %ld", &pages_total, &pages_resident);
  std::fclose(f);
  if (got != 2) return 0;
  return static_cast<int64_t>(pages_resident) * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

void record_history(size_t max_entries) {
  check(max_entries >= 1, "memory: max_entries {} must be at least 1", max_entries);
  auto& s = state();
  {
    std::lock_guard lock(s.mu);
    s.events.clear();
    s.baseline.clear();
    s.dropped = 0;
    s.max_entries = max_entries;
    s.t0 = clock_ns();
    // What is already live is the starting point of the timeline.
    for (const auto& [addr, l] : s.live) s.baseline[addr] = Event{s.t0, addr, l.bytes, l.tag, 0, true};
    s.recording = true;
  }
  hooks::set_bits(hooks::kMemory, true);
}

void stop_recording() {
  auto& s = state();
  {
    std::lock_guard lock(s.mu);
    s.recording = false;
    s.events.clear();
    s.events.shrink_to_fit();
    s.baseline.clear();
    s.dropped = 0;
  }
  hooks::set_bits(hooks::kMemory, false);
}

bool recording() {
  auto& s = state();
  std::lock_guard lock(s.mu);
  return s.recording;
}

History history() {
  History h;
  auto& s = state();
  {
    std::lock_guard lock(s.mu);
    h.recording = s.recording;
    h.max_entries = s.max_entries;
    h.dropped = s.dropped;
    h.t0_ns = s.t0;
    h.now_ns = clock_ns();
    h.tags = s.tag_names;
    h.baseline.reserve(s.baseline.size());
    for (const auto& [addr, e] : s.baseline) h.baseline.push_back(e);
    h.events.assign(s.events.begin(), s.events.end());
  }
  std::sort(h.baseline.begin(), h.baseline.end(),
            [](const Event& a, const Event& b) { return a.address < b.address; });
  h.peak_rss_bytes = peak_rss_bytes();
  return h;
}

}  // namespace ridge::memory
