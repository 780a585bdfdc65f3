// Decode attention over a paged KV cache, scalar path: one float per "vector", exact exp2, fp32
// products. The other decode_<isa>.cpp files instantiate the same body (decode_body.inc).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "attention/internal.hpp"
#include "ridge/core/memory.hpp"

namespace ridge::attention::detail {
namespace {

#include "simd/scalar.inc"
#include "attention/vec_scalar.inc"
#include "attention/decode_body.inc"

void decode_scalar(const DecodeProblem& p) {
  if (p.bf16)
    decode<uint16_t, DotWiden<uint16_t>>(p);
  else
    decode<float, DotWiden<float>>(p);
}

}  // namespace

DecodeKernels decode_kernels_scalar() {
  return {decode_scalar};
}

}  // namespace ridge::attention::detail
