// The types a decode kernel shares with its caller, in a header that includes only <cstdint>: the
// ahead-of-time kernels see them through kernel.hpp, and the JIT (jit_decode.cpp) pastes this file
// into the units it compiles at run time, so a JIT-compiled kernel and ridge agree on the layout by
// construction.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ridge::gemm::detail {

// Where a micro-tile's result goes: dst = (src ? src : 0) + acc, for the first `mr` rows and `nr`
// columns. src may equal dst (in-place accumulate). Pointers are at the tile's origin.
struct Tile {
  const void* src = nullptr;
  int64_t lds = 0;
  bool src_bf16 = false;
  void* dst = nullptr;
  int64_t ldd = 0;
  bool dst_bf16 = false;
};

// Small-m ("decode") path, for row-major A and B read straight from memory, B streamed once with no
// packing (the op is memory-bound): D[0:m, n0:n1] into t (at D's origin). n0 is a multiple of the
// kernel's small_m_cols. Scratch comes from thread_scratch (never allocated per call).
struct SmallM {
  int64_t m = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  const float* sa = nullptr;  // FP8 scales at D's origin, as in Scales
  int64_t ldsa = 0;
  const float* sb = nullptr;
  int64_t ldsb = 0;
  bool b_finite = false;  // FP8 B holds no NaN code (Operand::fp8_finite): widening may skip the NaN fix
};

using SmallMKernel = void (*)(const SmallM& s, int64_t n0, int64_t n1, const Tile& t);

// What a JIT-compiled unit calls back into ridge for (the plain epilogue, the tile offset and the
// thread's scratch of kernel.hpp): handed to the unit's entry function once, when it is loaded.
struct JitHooks {
  void (*store_tile_generic)(const float* acc, int64_t acc_ld, int mr, int nr, const Tile& t) = nullptr;
  Tile (*tile_at)(const Tile& t, int64_t i, int64_t j) = nullptr;
  std::byte* (*thread_scratch)(size_t bytes) = nullptr;
};

}  // namespace ridge::gemm::detail
