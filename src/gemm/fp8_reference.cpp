// The scalar reference twin of the FP8 GEMM: plain loops with DeepGEMM's two-level accumulation,
// apart from the driver, its packers and kernels. Every path (the scalar one included) is tested
// against it. Also the e4m3 -> fp32 table the packers widen through.
#include <algorithm>
#include <array>

#include "gemm/check.hpp"
#include "gemm/kernel.hpp"
#include "ridge/core/format.hpp"
#include "ridge/core/threads.hpp"
#include "ridge/gemm_fp8.hpp"

namespace ridge::gemm {

const float* fp8::e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = to_float(fp8_e4m3{static_cast<uint8_t>(i)});
    return t;
  }();
  return table.data();
}

void fp8_gemm_nt_reference(MatrixView<const fp8_e4m3> a, MatrixView<const float> sa,
                           MatrixView<const fp8_e4m3> b, MatrixView<const float> sb, MatrixView<float> d,
                           MatrixView<const float> c) {
  check(b.cols == a.cols, "b: expected {} columns (k, the columns of a), got {}", a.cols, b.cols);
  check_fp8_a_d_c(a, sa, b.rows, a.cols, d, c);
  check_matrix(b, "b", b.rows, a.cols);
  check_matrix(sb, "b_scales", fp8_scale_blocks(b.rows), fp8_scale_blocks(a.cols));
  const float* lut = fp8::e4m3_table();
  const int64_t m = a.rows, n = b.rows, k = a.cols, kblocks = fp8_scale_blocks(k);
#pragma omp parallel for num_threads(get_num_threads()) schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t kb = 0; kb < kblocks; ++kb) {
        float partial = 0.0f;
        const int64_t k1 = std::min<int64_t>(k, (kb + 1) * 128);
        for (int64_t kk = kb * 128; kk < k1; ++kk) partial += lut[a(i, kk).bits] * lut[b(j, kk).bits];
        acc += sa(i, kb) * sb(j / 128, kb) * partial;
      }
      if (c.data) acc += c(i, j);
      d(i, j) = acc;
    }
  }
}

}  // namespace ridge::gemm
