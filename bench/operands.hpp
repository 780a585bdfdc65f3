// Operands for the benchmarks: values in [-1, 1) from an xorshift counter, the same on every run and
// fast enough for the gigabytes of an MoE layer's weights (a std::mt19937 takes about a minute there).
#pragma once

#include <cstdint>
#include <type_traits>

#include "ridge/core/format.hpp"
#include "ridge/core/memory.hpp"

namespace ridge::bench_operands {

template <typename T>
void fill_uniform(Buffer<T>& buf, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : buf) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    const float f = static_cast<float>(static_cast<int64_t>(s >> 40) - (1 << 23)) * (1.0f / (1 << 23));
    if constexpr (std::is_same_v<T, bf16>)
      x = to_bf16(f);
    else
      x = f;
  }
}

}  // namespace ridge::bench_operands
