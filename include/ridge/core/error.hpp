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
  // An error about one argument of a library function: what() is "argument: message". A caller
  // that took the value under another name (a CLI flag) puts its own name in front with renamed().
  Error(const std::string& argument, const std::string& message)
      : std::runtime_error(argument + ": " + message), argument_(argument), message_(message) {}
  // The function argument the message is about; empty when the error was not raised for one.
  const std::string& argument() const { return argument_; }
  // The same message about `name` instead of argument() ("--inputs: ..." for "inputs: ...").
  Error renamed(const std::string& name) const { return Error(name, message_); }

 private:
  std::string argument_, message_;
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

// Throws ridge::Error about the function argument `argument` (see Error::argument) when `cond` is
// false: "argument: message".
template <typename... Args>
inline void check_arg(bool cond, const std::string& argument, fmt::format_string<Args...> f, Args&&... args) {
  if (!cond) throw Error(argument, fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] inline void fail_arg(const std::string& argument, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(argument, fmt::format(f, std::forward<Args>(args)...));
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
