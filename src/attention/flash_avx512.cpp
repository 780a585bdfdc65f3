// FlashAttention-2 with AVX-512 (fp32 compute): 16 floats per register, 6 x 4 register
// micro-tiles, exp2 with vscalefps (simd/avx512.inc), fp32 block products.
// GCC 12 reports its own _mm512_undefined_ps() inside the intrinsics headers as maybe-uninitialized
// (GCC PR 105593), a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "attention/internal.hpp"
#include "ridge/core/format.hpp"
#include "ridge/core/memory.hpp"

namespace ridge::attention::detail {
namespace {

#include "simd/scalar.inc"
#include "simd/avx512.inc"
#include "attention/vec_avx512.inc"
#include "attention/flash_body.inc"
#include "attention/blocks_fp32.inc"

}  // namespace

void forward_avx512(const Problem& p) {
  forward<BlocksFp32>(p);
}
void backward_avx512(const Problem& p) {
  backward<BlocksFp32>(p);
}

Kernels kernels_avx512() {
  return {forward_avx512, backward_avx512};
}

}  // namespace ridge::attention::detail
