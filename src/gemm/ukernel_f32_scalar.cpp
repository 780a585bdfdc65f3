// Scalar micro-kernel: the path every machine has, and the twin the wide kernels are tested
// against through the same driver and packing.
#include <cstring>

#include "gemm/kernel.hpp"

namespace ridge::gemm::detail {
namespace {

constexpr int kMR = 4;
constexpr int kNR = 8;

void ukernel_scalar(int64_t kc, const void* a_panel, const void* b_panel, int mr, int nr, const Tile& t) {
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

void store_tile_generic(const float* acc, int64_t acc_ld, int mr, int nr, const Tile& t) {
  for (int i = 0; i < mr; ++i) {
    for (int j = 0; j < nr; ++j) {
      float v = acc[i * acc_ld + j];
      if (t.src) {
        v += t.src_bf16 ? to_float(static_cast<const bf16*>(t.src)[i * t.lds + j])
                        : static_cast<const float*>(t.src)[i * t.lds + j];
      }
      if (t.dst_bf16) static_cast<bf16*>(t.dst)[i * t.ldd + j] = to_bf16(v);
      else static_cast<float*>(t.dst)[i * t.ldd + j] = v;
    }
  }
}

Tile tile_at(const Tile& t, int64_t i, int64_t j) {
  Tile r = t;
  if (t.src) r.src = static_cast<const char*>(t.src) + (i * t.lds + j) * (t.src_bf16 ? 2 : 4);
  r.dst = static_cast<char*>(t.dst) + (i * t.ldd + j) * (t.dst_bf16 ? 2 : 4);
  return r;
}

KernelInfo kernel_scalar_f32() { return {"f32_scalar_4x8", kMR, kNR, Panel::f32, &ukernel_scalar}; }

}  // namespace ridge::gemm::detail
