// bf16 products on the avx512bf16 path: on vdpbf16ps, or on the fp32 FMAs with the operands widened to
// fp32 (a bf16 is the high half of its fp32, so the widening is exact).
#pragma once

namespace ridge::cpu {

// Whether bf16 products go faster on this CPU's fp32 FMAs than on vdpbf16ps. Intel's cores issue
// vdpbf16ps zmm at half the multiply-add rate of vfmadd231ps zmm (the probe on Emerald Rapids: 233
// against 460 GFLOP/s); AMD's Zen 4 at twice it (458 against 229). So: by vendor. The blocked bf16 GEMM
// and FlashAttention's bf16 forward and backward read it on the avx512bf16 path (docs/gemm.md, "bf16 on
// Intel without AMX"); decode kernels are bound by memory and keep theirs.
bool bf16_on_fma();

// Tests: forces the answer for a scope (on: the fp32 FMAs, off: vdpbf16ps), whatever the CPU.
class ScopedBf16OnFma {
 public:
  explicit ScopedBf16OnFma(bool on);
  ~ScopedBf16OnFma();
  ScopedBf16OnFma(const ScopedBf16OnFma&) = delete;
  ScopedBf16OnFma& operator=(const ScopedBf16OnFma&) = delete;

 private:
  int previous_;
};

}  // namespace ridge::cpu
