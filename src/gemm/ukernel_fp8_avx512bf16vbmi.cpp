// FP8 kernel on AVX512_BF16 + AVX512_VBMI: the same kernel as ukernel_fp8_avx512bf16.cpp (both
// include kernel_fp8_avx512bf16.inc), with fp8 widened by byte-table permutes (vpermb, vpermt2b):
// half the instructions of the arithmetic widening, which bounds the decode shapes and B's packing.
#include <immintrin.h>

#include <cstring>
#include <utility>

#include "gemm/kernel.hpp"
#include "ridge/core/cpu.hpp"

// GCC 12's AVX-512 intrinsics initialise their "undefined" operand from itself, which -O3 reports
// as maybe-uninitialized, and at -O2 (the ASan build) as uninitialized (known false positives).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define RIDGE_FP8_VBMI 1
#define RIDGE_FP8_KERNEL_FN kernel_fp8_avx512bf16vbmi
#include "gemm/kernel_fp8_avx512bf16.inc"
