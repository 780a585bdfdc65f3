// DType names and views; thread-count control.
#include <gtest/gtest.h>

#include <string>

#include "ridge/core.hpp"

namespace {

using namespace ridge;

const DType kAll[] = {DType::f64,      DType::f32,      DType::bf16, DType::fp16,
                      DType::fp8_e4m3, DType::fp8_e5m2, DType::i8,   DType::i32};

TEST(Tensor, DtypeNamesRoundTripAndSizesMatchTheTypes) {
  for (DType t : kAll) EXPECT_EQ(parse_dtype(dtype_name(t)), t) << dtype_name(t);
  EXPECT_EQ(dtype_size(DType::f64), sizeof(double));
  EXPECT_EQ(dtype_size(DType::f32), sizeof(float));
  EXPECT_EQ(dtype_size(DType::bf16), sizeof(bf16));
  EXPECT_EQ(dtype_size(DType::fp16), sizeof(fp16));
  EXPECT_EQ(dtype_size(DType::fp8_e4m3), sizeof(fp8_e4m3));
  EXPECT_EQ(dtype_size(DType::fp8_e5m2), sizeof(fp8_e5m2));
  EXPECT_EQ(dtype_size(DType::i8), sizeof(int8_t));
  EXPECT_EQ(dtype_size(DType::i32), sizeof(int32_t));
  EXPECT_EQ(dtype_of<bf16>(), DType::bf16);
  EXPECT_EQ(dtype_of<fp8_e5m2>(), DType::fp8_e5m2);
}

TEST(Tensor, ParseDtypeAcceptsAliasesAndRejectsOthers) {
  EXPECT_EQ(parse_dtype("f32"), DType::f32);
  EXPECT_EQ(parse_dtype("fp8"), DType::fp8_e4m3);
  EXPECT_EQ(parse_dtype("e4m3"), DType::fp8_e4m3);
  EXPECT_EQ(parse_dtype("e5m2"), DType::fp8_e5m2);
  EXPECT_EQ(parse_dtype("f16"), DType::fp16);
  EXPECT_EQ(parse_dtype("int32"), DType::i32);
  for (const char* bad : {"", "float", "fp4", "BF16 ", "int4"}) {
    try {
      parse_dtype(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("dtype:", 0), 0u) << msg;
      EXPECT_NE(msg.find("fp8_e4m3"), std::string::npos) << msg;  // lists what is accepted
    }
  }
}

TEST(Tensor, ContiguousViewHasRowMajorStrides) {
  float data[2 * 3 * 4];
  const auto v = TensorView<float>::contiguous(data, {2, 3, 4});
  EXPECT_EQ(v.rank, 3);
  EXPECT_EQ(v.numel(), 24);
  EXPECT_EQ(v.stride[0], 12);
  EXPECT_EQ(v.stride[1], 4);
  EXPECT_EQ(v.stride[2], 1);
  EXPECT_THROW(TensorView<float>::contiguous(data, {1, 2, 3, 4, 1}), Error);
  EXPECT_THROW(TensorView<float>::contiguous(data, {2, -3}), Error);
  MatrixView<float> m{data, 3, 4, 8};
  m(2, 1) = 5.0f;
  EXPECT_EQ(data[2 * 8 + 1], 5.0f);
}

TEST(Threads, SetNumThreadsValidatesAndSticks) {
  const int before = get_num_threads();
  EXPECT_GE(before, 1);
  EXPECT_THROW(set_num_threads(0), Error);
  EXPECT_THROW(set_num_threads(-2), Error);
  EXPECT_EQ(get_num_threads(), before);
  set_num_threads(3);
  EXPECT_EQ(get_num_threads(), 3);
  set_num_threads(before);
  EXPECT_EQ(get_num_threads(), before);
  try {
    set_num_threads(0);
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("threads:", 0), 0u) << e.what();
  }
}

}  // namespace
