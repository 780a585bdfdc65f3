// ridge::Error: the one exception for bad input from a user (a flag, a shape, a file).
// The CLI prints its message as one line and exits 2, so every message must name the argument
// that was wrong and say what is accepted.
// Public and standard-library only: the fmt-style check()/fail() helpers the library uses to build
// messages live in the private header src/core/check.hpp, so a consumer needs no fmt.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

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

// The product of sizes (shape dimensions, element counts, byte sizes), checked: ridge::Error naming
// `what` when a factor is negative or the product passes 2^62, where it would wrap (a shape whose
// every dimension passes its own limit can still overflow 64 bits in the product).
inline int64_t checked_product(std::initializer_list<int64_t> factors, const std::string& what) {
  int64_t p = 1;
  for (int64_t f : factors) {
    if (f < 0) throw Error(what + ": a negative size (" + std::to_string(f) + ") in the product");
    if (__builtin_mul_overflow(p, f, &p) || p > (int64_t{1} << 62))
      throw Error(what + ": the sizes multiply past 2^62 (an overflow); use smaller sizes");
  }
  return p;
}

}  // namespace ridge
