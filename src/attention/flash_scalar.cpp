// FlashAttention-2, scalar reference path: one float per "vector", exact exp2, fp32 block products.
// The other ISA files instantiate the same body (flash_body.inc) and are tested against this one.
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
#include "attention/vec_scalar.inc"

#include "attention/flash_body.inc"
#include "attention/blocks_fp32.inc"

}  // namespace

void forward_scalar(const Problem& p) {
  forward<BlocksFp32>(p);
}
void backward_scalar(const Problem& p) {
  backward<BlocksFp32>(p);
}

Kernels kernels_scalar() {
  return {forward_scalar, backward_scalar};
}

}  // namespace ridge::attention::detail
