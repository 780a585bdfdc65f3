// Dense GEMM in the four layouts DeepGEMM names (nt, nn, tn, tt), optionally D = C + op(A) op(B).
// Views are the operands as stored; m, n and k come from their shapes:
//   nt: A [m,k], B [n,k]   D = A B^T      (the forward pass: activations times weights)
//   nn: A [m,k], B [k,n]   D = A B        (dX = dY W)
//   tn: A [k,m], B [k,n]   D = A^T B      (dW = dY^T X)
//   tt: A [k,m], B [n,k]   D = A^T B^T
// No transpose is ever materialised: the packers read each operand in its stored orientation
// into the same micro-kernel panels, so one driver, blocking and thread split serve every layout.
// The small-m (decode) path, m <= 64 (16 on AVX2), is nt-only; the other layouts take the blocked path.
//
// Every matrix is row-major with a leading-dimension stride (MatrixView::ld, in elements, >= cols).
// Accumulation is always fp32; the output is fp32 or bf16 (rounded to nearest even once, at the
// end). C has the output's dtype and shape and may alias D exactly (same pointer and ld: in-place
// accumulate); any other overlap between D and A, B or C is rejected. Bad shapes, strides or
// null pointers throw ridge::Error naming the argument.
//
// The path (scalar, avx2, avx512, avx512bf16) follows ridge::cpu::active_isa(); threads follow
// ridge::get_num_threads().
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ridge/core/cpu.hpp"
#include "ridge/core/format.hpp"
#include "ridge/core/tensor.hpp"

namespace ridge::gemm {

// ---- fp32 inputs ----
void f32_gemm_nt(MatrixView<const float> a, MatrixView<const float> b, MatrixView<float> d,
                 MatrixView<const float> c = {});
void f32_gemm_nt(MatrixView<const float> a, MatrixView<const float> b, MatrixView<bf16> d,
                 MatrixView<const bf16> c = {});

// ---- bf16 inputs, fp32 accumulation ----
void bf16_gemm_nt(MatrixView<const bf16> a, MatrixView<const bf16> b, MatrixView<float> d,
                  MatrixView<const float> c = {});
void bf16_gemm_nt(MatrixView<const bf16> a, MatrixView<const bf16> b, MatrixView<bf16> d,
                  MatrixView<const bf16> c = {});

enum class Layout { nt, nn, tn, tt };
const char* layout_name(Layout layout);
// "nt", "nn", "tn" or "tt"; anything else throws ridge::Error naming `what`.
Layout parse_layout(const std::string& text, const char* what = "layout");

// Any layout by value (the named functions below forward here).
void f32_gemm(Layout layout, MatrixView<const float> a, MatrixView<const float> b, MatrixView<float> d,
              MatrixView<const float> c = {});
void f32_gemm(Layout layout, MatrixView<const float> a, MatrixView<const float> b, MatrixView<bf16> d,
              MatrixView<const bf16> c = {});
void bf16_gemm(Layout layout, MatrixView<const bf16> a, MatrixView<const bf16> b, MatrixView<float> d,
               MatrixView<const float> c = {});
void bf16_gemm(Layout layout, MatrixView<const bf16> a, MatrixView<const bf16> b, MatrixView<bf16> d,
               MatrixView<const bf16> c = {});

// nn: A [m,k], B [k,n]
void f32_gemm_nn(MatrixView<const float> a, MatrixView<const float> b, MatrixView<float> d,
                 MatrixView<const float> c = {});
void f32_gemm_nn(MatrixView<const float> a, MatrixView<const float> b, MatrixView<bf16> d,
                 MatrixView<const bf16> c = {});
void bf16_gemm_nn(MatrixView<const bf16> a, MatrixView<const bf16> b, MatrixView<float> d,
                  MatrixView<const float> c = {});
void bf16_gemm_nn(MatrixView<const bf16> a, MatrixView<const bf16> b, MatrixView<bf16> d,
                  MatrixView<const bf16> c = {});
// tn: A [k,m], B [k,n]
void f32_gemm_tn(MatrixView<const float> a, MatrixView<const float> b, MatrixView<float> d,
                 MatrixView<const float> c = {});
void f32_gemm_tn(MatrixView<const float> a, MatrixView<const float> b, MatrixView<bf16> d,
                 MatrixView<const bf16> c = {});
void bf16_gemm_tn(MatrixView<const bf16> a, MatrixView<const bf16> b, MatrixView<float> d,
                  MatrixView<const float> c = {});
void bf16_gemm_tn(MatrixView<const bf16> a, MatrixView<const bf16> b, MatrixView<bf16> d,
                  MatrixView<const bf16> c = {});
// tt: A [k,m], B [n,k]
void f32_gemm_tt(MatrixView<const float> a, MatrixView<const float> b, MatrixView<float> d,
                 MatrixView<const float> c = {});
void f32_gemm_tt(MatrixView<const float> a, MatrixView<const float> b, MatrixView<bf16> d,
                 MatrixView<const bf16> c = {});
void bf16_gemm_tt(MatrixView<const bf16> a, MatrixView<const bf16> b, MatrixView<float> d,
                  MatrixView<const float> c = {});
void bf16_gemm_tt(MatrixView<const bf16> a, MatrixView<const bf16> b, MatrixView<bf16> d,
                  MatrixView<const bf16> c = {});

// B packed once into the micro-kernel's panel layout for the ISA path active when packing, then
// reused by many calls (weights). Using it under a different ISA path throws ridge::Error.
class PackedB {
 public:
  PackedB();
  ~PackedB();
  PackedB(PackedB&&) noexcept;
  PackedB& operator=(PackedB&&) noexcept;

  static PackedB pack(MatrixView<const float> b);
  static PackedB pack(MatrixView<const bf16> b);

  int64_t n() const;
  int64_t k() const;
  DType dtype() const;  // dtype of the B that was packed (f32 or bf16)
  cpu::Isa isa() const;
  bool empty() const;

  struct Impl;
  const Impl& impl() const;

 private:
  std::unique_ptr<Impl> impl_;
};

void f32_gemm_nt(MatrixView<const float> a, const PackedB& b, MatrixView<float> d,
                 MatrixView<const float> c = {});
void f32_gemm_nt(MatrixView<const float> a, const PackedB& b, MatrixView<bf16> d,
                 MatrixView<const bf16> c = {});
void bf16_gemm_nt(MatrixView<const bf16> a, const PackedB& b, MatrixView<float> d,
                  MatrixView<const float> c = {});
void bf16_gemm_nt(MatrixView<const bf16> a, const PackedB& b, MatrixView<bf16> d,
                  MatrixView<const bf16> c = {});

// Shapes with an unpacked B and m <= 64 on the AVX-512 paths (m <= 16 on AVX2, and for bf16 where the
// blocked work runs on AMX tiles or the FMAs) take a small-m path (B read once as it lies, never
// packed); the result differs from the packed path only by summation order.
//
// Scalar reference twins: plain loops, fp32 accumulation in k order. The oracle the tests hold
// every optimized path against (together with an fp64 product).
void f32_gemm_nt_reference(MatrixView<const float> a, MatrixView<const float> b, MatrixView<float> d,
                           MatrixView<const float> c = {});
void bf16_gemm_nt_reference(MatrixView<const bf16> a, MatrixView<const bf16> b, MatrixView<float> d,
                            MatrixView<const float> c = {});
void f32_gemm_reference(Layout layout, MatrixView<const float> a, MatrixView<const float> b,
                        MatrixView<float> d, MatrixView<const float> c = {});
void bf16_gemm_reference(Layout layout, MatrixView<const bf16> a, MatrixView<const bf16> b,
                         MatrixView<float> d, MatrixView<const float> c = {});
void f32_gemm_nn_reference(MatrixView<const float> a, MatrixView<const float> b, MatrixView<float> d,
                           MatrixView<const float> c = {});
void f32_gemm_tn_reference(MatrixView<const float> a, MatrixView<const float> b, MatrixView<float> d,
                           MatrixView<const float> c = {});
void f32_gemm_tt_reference(MatrixView<const float> a, MatrixView<const float> b, MatrixView<float> d,
                           MatrixView<const float> c = {});
void bf16_gemm_nn_reference(MatrixView<const bf16> a, MatrixView<const bf16> b, MatrixView<float> d,
                            MatrixView<const float> c = {});
void bf16_gemm_tn_reference(MatrixView<const bf16> a, MatrixView<const bf16> b, MatrixView<float> d,
                            MatrixView<const float> c = {});
void bf16_gemm_tt_reference(MatrixView<const bf16> a, MatrixView<const bf16> b, MatrixView<float> d,
                            MatrixView<const float> c = {});

// Cache blocking the driver derives from cpu::info().caches for the active ISA path (exposed for
// the benchmark notes and tests).
struct Blocking {
  int mr = 0, nr = 0;  // micro-tile
  int64_t kc = 0;      // depth of one packed block (B micro-panel KC x NR = 1/8 of L2)
  int64_t mc = 0;      // rows of one packed A block (MC x KC = 1/2 of L2)
  int64_t nc = 0;      // columns of B per outer block (K x NC in this thread's share of L3)
  const char* kernel = "";
};
// The blocking the one driver derives for an input dtype (f32, bf16 or fp8_e4m3: the FP8 GEMM's) on an
// ISA path and depth k.
Blocking blocking(DType input, cpu::Isa isa, int64_t k);

// Threads used by the GEMMs (forwards to ridge::get_num_threads / set_num_threads).
int get_num_threads();
void set_num_threads(int n);

}  // namespace ridge::gemm

#include "ridge/gemm_grouped.hpp"
#if defined(__has_include)
#if __has_include("ridge/gemm_fp8.hpp")
#include "ridge/gemm_fp8.hpp"
#endif
#endif
