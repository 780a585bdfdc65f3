// The experiment behind the AVX2 decode kernel's blocking per m (docs/jit.md, "The blocking per m"): one
// call of small_m_avx2.inc's blocks kernel with a chosen MI x NJ, so `ridge bench jit --set
// phase=blocking` times the candidates against each other. Compiled with AVX2 flags (the file's
// suffix); shares nothing inline with plain code (docs/core.md, "Per-ISA convention").
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "gemm/kernel.hpp"

namespace ridge::gemm::detail {
namespace {

#include "simd/scalar.inc"
#include "gemm/small_m_avx2.inc"

}  // namespace

// D[0:m, 0:n] = A B^T with fp32 A (m x k, row stride k: as the kernel's widened scratch holds it) and
// fp32 B (n x k, row stride k), on the calling thread, in blocks of 4 x 2 (variant 0), 6 x 2 (1) or
// 8 x 1 (2) rows of A x rows of B. Returns false for an unknown variant.
bool bench_blocks_avx2(int variant, int64_t m, int64_t n, int64_t k, const float* a, const float* b,
                       float* d) {
  Tile t;
  t.dst = d;
  t.ldd = n;
  if (variant == 0)
    small_m_blocks_avx2<BF32, float, 4, 2>(m, 0, n, k, a, b, k, t);
  else if (variant == 1)
    small_m_blocks_avx2<BF32, float, 6, 2>(m, 0, n, k, a, b, k, t);
  else if (variant == 2)
    small_m_blocks_avx2<BF32, float, 8, 1>(m, 0, n, k, a, b, k, t);
  else
    return false;
  return true;
}

}  // namespace ridge::gemm::detail
