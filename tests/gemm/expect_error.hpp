// The GEMM tests' check of an argument error: `f` throws ridge::Error and its message contains `needle`
// (the argument's name and what was wrong), as the contract of one clear line asks.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "ridge/core/error.hpp"

namespace ridge::gemm_test {

template <typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected ridge::Error mentioning '" << needle << "'";
  } catch (const ridge::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace ridge::gemm_test
