// Private to ridge: do two strided views share memory? Kernels that write an output while reading
// inputs use this to reject an output that aliases an input (or another output) with ridge::Error,
// instead of returning silently wrong numbers.
//
// Exact for the layouts ridge itself builds: views with the same strides that interleave without
// touching (q, k and v as column slices of one packed [tokens, 3 * d] buffer, or dq, dk, dv written
// into one) are disjoint. Two views whose byte ranges meet are otherwise reported as overlapping
// (conservative): views with different strides or element sizes, non-positive strides, or a search
// that would take too long.
#pragma once

#include <algorithm>
#include <utility>
#include <array>
#include <cstdint>

#include "ridge/core/tensor.hpp"

namespace ridge::overlap {

// Byte arithmetic on addresses and strides that cannot wrap (a GCC/Clang extension, hence __extension__).
__extension__ typedef __int128 i128;

// A view as bytes: origin, element size, and per dimension the extent and the stride in bytes.
struct Bytes {
  intptr_t origin = 0;
  int64_t elem = 0;
  int rank = 0;
  std::array<int64_t, 4> shape{}, stride{};
};

template <typename T>
Bytes bytes_of(const TensorView<T>& v) {
  Bytes b;
  b.origin = reinterpret_cast<intptr_t>(v.data);
  b.elem = static_cast<int64_t>(sizeof(T));
  b.rank = v.rank;
  for (int i = 0; i < v.rank; ++i) {
    b.shape[i] = v.shape[i];
    b.stride[i] = v.stride[i] * b.elem;
  }
  return b;
}

template <typename T>
Bytes bytes_of(const MatrixView<T>& m) {
  Bytes b;
  b.origin = reinterpret_cast<intptr_t>(m.data);
  b.elem = static_cast<int64_t>(sizeof(T));
  b.rank = 2;
  b.shape = {m.rows, m.cols, 1, 1};
  b.stride = {m.ld * b.elem, b.elem, 0, 0};
  return b;
}

inline bool empty(const Bytes& b) {
  if (b.origin == 0) return true;
  for (int i = 0; i < b.rank; ++i)
    if (b.shape[i] == 0) return true;
  return false;
}

// [first, last) byte touched by the view (strides of either sign).
inline std::array<i128, 2> byte_range(const Bytes& b) {
  i128 lo = b.origin, hi = b.origin;
  for (int i = 0; i < b.rank; ++i) {
    const i128 reach = static_cast<i128>(b.shape[i] - 1) * b.stride[i];
    (reach < 0 ? lo : hi) += reach;
  }
  return {lo, hi + b.elem};
}

namespace detail {

// Is there c with c[k] in [-(nb[k]-1), na[k]-1] and |target - sum c[k] s[k]| < elem? Dimensions
// sorted by stride, largest first; at most `budget` candidates are tried before answering "maybe".
inline bool search(int k, int rank, const int64_t* s, const int64_t* na, const int64_t* nb, i128 target,
                   int64_t elem, int& budget) {
  if (k == rank) return target > -elem && target < elem;
  i128 rmax = 0, rmin = 0;  // what the later dimensions can add
  for (int l = k + 1; l < rank; ++l) {
    rmax += static_cast<i128>(na[l] - 1) * s[l];
    rmin -= static_cast<i128>(nb[l] - 1) * s[l];
  }
  // c s must lie in (target - elem - rmax, target + elem - rmin).
  const i128 lo_v = target - elem - rmax, hi_v = target + elem - rmin;
  i128 lo = lo_v / s[k] - 1, hi = hi_v / s[k] + 1;
  lo = std::max<i128>(lo, -(nb[k] - 1));
  hi = std::min<i128>(hi, na[k] - 1);
  for (i128 c = lo; c <= hi; ++c) {
    if (c * s[k] <= lo_v || c * s[k] >= hi_v) continue;
    if (--budget < 0) return true;
    if (search(k + 1, rank, s, na, nb, target - c * s[k], elem, budget)) return true;
  }
  return false;
}

}  // namespace detail

// True when some byte belongs to an element of both views.
inline bool overlaps(const Bytes& a, const Bytes& b) {
  if (empty(a) || empty(b)) return false;
  const auto ra = byte_range(a), rb = byte_range(b);
  if (!(ra[0] < rb[1] && rb[0] < ra[1])) return false;
  // Same element size and the same positive stride for every dimension of extent > 1: exact search.
  if (a.elem != b.elem || a.rank != b.rank) return true;
  std::array<int, 4> order{};
  int rank = 0;
  for (int i = 0; i < a.rank; ++i) {
    if (a.shape[i] == 1 && b.shape[i] == 1) continue;
    if (a.stride[i] != b.stride[i] || a.stride[i] <= 0) return true;
    order[rank++] = i;
  }
  for (int r = 1; r < rank; ++r)  // largest stride first (by hand: GCC 12 warns falsely on std::sort here)
    for (int q = r; q > 0 && a.stride[order[q]] > a.stride[order[q - 1]]; --q)
      std::swap(order[q], order[q - 1]);
  std::array<int64_t, 4> s{}, na{}, nb{};
  for (int r = 0; r < rank; ++r) {
    s[r] = a.stride[order[r]];
    na[r] = a.shape[order[r]];
    nb[r] = b.shape[order[r]];
  }
  // An element i of a and j of b meet when a.origin + sum i s - (b.origin + sum j s) is within one
  // element: with c = i - j, |sum c s - (b.origin - a.origin)| < elem.
  int budget = 4096;
  return detail::search(0, rank, s.data(), na.data(), nb.data(), static_cast<i128>(b.origin) - a.origin,
                        a.elem, budget);
}

// For any two of TensorView and MatrixView.
template <typename A, typename B>
bool overlaps(const A& a, const B& b) {
  return overlaps(bytes_of(a), bytes_of(b));
}

}  // namespace ridge::overlap
