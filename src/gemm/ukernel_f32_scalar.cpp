// Scalar fp32 micro-kernel, 4x8: the path every machine has, and the twin the wide kernels are
// tested against through the same driver and packing.
#include "gemm/kernel.hpp"

namespace ridge::gemm::detail {
namespace {

constexpr int kMR = 4;
constexpr int kNR = 8;

void ukernel(int64_t kc, const void* a_panel, const void* b_panel, int mr, int nr, const Scales&,
             const Tile& t) {
  const float* a = static_cast<const float*>(a_panel);
  const float* b = static_cast<const float*>(b_panel);
  float acc[kMR][kNR] = {};
  for (int64_t p = 0; p < kc; ++p) {
    for (int i = 0; i < kMR; ++i)
      for (int j = 0; j < kNR; ++j) acc[i][j] += a[i] * b[j];
    a += kMR;
    b += kNR;
  }
  store_tile_generic(&acc[0][0], kNR, mr, nr, t);
}

}  // namespace

KernelInfo kernel_f32_scalar() {
  return KernelInfo{.name = "f32_scalar_4x8",
                    .mr = kMR,
                    .nr = kNR,
                    .panel = Panel::f32,
                    .ukernel = &ukernel,
                    .pack_a = &pack_dense,
                    .pack_b = &pack_dense};
}

}  // namespace ridge::gemm::detail
