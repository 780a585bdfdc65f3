// The scalar reference twin of the FP8 GEMM: plain loops with DeepGEMM's two-level accumulation.
// Every optimized path is tested against it, and it is the `scalar` ISA path.
#include <algorithm>
#include <array>
#include <cmath>

#include "gemm/fp8_internal.hpp"
#include "ridge/core/format.hpp"
#include "ridge/core/threads.hpp"

namespace ridge::gemm::fp8 {

const float* e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = to_float(fp8_e4m3{static_cast<uint8_t>(i)});
    return t;
  }();
  return table.data();
}

void run_reference(const Problem& p) {
  const float* lut = e4m3_table();
  const int64_t kblocks = (p.k + 127) / 128;
  auto b_at = [&](int64_t j, int64_t kk) -> uint8_t {
    if (p.b_packed) {
      return p.b_packed[(j / kPanelRows) * p.packed_pairs * kPanelPairBytes + (kk / 2) * kPanelPairBytes +
                        (j % kPanelRows) * 2 + (kk & 1)];
    }
    return p.b[j * p.ldb + kk];
  };
#pragma omp parallel for num_threads(get_num_threads()) schedule(static)
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      float acc = 0.0f;
      for (int64_t kb = 0; kb < kblocks; ++kb) {
        float partial = 0.0f;
        const int64_t k1 = std::min<int64_t>(p.k, (kb + 1) * 128);
        for (int64_t kk = kb * 128; kk < k1; ++kk) partial += lut[p.a[i * p.lda + kk]] * lut[b_at(j, kk)];
        const float s = p.sa[i * p.ldsa + kb] * p.sb[(j / 128) * p.ldsb + kb];
        acc += s * partial;
      }
      if (p.c) acc += p.c[i * p.ldc + j];
      if (p.d_bf16) static_cast<bf16*>(p.d)[i * p.ldd + j] = to_bf16(acc);
      else static_cast<float*>(p.d)[i * p.ldd + j] = acc;
    }
  }
}

}  // namespace ridge::gemm::fp8
