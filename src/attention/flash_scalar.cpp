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

struct V {
  using R = float;
  static constexpr int W = 1;
  static constexpr int RMAX = 4, CVMAX = 4;
  static R zero() { return 0.0f; }
  static R load(const float* p) { return *p; }
  static void store(float* p, R x) { *p = x; }
  static R set1(float x) { return x; }
  static R fma(R a, R b, R c) { return a * b + c; }
  static R add(R a, R b) { return a + b; }
  static R sub(R a, R b) { return a - b; }
  static R mul(R a, R b) { return a * b; }
  static R max(R a, R b) { return a > b ? a : b; }
  static R min(R a, R b) { return a < b ? a : b; }
  static R exp2(R x) { return exp2f(x); }
  static bool any_huge(R x) {
    return x >= 0x1p20f ? x != std::numeric_limits<float>::infinity()
                        : x <= -0x1p20f && x != -std::numeric_limits<float>::infinity();
  }
};

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
