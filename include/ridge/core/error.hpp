// ridge::Error: the one exception for bad input from a user (a flag, a shape, a file).
// The CLI prints its message as one line and exits 2, so every message must name the argument
// that was wrong and say what is accepted.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>

namespace ridge {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws ridge::Error with a formatted message when `cond` is false.
template <typename... Args>
inline void check(bool cond, fmt::format_string<Args...> f, Args&&... args) {
  if (!cond) throw Error(fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] inline void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

// The product of sizes (shape dimensions, element counts, byte sizes), checked: ridge::Error naming
// `what` when a factor is negative or the product passes 2^62, where it would wrap (a shape whose
// every dimension passes its own limit can still overflow 64 bits in the product).
inline int64_t checked_product(std::initializer_list<int64_t> factors, const std::string& what) {
  int64_t p = 1;
  for (int64_t f : factors) {
    if (f < 0) fail("{}: a negative size ({}) in the product", what, f);
    if (__builtin_mul_overflow(p, f, &p) || p > (int64_t{1} << 62))
      fail("{}: the sizes multiply past 2^62 (an overflow); use smaller sizes", what);
  }
  return p;
}

}  // namespace ridge
