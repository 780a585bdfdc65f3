// FlashAttention-2 with AVX-512 (fp32 compute): 16 floats per register, 6 x 4 register
// micro-tiles, exp2 with vscalefps (which also flushes very negative exponents to exactly 0).
// GCC 12 reports its own _mm512_undefined_ps() inside the intrinsics headers as maybe-uninitialized
// (GCC PR 105593), a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "attention/internal.hpp"
#include "ridge/core/format.hpp"
#include "ridge/core/memory.hpp"

namespace ridge::attention::detail {
namespace {

#include "attention/vec_avx512.inc"
#include "attention/flash_impl.inc"

}  // namespace

void forward_avx512(const Problem& p) { forward(p); }
void backward_avx512(const Problem& p) { backward(p); }

}  // namespace ridge::attention::detail
