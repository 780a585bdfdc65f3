// The Tile epilogue every micro-kernel ends with, in its plain form (the AVX-512 kernels' vector
// form is store_tile_x32 in epilogue_avx512.inc): D = C (first K block), the previous partial sum, or
// nothing, plus the tile's accumulators, stored as fp32 or rounded once to bf16 (ridge::to_bf16).
#include "gemm/kernel.hpp"

namespace ridge::gemm::detail {

void store_tile_generic(const float* acc, int64_t acc_ld, int mr, int nr, const Tile& t) {
  for (int i = 0; i < mr; ++i) {
    for (int j = 0; j < nr; ++j) {
      float v = acc[i * acc_ld + j];
      if (t.src) {
        v += t.src_bf16 ? to_float(static_cast<const bf16*>(t.src)[i * t.lds + j])
                        : static_cast<const float*>(t.src)[i * t.lds + j];
      }
      if (t.dst_bf16)
        static_cast<bf16*>(t.dst)[i * t.ldd + j] = to_bf16(v);
      else
        static_cast<float*>(t.dst)[i * t.ldd + j] = v;
    }
  }
}

Tile tile_at(const Tile& t, int64_t i, int64_t j) {
  Tile r = t;
  if (t.src) r.src = static_cast<const char*>(t.src) + (i * t.lds + j) * (t.src_bf16 ? 2 : 4);
  r.dst = static_cast<char*>(t.dst) + (i * t.ldd + j) * (t.dst_bf16 ? 2 : 4);
  return r;
}

}  // namespace ridge::gemm::detail
