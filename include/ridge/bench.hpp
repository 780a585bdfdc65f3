// ridge bench: the benchmark and profiling toolkit.
//   measure.hpp   ridge::bench::measure(fn, Options) -> Measurement (samples + Stats), do_not_optimize
//   result.hpp    Row, the one result schema of every benchmark; Sink and table/JSON-lines/CSV printers
//   registry.hpp  RIDGE_BENCHMARK registration for `ridge bench NAME`, sweep Grid, Progress, Context
//   trace.hpp     RIDGE_RANGE, start/end ranges, markers, thread names -> Chrome trace JSON and NVTX
//   memory.hpp    memory snapshot files and timeline replay (history is recorded by core's allocator)
#pragma once

#include "ridge/bench/measure.hpp"
#include "ridge/bench/memory.hpp"
#include "ridge/bench/registry.hpp"
#include "ridge/bench/result.hpp"
#include "ridge/bench/trace.hpp"
