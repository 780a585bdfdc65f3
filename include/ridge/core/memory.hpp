// The one allocator every ridge buffer goes through, so the memory profiler sees every byte:
// allocate/deallocate with a tag, Buffer<T> (an owning aligned array), live/peak accounting at any
// time, and an allocation history (the PyTorch memory-history model) that the bench module turns
// into a snapshot file, a report and a timeline plot.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ridge/core/error.hpp"

namespace ridge::memory {

inline constexpr size_t kDefaultAlignment = 64;

// Aligned allocation (zero bytes allowed). `tag` names what the bytes are for; when null, the
// innermost open trace range on this thread names them ("untagged" outside any range). Throws
// std::bad_alloc when out of memory and ridge::Error for a bad alignment or a size beyond this
// machine's physical memory (named by the tag).
void* allocate(size_t bytes, const char* tag = nullptr, size_t alignment = kDefaultAlignment);
void deallocate(void* p) noexcept;

// This machine's physical memory, and what this process can still take now: /proc/meminfo's
// MemAvailable (the physical size where that is unreadable), lowered to what the process's memory
// cgroup (a container's limit) and RLIMIT_AS (`ulimit -v`) still allow. Bytes.
int64_t physical_bytes();
int64_t available_bytes();
// An up-front check for a run that will need `bytes` at once: ridge::Error, one line starting
// with `what`, when that is more than the memory available now. A double: a size product cannot wrap.
void check_fits(double bytes, const std::string& what);

// ---- Accounting (always on; one mutex per allocation, which is noise next to the allocation) ----

struct Usage {
  int64_t current_bytes = 0;  // live bytes requested through allocate()
  int64_t peak_bytes = 0;     // high-water mark of current_bytes since start or reset_peak()
  int64_t live_allocations = 0;
  std::map<std::string, int64_t> live_by_tag;  // tags with live bytes only
  int64_t peak_rss_bytes = 0;                  // the process's peak resident set (getrusage), all allocators
  int64_t current_rss_bytes = 0;               // resident set now (/proc/self/statm; 0 where unavailable)
};
Usage usage();
int64_t current_bytes();
int64_t peak_bytes();
// Restarts the high-water mark from the current live bytes (e.g. before one benchmark case).
void reset_peak();
int64_t peak_rss_bytes();
int64_t current_rss_bytes();

// ---- History (off by default) ----

struct Event {
  int64_t t_ns = 0;  // since the steady-clock epoch of this process's recorder (see history())
  uint64_t address = 0;
  int64_t bytes = 0;   // requested size
  int32_t tag = 0;     // index into History::tags
  int32_t thread = 0;  // OS thread id
  bool alloc = true;   // false: free
};

struct History {
  bool recording = false;
  size_t max_entries = 0;
  uint64_t dropped = 0;  // oldest events evicted to keep max_entries (folded into `baseline`)
  int64_t t0_ns = 0;     // when recording started (same clock as Event::t_ns)
  int64_t now_ns = 0;    // when this copy was taken
  std::vector<std::string> tags;
  // Allocations live just before events[0] (at the start of recording, or when older events were
  // evicted), as alloc events, so replaying baseline then events gives exact live bytes.
  std::vector<Event> baseline;
  std::vector<Event> events;
  int64_t peak_rss_bytes = 0;
};

// Starts (or restarts, clearing earlier history) recording every allocate/deallocate; keeps the
// newest max_entries events. max_entries must be >= 1 (ridge::Error otherwise).
void record_history(size_t max_entries = 1'000'000);
// Stops recording and drops the history.
void stop_recording();
bool recording();
// A consistent copy of the history so far (works while recording continues).
History history();
// Nanoseconds on the recorder's clock (steady clock).
int64_t clock_ns() noexcept;

// ---- Hooks shared with the trace recorder (bench module), kept here because core is lowest ----
namespace hooks {
// One word the instrumentation fast path reads: with every bit clear, a trace range costs a load
// and a branch. The trace recorder owns kTrace and kNvtx; record_history owns kMemory.
inline constexpr unsigned kTrace = 1u, kNvtx = 2u, kMemory = 4u;
extern std::atomic<unsigned> active;
inline bool any_active() noexcept {
  return active.load(std::memory_order_relaxed) != 0;
}
void set_bits(unsigned bits, bool on) noexcept;

// The innermost open trace range on this thread names untagged allocations. The pointer must stay
// valid until the matching pop (ranges hold their names).
void push_range_name(const char* name) noexcept;
void pop_range_name() noexcept;
const char* current_range_name() noexcept;  // nullptr outside any range
// OS thread id of the caller, cached per thread.
int32_t thread_id() noexcept;
}  // namespace hooks

}  // namespace ridge::memory

namespace ridge {

// Owning, aligned, uninitialised array of trivially copyable T.
template <typename T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t n, const char* tag = nullptr)
      : data_(static_cast<T*>(memory::allocate(bytes_for(n, tag), tag))), size_(n) {}
  ~Buffer() { memory::deallocate(data_); }
  Buffer(Buffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      memory::deallocate(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  std::span<T> span() { return {data_, size_}; }
  std::span<const T> span() const { return {data_, size_}; }

 private:
  static size_t bytes_for(size_t n, const char* tag) {
    if (n > (size_t{1} << 62) / sizeof(T))
      throw Error(std::string(tag ? tag : "buffer") + ": " + std::to_string(n) +
                  " elements overflow a byte size");
    return n * sizeof(T);
  }
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ridge
