// Internals shared by the GEMM driver and the per-ISA micro-kernel files. Per-ISA files keep
// everything in anonymous namespaces and expose only the plain functions declared here (ODR: no
// inline function compiled with wide-ISA flags may be merged into a plain x86-64 caller).
#pragma once

#include <cstdint>

#include "ridge/core/cpu.hpp"
#include "ridge/core/format.hpp"

namespace ridge::gemm::detail {

// How a packed panel holds K.
enum class Panel {
  f32,       // one fp32 per (k, row): [k][R]
  bf16pair,  // two bf16 per (k-pair, row), for vdpbf16ps: [k/2][R][2]; K padded to even with 0
};

// Where a micro-tile's result goes: dst = (src ? src : 0) + acc, for the first `mr` rows and `nr`
// columns. src may equal dst (in-place accumulate). Pointers are at the tile's origin.
struct Tile {
  const void* src = nullptr;
  int64_t lds = 0;
  bool src_bf16 = false;
  void* dst = nullptr;
  int64_t ldd = 0;
  bool dst_bf16 = false;
};

// acc[mr x NR] = sum over kc of A-panel (MR rows) x B-panel (NR columns), then the Tile epilogue.
// kc counts k elements (for bf16pair, the panels hold ceil(kc/2) pairs). 1 <= mr <= MR, 1 <= nr <= NR.
using MicroKernel = void (*)(int64_t kc, const void* a, const void* b, int mr, int nr, const Tile& t);

// Small-m ("decode") path: D[0:m, n0:n1] as dot products over k read straight from the row-major
// operands, B streamed once with no packing (the op is memory-bound). t is at D's origin.
using SmallMKernel = void (*)(int64_t m, int64_t n0, int64_t n1, int64_t k, const void* a, int64_t lda,
                              const void* b, int64_t ldb, const Tile& t);

// Packs 32-bit words (fp32 values or bf16 pairs): dst[p * R + r] = word p of row r for r < rows,
// 0 for rows <= r < R, p < words; row r starts at src + r * ld_bytes. R <= 32.
using PackWords = void (*)(const void* src, int64_t ld_bytes, int rows, int64_t words, int R, uint32_t* dst);
void pack_words_avx512(const void* src, int64_t ld_bytes, int rows, int64_t words, int R, uint32_t* dst);

// Packs a K-major bf16 operand ([k, rows], ld elements; src at k = 0, row = 0) into bf16-pair
// panels of R rows: the word for (k-pair p, row r) of panel q is at dst[q * R * ceil(kc/2) + p * R + r],
// low half k = 2p, high half k = 2p + 1 (0 past kc); rows past `count` are 0.
using PackKmajorPairs = void (*)(const uint16_t* src, int64_t ld, int64_t count, int64_t kc, int R, uint32_t* dst);

// The tile of t starting at row i, column j.
Tile tile_at(const Tile& t, int64_t i, int64_t j);

struct KernelInfo {
  const char* name = "";
  int mr = 0, nr = 0;
  Panel panel = Panel::f32;
  MicroKernel ukernel = nullptr;
  SmallMKernel small_m = nullptr;  // for the inputs this kernel takes, when the ISA has one
  PackWords pack_words = nullptr;  // vector transpose for packing, when the ISA has one
  PackKmajorPairs pack_kmajor_pairs = nullptr;  // for nn/tn/tt operands, when the ISA has one
};

// One per ISA file. The bf16pair kernel exists only in the avx512bf16 file.
KernelInfo kernel_scalar_f32();
KernelInfo kernel_avx2_f32();
KernelInfo kernel_avx512_f32();
KernelInfo kernel_avx512bf16_bf16();

// The kernel the driver uses for an input dtype (f32 or bf16) on an ISA path.
KernelInfo select_kernel(bool bf16_inputs, cpu::Isa isa);

// Epilogue for tiles with a bf16 side, shared by the scalar path (exact ridge::to_bf16 rounding).
void store_tile_generic(const float* acc, int64_t acc_ld, int mr, int nr, const Tile& t);

}  // namespace ridge::gemm::detail
