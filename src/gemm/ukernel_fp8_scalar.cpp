// Scalar FP8 micro-kernel, 4x8, on fp32 panels (fp8 widened through the e4m3 table while packing):
// each 128-wide K block summed in a fresh partial tile, promoted with its two scales, then the Tile
// epilogue. The FP8 `scalar` ISA path; fp8_reference.cpp keeps the independent plain-loop twin.
#include "gemm/kernel.hpp"

namespace ridge::gemm::detail {
namespace {

constexpr int kMR = 4;
constexpr int kNR = 8;

void ukernel(int64_t kc, const void* a_panel, const void* b_panel, int mr, int nr, const Scales& s,
             const Tile& t) {
  const float* a = static_cast<const float*>(a_panel);
  const float* b = static_cast<const float*>(b_panel);
  float acc[kMR][kNR] = {};
  for (int64_t kb = 0, k0 = 0; k0 < kc; ++kb, k0 += 128) {
    const int64_t k1 = k0 + 128 < kc ? k0 + 128 : kc;
    float part[kMR][kNR] = {};
    for (int64_t p = k0; p < k1; ++p)
      for (int i = 0; i < kMR; ++i)
        for (int j = 0; j < kNR; ++j) part[i][j] += a[p * kMR + i] * b[p * kNR + j];
    for (int i = 0; i < mr; ++i) {
      const float sc = s.a[i * s.lda + kb] * s.b[kb];
      for (int j = 0; j < kNR; ++j) acc[i][j] += sc * part[i][j];
    }
  }
  store_tile_generic(&acc[0][0], kNR, mr, nr, t);
}

}  // namespace

KernelInfo kernel_fp8_scalar() {
  return KernelInfo{.name = "fp8_scalar_4x8",
                    .mr = kMR,
                    .nr = kNR,
                    .panel = Panel::f32,
                    .k_granule = 128,
                    .ukernel = &ukernel,
                    .pack_a = &pack_fp8_lut,
                    .pack_b = &pack_fp8_lut,
                    .narrow_max_rows = 32};
}

}  // namespace ridge::gemm::detail
