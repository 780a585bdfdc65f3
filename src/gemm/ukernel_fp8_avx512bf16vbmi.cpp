// FP8 GEMM on AVX512_BF16 + AVX512_VBMI: the same kernels as fp8_ukernel_avx512bf16.cpp (both include
// fp8_avx512bf16.inc), with fp8 widened by byte-table permutes (vpermb, vpermt2b): half the
// instructions of the arithmetic widening, which bounds the decode shapes and the packing of B.
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

#define RIDGE_FP8_VBMI 1
#define RIDGE_FP8_ENTRY run_avx512bf16_vbmi
#include "gemm/ukernel_fp8_avx512bf16.inc"
