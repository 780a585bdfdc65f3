// FP8 GEMM on AVX512_BF16 (the kernels are in fp8_avx512bf16.inc, shared with the VBMI variant).
// Every e4m3 value is exactly a bf16, so fp8 is widened to bf16 in registers (here a bit-arithmetic
// conversion plus an 8-entry table for the subnormals) and the products run on vdpbf16ps, which
// multiplies bf16 pairs exactly and accumulates in fp32.
//  - blocked path: A rows widened into a packed block, B widened and transposed into k-pair
//    interleaved panels (from raw rows, or from a PackedFp8B that is already interleaved); a
//    14x32 micro-kernel sums each 128-wide K block exactly in registers and promotes it with its
//    scales into an fp32 tile.
//  - narrow path for decode batches (2 to 32 rows): B is read once, as fp8, 32 rows at a time,
//    widened and transposed in 256-deep chunks that stay in L1 and are used at once by every
//    row tile; A is widened once.
//  - streaming path for one row: B rows are read once, as fp8, widened in registers and dotted
//    with A (lanes hold partial sums along K, reduced once at the end).
//  In every path memory traffic for B is one byte per element.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "gemm/fp8_internal.hpp"
#include "ridge/core/cpu.hpp"
#include "ridge/core/format.hpp"
#include "ridge/core/memory.hpp"
#include "ridge/core/threads.hpp"

// GCC 12's AVX-512 intrinsics initialise their "undefined" operand from itself, which -O3 reports
// as maybe-uninitialized, and at -O2 (the ASan build) as uninitialized (known false positives).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define RIDGE_FP8_VBMI 0
#define RIDGE_FP8_ENTRY run_avx512bf16
#include "gemm/ukernel_fp8_avx512bf16.inc"
