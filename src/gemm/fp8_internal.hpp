// Internals of the FP8 GEMM: the validated problem handed from the public entry points to one
// per-ISA implementation. Per-ISA files keep everything else in anonymous namespaces (ODR) and
// expose only the plain functions declared here.
#pragma once

#include <cstdint>

#include "ridge/core/cpu.hpp"

namespace ridge::gemm::fp8 {

// Rows of B per packed panel, and bytes per k-pair of a panel (32 rows x 2 fp8 = one cache line).
inline constexpr int64_t kPanelRows = 32;
inline constexpr int64_t kPanelPairBytes = 64;

// D[m,n] = (C +) two-level-scaled A * B^T. Shapes and strides already checked by the caller.
struct Problem {
  int64_t m = 0, n = 0, k = 0;
  const uint8_t* a = nullptr;  // fp8 e4m3 [m, lda]
  int64_t lda = 0;
  const float* sa = nullptr;  // [m, ldsa], column kb scales A[:, kb*128 .. +128)
  int64_t ldsa = 0;
  // B is either raw rows ([n, ldb]) or packed panels (b_packed, see PackedFp8B::Impl).
  const uint8_t* b = nullptr;
  int64_t ldb = 0;
  const uint8_t* b_packed = nullptr;
  int64_t packed_pairs = 0;  // k-pairs per packed panel (ceil(k/2))
  const float* sb = nullptr;  // [ceil(n/128), ldsb]
  int64_t ldsb = 0;
  void* d = nullptr;  // fp32 or bf16 [m, ldd]
  int64_t ldd = 0;
  bool d_bf16 = false;
  const float* c = nullptr;  // fp32 [m, ldc] or null
  int64_t ldc = 0;
  int64_t expected_m = 0;  // blocking hint (0: use m)
};

// One entry per path. The scalar one is the reference.
void run_reference(const Problem& p);
void run_avx2(const Problem& p);
void run_avx512(const Problem& p);
void run_avx512bf16(const Problem& p);
void run_avx512bf16_vbmi(const Problem& p);  // the same, widening with byte permutes (AVX512_VBMI)

// Whether the avx512bf16 path may use its VBMI variant when the CPU has VBMI (default yes). Tests
// turn it off to check the generic widening on a machine that has both.
void allow_vbmi(bool allowed);
bool uses_vbmi();  // allowed, and the CPU has it

// Runs `p` on the active ISA path.
void run(const Problem& p);

// fp8 e4m3 -> float for all 256 codes (NaN codes give NaN).
const float* e4m3_table();

}  // namespace ridge::gemm::fp8
