// Lowers the address-space limit (RLIMIT_AS, what `ulimit -v` sets, which memory::available_bytes()
// honours) to the process's current size plus `room` bytes while it lives, and puts the limit back
// after. A limit on the address space makes "more than the memory available" the same on every
// machine. applied() is false where the hard limit is already below that (the test then skips).
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

namespace ridge::test {

class AddressSpaceRoom {
 public:
  explicit AddressSpaceRoom(rlim_t room) {
    if (::getrlimit(RLIMIT_AS, &was_) != 0) return;
    long long pages = 0;
    if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%lld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    if (pages <= 0) return;
    const auto vsz = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGE_SIZE));
    if (was_.rlim_max != RLIM_INFINITY && was_.rlim_max < vsz + room) return;
    rlimit lower = was_;
    lower.rlim_cur = vsz + room;
    applied_ = ::setrlimit(RLIMIT_AS, &lower) == 0;
  }
  ~AddressSpaceRoom() { restore(); }
  AddressSpaceRoom(const AddressSpaceRoom&) = delete;
  AddressSpaceRoom& operator=(const AddressSpaceRoom&) = delete;

  bool applied() const { return applied_; }
  // Puts the limit back now (true on success); the destructor does nothing after.
  bool restore() {
    if (!applied_) return true;
    applied_ = false;
    return ::setrlimit(RLIMIT_AS, &was_) == 0;
  }

 private:
  rlimit was_{};
  bool applied_ = false;
};

}  // namespace ridge::test
