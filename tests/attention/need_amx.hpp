// The skip of the attention tests that need the AMX instructions (the ...OnAmx twins of the
// emulated tests), saying why this machine has none.
#pragma once

#include <gtest/gtest.h>

#include "ridge/core/cpu.hpp"

#define RIDGE_NEED_AMX()                                          \
  if (!ridge::cpu::supported(ridge::cpu::Isa::amx))               \
  GTEST_SKIP() << "no AMX here: " << ridge::cpu::amx_off_reason() \
               << "; the tile kernels are checked on the emulator by the Emulated tests"
