// overlap::overlaps (src/core/overlap.hpp), which kernels use to refuse an output that aliases an
// input, against a brute-force reference that marks every byte of one view and looks for the other's.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "core/overlap.hpp"

namespace ridge::overlap {
namespace {

// Every byte of every element of `v`, as offsets from `base`.
std::vector<bool> bytes_touched(const Bytes& v, intptr_t base, size_t arena) {
  std::vector<bool> mark(arena, false);
  std::array<int64_t, 4> i{};
  int64_t n = 1;
  for (int d = 0; d < v.rank; ++d) n *= v.shape[d];
  for (int64_t e = 0; e < n; ++e) {
    int64_t rest = e, off = v.origin - base;
    for (int d = v.rank - 1; d >= 0; --d) {
      i[d] = rest % v.shape[d];
      rest /= v.shape[d];
      off += i[d] * v.stride[d];
    }
    for (int64_t b = 0; b < v.elem; ++b) mark.at(static_cast<size_t>(off + b)) = true;
  }
  return mark;
}

bool brute_force(const Bytes& a, const Bytes& b, intptr_t base, size_t arena) {
  const auto ma = bytes_touched(a, base, arena), mb = bytes_touched(b, base, arena);
  for (size_t k = 0; k < arena; ++k)
    if (ma[k] && mb[k]) return true;
  return false;
}

TEST(Overlap, MatchesBruteForceOnRandomViews) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> rank_d(1, 4), extent(1, 4), stride_d(1, 12), offset(0, 60), coin(0, 3);
  constexpr size_t kArena = 4096;
  std::vector<unsigned char> arena(kArena);
  const auto base = reinterpret_cast<intptr_t>(arena.data());
  int exact_cases = 0, exact_disjoint = 0;
  for (int t = 0; t < 20000; ++t) {
    const int rank = rank_d(rng);
    const int64_t elem = coin(rng) == 0 ? 2 : 4;
    Bytes a, b;
    a.rank = b.rank = rank;
    a.elem = b.elem = elem;
    const bool same_strides = coin(rng) != 0;
    for (int d = 0; d < rank; ++d) {
      a.shape[d] = extent(rng);
      b.shape[d] = extent(rng);
      a.stride[d] = stride_d(rng) * elem;
      b.stride[d] = same_strides ? a.stride[d] : stride_d(rng) * elem;
    }
    // Element-aligned offsets mostly; sometimes half an element off, where elements overlap partly.
    a.origin = base + offset(rng) * elem;
    b.origin = base + offset(rng) * elem + (coin(rng) == 0 ? elem / 2 : 0);
    const bool want = brute_force(a, b, base, kArena);
    const bool got = overlaps(a, b);
    ASSERT_EQ(overlaps(b, a), got) << "not symmetric, case " << t;
    if (want) {
      ASSERT_TRUE(got) << "missed an overlap, case " << t;
    }
    if (same_strides) {  // the exact path: no false alarm either
      ASSERT_EQ(got, want) << "case " << t;
      ++exact_cases;
      exact_disjoint += !want;
    }
  }
  // The exact path saw both answers many times (interleaved views whose byte ranges meet included).
  EXPECT_GT(exact_cases, 10000);
  EXPECT_GT(exact_disjoint, 1000);
}

TEST(Overlap, PackedQkvSlicesAreDisjointAndShiftedOnesAreNot) {
  // [batch 2, heads 4, seq 16, d 8] views into one [2, 16, 3, 4, 8] float buffer.
  std::vector<float> buf(2 * 16 * 3 * 4 * 8);
  auto slice = [&](int which, int64_t shift) {
    TensorView<float> t;
    t.data = buf.data() + which * 32 + shift;
    t.rank = 4;
    t.shape = {2, 4, 16, 8};
    t.stride = {16 * 96, 8, 96, 1};
    return t;
  };
  EXPECT_FALSE(overlaps(slice(0, 0), slice(1, 0)));
  EXPECT_FALSE(overlaps(slice(0, 0), slice(2, 0)));
  EXPECT_FALSE(overlaps(slice(1, 0), slice(2, 0)));
  EXPECT_TRUE(overlaps(slice(0, 0), slice(0, 0)));
  EXPECT_TRUE(overlaps(slice(0, 1), slice(1, 0)));  // one element too far: q's last column is k's first
  // A matrix and a view of different element types: the byte ranges decide.
  MatrixView<double> m{reinterpret_cast<double*>(buf.data() + 2), 1, 1, 1};
  EXPECT_TRUE(overlaps(m, slice(0, 0)));
  MatrixView<double> empty{reinterpret_cast<double*>(buf.data()), 0, 4, 4};
  EXPECT_FALSE(overlaps(empty, slice(0, 0)));
}

}  // namespace
}  // namespace ridge::overlap
