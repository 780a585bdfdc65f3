// Argument checks shared by the FP8 entry points (dense, grouped, quantization). Not for the per-ISA
// files: they are compiled with wide-ISA flags and must not instantiate shared templates.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ridge/core/error.hpp"
#include "ridge/core/tensor.hpp"
#include "core/check.hpp"

namespace ridge::gemm::fp8 {

// `name` must be exactly [rows, cols], with ld >= cols and data unless it is empty (core's one
// view check and message style).
template <typename T>
void check_matrix(const MatrixView<T>& v, const char* name, int64_t rows, int64_t cols) {
  check_matrix_view(nullptr, name, v.data, v.rows, v.cols, v.ld, rows, cols);
}

}  // namespace ridge::gemm::fp8
