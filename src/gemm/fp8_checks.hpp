// Argument checks shared by the FP8 entry points (dense, grouped, quantization). Not for the per-ISA
// files: they are compiled with wide-ISA flags and must not instantiate shared templates.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ridge/core/error.hpp"
#include "ridge/core/tensor.hpp"
#include "core/check.hpp"

namespace ridge::gemm::fp8 {

// `name` must be exactly [rows, cols], with ld >= cols and data unless it is empty.
template <typename T>
void check_matrix(const MatrixView<T>& v, const char* name, int64_t rows, int64_t cols) {
  check(v.rows == rows && v.cols == cols, "{}: expected shape [{}, {}], got [{}, {}]", name, rows, cols, v.rows,
        v.cols);
  check(v.ld >= std::max<int64_t>(cols, 1), "{}: leading dimension {} is smaller than its {} columns", name, v.ld,
        cols);
  check(v.data != nullptr || rows * cols == 0, "{}: null data for a non-empty [{}, {}] matrix", name, rows, cols);
}

}  // namespace ridge::gemm::fp8
