// ridge core: errors, the numbers a user types, numeric formats, CPU facts and ISA selection, memory,
// views, threads, the version.
#pragma once

#include "ridge/core/cpu.hpp"
#include "ridge/core/env.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/files.hpp"
#include "ridge/core/format.hpp"
#include "ridge/core/hash.hpp"
#include "ridge/core/input.hpp"
#include "ridge/core/memory.hpp"
#include "ridge/core/numbers.hpp"
#include "ridge/core/process.hpp"
#include "ridge/core/tensor.hpp"
#include "ridge/core/threads.hpp"
#include "ridge/core/units.hpp"
#include "ridge/core/version.hpp"
