// The one GEMM driver (driver.cpp): D[m, n] = (C +) A x B over K, for every dtype. The entry points
// (api_dense.cpp, api_fp8.cpp, api_fp8_grouped.cpp) check their arguments (check.hpp) and hand it a
// validated Problem; the kernel description (kernel.hpp) says what the dtype supplies.
#pragma once

#include <cstdint>
#include <span>

#include "core/dispatch.hpp"
#include "gemm/kernel.hpp"
#include "ridge/gemm.hpp"
#include "ridge/gemm_fp8.hpp"

namespace ridge::gemm::detail {

// One GEMM problem as the driver sees it, dtypes erased. Shapes and strides already checked.
struct Problem {
  int64_t m = 0, n = 0, k = 0;
  Operand a, b;  // A [m, k] (or [k, m] K-major), B [n, k] (or [k, n] K-major)
  // FP8 two-level scales (null otherwise): sa [m, ceil(k/128)], sb [ceil(n/128), ceil(k/128)].
  const float* sa = nullptr;
  int64_t ldsa = 0;
  const float* sb = nullptr;
  int64_t ldsb = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  bool d_bf16 = false;
  const void* c = nullptr;  // or null; may be d itself (same pointer, ld and dtype)
  int64_t ldc = 0;
  bool c_bf16 = false;
  // A PackedB: B's panels for the kernel `packed_ki`, over all of K, used as they are.
  const std::byte* b_panels = nullptr;
  const KernelInfo* packed_ki = nullptr;
};

// Runs p on the kernels the dispatch policy chooses for its input element type, the small-m one for
// decode rows and the blocked one (or packed_ki) for the rest.
void run(const Problem& p);

// A grouped GEMM's group as rows [r0, r0 + m) of A (row stride lda) and of D (row stride ldd): sets p's
// m, A and D (n, k, B, the dtypes and any scales are the caller's).
template <typename TA, typename TD>
void set_group_rows(Problem& p, const TA* a, int64_t lda, TD* d, int64_t ldd, int64_t r0, int64_t m) {
  p.m = m;
  p.a.data = a + r0 * lda;
  p.a.ld = lda;
  p.a.rows = m;
  p.d = d + r0 * ldd;
  p.ldd = ldd;
}

// A PackedFp8B as p's B, its scales with it (api_fp8.cpp; p.n and p.k already b's, as the caller checked).
void set_packed_fp8_b(Problem& p, const PackedFp8B& b);

// Runs every problem of a grouped GEMM (one per group of an MoE layer; one input element type, as
// checked by the caller), each element computed as run() would compute it for its problem alone.
void run_grouped(std::span<const Problem> problems);

// The kernel description for work of an input element type as the policy chose it.
KernelInfo kernel_for(Elem in, const dispatch::Choice& c);
// The kernel for `work` of input type `in` on path `isa`, the policy's other switches as they stand.
KernelInfo select_kernel(Elem in, dispatch::Work work, cpu::Isa isa);

// The blocking the driver derives for a kernel and depth k from the cache sizes.
Blocking derive_blocking(const KernelInfo& ki, int64_t k);

}  // namespace ridge::gemm::detail
