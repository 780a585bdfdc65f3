// Library errors about arguments (Error::argument, renamed for a caller's own name), the one view
// check every library function uses, and the one place cache sizes come from.
#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <string>

#include "core/check.hpp"
#include "ridge/core.hpp"

namespace {

using namespace ridge;

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ArgumentErrors, NameTheArgumentAndCanBeRenamedByTheCaller) {
  try {
    check_arg(false, "inputs", "{} is not an input count (accepted: 1 to 16)", 17);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "inputs");
    EXPECT_STREQ(e.what(), "inputs: 17 is not an input count (accepted: 1 to 16)");
    const Error flag = e.renamed("--inputs");
    EXPECT_EQ(flag.argument(), "--inputs");
    EXPECT_STREQ(flag.what(), "--inputs: 17 is not an input count (accepted: 1 to 16)");
  }
  // Core's parsers and readers raise about the name they were given.
  try {
    numbers::parse_integer("abc", "n", numbers::kCount);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "n");
    EXPECT_EQ(std::string(e.what()).rfind("n: 'abc'", 0), 0u) << e.what();
  }
  // A plain error is about no argument.
  EXPECT_EQ(Error("x").argument(), "");
}

TEST(ViewChecks, OneMessageStyleForMatricesAndTensors) {
  float x[16] = {};
  EXPECT_NO_THROW(check_matrix_view("f", "a", x, 2, 3, 4));
  EXPECT_NO_THROW(check_matrix_view("f", "a", nullptr, 0, 3, 3));
  EXPECT_EQ(message_of([&] { check_matrix_view("f", "a", x, 2, 3, 2); }),
            "f: a.ld = 2 is smaller than its 3 columns (expected ld >= cols)");
  EXPECT_EQ(message_of([&] { check_matrix_view("f", "a", nullptr, 2, 3, 3); }),
            "f: a is null but has shape [2, 3]");
  EXPECT_EQ(message_of([&] { check_matrix_view("f", "a", x, -1, 3, 3); }), "f: a has negative shape [-1, 3]");
  EXPECT_EQ(message_of([&] { check_matrix_view(nullptr, "d", x, 2, 3, 3, 2, 4); }),
            "d is [2, 3], expected [2, 4]");

  const auto t = TensorView<float>::contiguous(x, {2, 2, 4});
  EXPECT_NO_THROW(
      check_tensor_view("g", "b", t.data, t.rank, t.shape, t.stride, {2, 2, 4}, Strides::row_major));
  EXPECT_NO_THROW(check_tensor_view("g", "b", t.data, t.rank, t.shape, t.stride, {2, -1, 4}));
  EXPECT_EQ(message_of([&] {
              check_tensor_view("g", "b", t.data, t.rank, t.shape, t.stride, {2, 2, 4, 1});
            }),
            "g: b has rank 3, expected rank 4 [2, 2, 4, 1]");
  EXPECT_EQ(message_of([&] {
              check_tensor_view("g", "b", t.data, t.rank, t.shape, t.stride, {2, 3, 4});
            }),
            "g: b is [2, 2, 4], expected [2, 3, 4]");
  EXPECT_EQ(message_of([&] {
              check_tensor_view("g", "b", nullptr, t.rank, t.shape, t.stride, {2, 2, 4});
            }),
            "g: b is null but has shape [2, 2, 4]");
  // Row-major layouts: the last dimension contiguous and no overlap between outer indices.
  auto overlap = t;
  overlap.stride[0] = 4;  // groups 0 and 1 share elements
  EXPECT_EQ(message_of([&] {
              check_tensor_view(nullptr, "b", overlap.data, overlap.rank, overlap.shape, overlap.stride,
                                {2, 2, 4}, Strides::row_major);
            }),
            "b.stride[0] = 4 makes its entries overlap (expected >= 8)");
  auto strided = t;
  strided.stride = {8, 4, 2, 0};
  EXPECT_NE(message_of([&] {
              check_tensor_view(nullptr, "b", strided.data, strided.rank, strided.shape, strided.stride,
                                {2, 2, 4}, Strides::row_major);
            }).find("must be contiguous"),
            std::string::npos);
  // Any strides are fine for layouts that allow them (a transposed view).
  EXPECT_NO_THROW(
      check_tensor_view("g", "b", strided.data, strided.rank, strided.shape, strided.stride, {2, 2, 4}));
  // Positive strides: a permuted view is fine; a broadcast (0) or reversed (< 0) dimension is not,
  // unless that dimension has a single entry.
  auto permuted = t;
  permuted.stride = {8, 1, 2, 0};
  EXPECT_NO_THROW(check_tensor_view("g", "b", permuted.data, permuted.rank, permuted.shape, permuted.stride,
                                    {2, 2, 4}, Strides::positive));
  EXPECT_NO_THROW(check_tensor_view("g", "b", strided.data, strided.rank, strided.shape, strided.stride,
                                    {2, 2, 4}, Strides::positive));
  auto broadcast = t;
  broadcast.stride = {0, 4, 1, 0};
  EXPECT_EQ(
      message_of([&] {
        check_tensor_view(nullptr, "q", broadcast.data, broadcast.rank, broadcast.shape, broadcast.stride,
                          {2, 2, 4}, Strides::positive);
      }),
      "q.stride[0] = 0 is not accepted (expected a positive stride: no broadcast or reversed dimension)");
  auto reversed = t;
  reversed.stride = {8, -4, 1, 0};
  EXPECT_EQ(
      message_of([&] {
        check_tensor_view("g", "b", reversed.data, reversed.rank, reversed.shape, reversed.stride, {2, 2, 4},
                          Strides::positive);
      }),
      "g: b.stride[1] = -4 is not accepted (expected a positive stride: no broadcast or reversed dimension)");
  auto single = TensorView<float>::contiguous(x, {2, 1, 4});
  single.stride[1] = 0;
  EXPECT_NO_THROW(check_tensor_view("g", "b", single.data, single.rank, single.shape, single.stride,
                                    {2, 1, 4}, Strides::positive));
}

TEST(CacheSizes, ReportedSizesOrOneFallbackPerLevel) {
  const auto& c = cpu::info().caches;
  const auto s = cpu::cache_sizes();
  EXPECT_EQ(s.l1d, c.l1d > 0 ? c.l1d : cpu::kFallbackL1d);
  EXPECT_EQ(s.l2, c.l2 > 0 ? c.l2 : cpu::kFallbackL2);
  EXPECT_EQ(s.l3, c.l3 > 0 ? c.l3 : cpu::kFallbackL3);
  EXPECT_EQ(s.last_level, c.l3 > 0 ? c.l3 : c.l2 > 0 ? c.l2 : cpu::kFallbackL3);
  EXPECT_GT(s.l1d, 0);
  EXPECT_GT(s.l2, 0);
  EXPECT_GT(s.last_level, 0);
}

}  // namespace
