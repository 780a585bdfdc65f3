// ridge bench: the benchmark and profiling toolkit.
//   measure.hpp   ridge::bench::measure(fn, Options) -> Measurement (samples + Stats), do_not_optimize
//   trace.hpp     RIDGE_RANGE, start/end ranges, markers, thread names -> Chrome trace JSON and NVTX
//   memory.hpp    memory snapshot files and timeline replay (history is recorded by core's allocator)
// The benchmark programs' own plumbing (the result Row schema and its printers, RIDGE_BENCHMARK
// registration, sweep grids) is private to ridge: src/bench/result.hpp and src/bench/registry.hpp.
#pragma once

#include "ridge/bench/measure.hpp"
#include "ridge/bench/memory.hpp"
#include "ridge/bench/trace.hpp"
