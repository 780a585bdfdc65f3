// What a dtype supplies to the one GEMM driver (driver.cpp): a kernel description (KernelInfo) with
// its micro-tile, panel format, K granule, packers, micro-kernel and optional small-m kernel. fp32,
// bf16 and FP8 differ only in these data; the loops, blocking, thread grid, workspace and epilogue
// are the driver's. Which description serves the blocked work and which the small-m work is the
// dispatch policy's (core/dispatch.hpp; driver.hpp: select_kernel).
//
// Per-ISA files keep everything in anonymous namespaces and expose only the plain functions declared
// here (ODR: no inline function compiled with wide-ISA flags may be merged into a plain x86-64 caller).
#pragma once

#include <cstddef>
#include <cstdint>

#include "ridge/core/cpu.hpp"
#include "ridge/core/format.hpp"
#include "gemm/abi.hpp"

namespace ridge::gemm::detail {

// How a packed panel holds K.
enum class Panel {
  f32,       // one fp32 per (k, row): [k][R]
  bf16pair,  // two bf16 per (k-pair, row), for vdpbf16ps: [k/2][R][2]; K padded to even with 0
  amx,       // AMX tiles (amx_body.inc): K padded to a multiple of 32 with 0; B as bf16pair, A as
             // [k/32][R][32] (one 64-byte tile row per row and 32-deep chunk)
};

// An operand's element type in memory.
enum class Elem { f32, bf16, fp8 };

// Bytes per element of a panel, and K as a panel stores it (bf16 pairs pad K to even). Plain
// functions (pack.cpp), not inline: this header is included by ISA-flagged files.
size_t panel_elt(Panel p);
int64_t panel_k(Panel p, int64_t k);

// FP8's two-level scaling for one micro-kernel call (null `a` for fp32/bf16): a at the tile's first
// row and the call's first 128-wide K block (row stride lda); b at the tile's 128-column block and the
// same K block. A call's K starts on a 128 boundary (the kernel's k_granule), so the call promotes
// each of its 128-wide K blocks kb with a[i * lda + kb] * b[kb].
struct Scales {
  const float* a = nullptr;
  int64_t lda = 0;
  const float* b = nullptr;
};

// acc[mr x NR] = sum over kc of A-panel (MR rows) x B-panel (NR columns) (per 128-K block promoted
// with the scales for FP8), then the Tile epilogue. kc counts k elements (for bf16pair, the panels
// hold ceil(kc/2) pairs). 1 <= mr <= MR, 1 <= nr <= NR.
using MicroKernel = void (*)(int64_t kc, const void* a, const void* b, int mr, int nr, const Scales& s,
                             const Tile& t);

// One operand as stored: rows (m for A, n for B) by k.
struct Operand {
  const void* data = nullptr;
  int64_t ld = 0;
  Elem elem = Elem::f32;
  int64_t rows = 0, k = 0;  // the whole operand's rows (m or n) and depth, for prefetch bounds
  bool kmajor = false;      // stored [k, rows] (A of tn/tt, B of nn/tn)
  bool fp8_panels = false;  // a PackedFp8B: data = [panels][pairs][32 rows][2] bytes, ld = pairs
  bool fp8_finite = false;  // fp8 codes known to hold no NaN (a PackedFp8B checks when it packs)
};

// FP8 PackedFp8B panels: rows per panel and bytes per k-pair (32 rows x 2 fp8 = one cache line).
constexpr int64_t kFp8PanelRows = 32;
constexpr int64_t kFp8PanelPairBytes = 64;

struct KernelInfo;

// The most rows of A a small-m kernel takes (KernelInfo::small_m_rows, at most this): past it the
// blocked kernels, whose packing of B is then a small part of the work.
constexpr int64_t kSmallMMaxRows = 64;

// Packs rows [r0, r0 + count) and k [p0, p0 + kc) of an operand into panels of R rows in the
// kernel's panel format (panel q at q * R * panel_k(kc) elements; rows past count and pad are 0).
// `fast` off selects the plain loops (RIDGE_GEMM_SCALAR_PACK).
using PackFn = void (*)(const KernelInfo& ki, const Operand& src, int64_t r0, int64_t count, int64_t p0,
                        int64_t kc, int R, void* dst, bool fast);

// Packs 32-bit words (fp32 values or bf16 pairs): dst[p * R + r] = word p of row r for r < rows,
// 0 for rows <= r < R, p < words; row r starts at src + r * ld_bytes. R <= 32.
using PackWords = void (*)(const void* src, int64_t ld_bytes, int rows, int64_t words, int R, uint32_t* dst);
void pack_words_avx512(const void* src, int64_t ld_bytes, int rows, int64_t words, int R, uint32_t* dst);

// Packs a K-major bf16 operand ([k, rows], ld elements; src at k = 0, row = 0) into bf16-pair
// panels of R rows: the word for (k-pair p, row r) of panel q is at dst[q * R * ceil(kc/2) + p * R + r],
// low half k = 2p, high half k = 2p + 1 (0 past kc); rows past `count` are 0.
using PackKmajorPairs = void (*)(const uint16_t* src, int64_t ld, int64_t count, int64_t kc, int R,
                                 uint32_t* dst);

struct KernelInfo {
  const char* name = "";
  int mr = 0, nr = 0;
  Panel panel = Panel::f32;
  int64_t k_granule = 8;  // K blocks are multiples of it (FP8: 128, so scale blocks never straddle one)
  MicroKernel ukernel = nullptr;
  PackFn pack_a = nullptr, pack_b = nullptr;
  // The small-m kernel, for row-major inputs of element type small_m_elem, where the ISA has one; the
  // driver reads it from the description the policy chose for small-m work, the rest from the blocked one.
  SmallMKernel small_m = nullptr;
  // The JIT's name for small_m's template (jit_decode.cpp), where the JIT serves this kernel's decode
  // calls with m and k compiled in as constants; nullptr where it does not.
  const char* small_m_jit = nullptr;
  Elem small_m_elem = Elem::f32;
  int64_t small_m_cols = 4;   // column granule of the small-m split (FP8: 16, within a scale block)
  int64_t small_m_rows = 16;  // the most rows of A small_m takes (at most kSmallMMaxRows); more: blocked
  // The small-m path for FP8 B in PackedFp8B panels (SmallM::b at panel 0, ldb = pairs), 1..4 rows of A,
  // split in whole panels (kFp8PanelRows columns); nullptr: the blocked path.
  SmallMKernel small_m_fp8_panels = nullptr;
  // The narrow path for at most this many rows per thread, in row tiles of balanced height (0: any
  // thread whose rows fit one A block, in MR-row tiles).
  int64_t narrow_max_rows = 0;
  // The narrow path also for a thread with several row blocks, where its packed A (all of K) fits in L2
  // (AVX2: at 128 x 7168 x 2048 the 6x16 kernel ran 18.6 ms so, 19.7-22.4 ms on two row blocks).
  bool narrow_a_in_l2 = false;
  // Blocking policy (driver.cpp, derive_blocking): false, the B micro-panel in an eighth of L2 (deep
  // K blocks, few D-tile epilogues); true, in half of L1, for kernels whose B is widened as it is
  // packed just before use (FP8): K then runs in many blocks, so the A block takes a quarter of L2
  // and the fp32 D block (MC x NC, swept once per K block) half of it.
  bool kc_l1 = false;
  PackWords pack_words = nullptr;       // vector transpose for the dense packer, when the ISA has one
  PackWords pack_widen_bf16 = nullptr;  // the same for bf16 rows into fp32 panels (words = bf16 elements)
  PackKmajorPairs pack_kmajor_pairs = nullptr;  // for nn/tn/tt bf16 operands, when the ISA has one
  // Called by each driver thread when its share of a GEMM is done (AMX: releases the tiles), or nullptr.
  void (*thread_done)() = nullptr;
};

// One per ISA file, built by designated (aggregate) initialization, so no constructor is compiled with
// the file's ISA flags. The bf16pair kernels exist only in the avx512bf16 files.
KernelInfo kernel_f32_scalar();
KernelInfo kernel_f32_avx2();
KernelInfo kernel_bf16_avx2();  // kernel_f32_avx2 with the bf16 decode path
KernelInfo kernel_f32_avx512();
KernelInfo kernel_bf16_avx512bf16();
KernelInfo kernel_fp8_scalar();
KernelInfo kernel_fp8_avx2();
KernelInfo kernel_fp8_avx512();
KernelInfo kernel_fp8_avx512bf16();
KernelInfo kernel_fp8_avx512bf16vbmi();  // the same, widening fp8 with byte permutes (AVX512_VBMI)
// AMX tiles (amx_body.inc), blocked work only: on the instructions (amx path only) and on the emulator
// (any machine; taken while the policy's amx_emulated switch is on).
KernelInfo kernel_bf16_amx();
KernelInfo kernel_fp8_amx();
KernelInfo kernel_bf16_amxemu();
KernelInfo kernel_fp8_amxemu();

// The packers (pack.cpp): fp32/bf16 operands (row-major or K-major) into either panel format, and
// fp8 operands (raw or PackedFp8B panels) widened to fp32 panels through the e4m3 table.
void pack_dense(const KernelInfo& ki, const Operand& src, int64_t r0, int64_t count, int64_t p0, int64_t kc,
                int R, void* dst, bool fast);
void pack_fp8_lut(const KernelInfo& ki, const Operand& src, int64_t r0, int64_t count, int64_t p0, int64_t kc,
                  int R, void* dst, bool fast);

// Epilogue for tiles with a bf16 side, shared by the scalar path (exact ridge::to_bf16 rounding).
void store_tile_generic(const float* acc, int64_t acc_ld, int mr, int nr, const Tile& t);

// The tile of t starting at row i, column j.
Tile tile_at(const Tile& t, int64_t i, int64_t j);

// The calling thread's scratch (the driver's per-thread workspace, 64-byte aligned, at least
// `bytes`; valid until the thread's next GEMM). For small-m kernels.
std::byte* thread_scratch(size_t bytes);

}  // namespace ridge::gemm::detail

namespace ridge::gemm::fp8 {

// fp8 e4m3 -> float for all 256 codes (NaN codes give NaN).
const float* e4m3_table();

}  // namespace ridge::gemm::fp8
