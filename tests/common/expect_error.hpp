// expect_error(f, part): f throws ridge::Error with one line that mentions `part` (the contract's "one
// clear line"); a test fails naming the part when f returns or the message differs.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "ridge/core/error.hpp"

namespace ridge::test {

inline void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << part << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

}  // namespace ridge::test
