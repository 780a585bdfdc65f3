// How far a benchmark's result is from a reference computed on the same operands: the largest
// difference over the largest magnitude of the reference (so one number per row, comparable across
// shapes, and 0 when they agree to the bit). Rows report it as max_rel_diff_vs_peer,
// max_rel_diff_vs_reference or max_rel_diff_vs_math.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "ridge/core/format.hpp"

namespace ridge::bench_compare {

inline double as_double(float x) {
  return x;
}
inline double as_double(bf16 x) {
  return to_float(x);
}

template <typename T, typename U>
double max_rel_diff(const T* x, const U* ref, size_t count) {
  double scale = 0, diff = 0;
  for (size_t i = 0; i < count; ++i) {
    scale = std::max(scale, std::fabs(as_double(ref[i])));
    diff = std::max(diff, std::fabs(as_double(x[i]) - as_double(ref[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

}  // namespace ridge::bench_compare
