// FlashAttention-2 with AVX-512 + AVX512_BF16: the same body (flash_body.inc) with two block-product
// policies. fp32 operands take the fp32 one (as flash_avx512.cpp); bf16 operands take vdpbf16ps for
// every product, with P and dS rounded to bf16 for the products that consume them (blocks_bf16.inc).
//
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
#include "attention/blocks_bf16.inc"

}  // namespace

void forward_avx512bf16(const Problem& p) {
  if (p.bf16)
    forward<BlocksBf16>(p);
  else
    forward<BlocksFp32>(p);
}
void backward_avx512bf16(const Problem& p) {
  if (p.bf16)
    backward<BlocksBf16>(p);
  else
    backward<BlocksFp32>(p);
}

Kernels kernels_avx512bf16() {
  return {forward_avx512bf16, backward_avx512bf16};
}

}  // namespace ridge::attention::detail
