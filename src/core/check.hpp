// Private to ridge (the library, the CLI, the benchmarks, the bindings and the tests; never
// installed): ridge::Error with an fmt-style message. Public headers build their messages from
// std::string so that a consumer of the installed package needs no fmt.
#pragma once

#include <fmt/format.h>

#include <string>
#include <utility>

#include "ridge/core/error.hpp"

namespace ridge {

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
[[noreturn]] inline void fail_arg(const std::string& argument, fmt::format_string<Args...> f,
                                  Args&&... args) {
  throw Error(argument, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace ridge
