// FP8 kernel on AVX512_BF16, fp8 widened to bf16 by bit arithmetic plus an 8-entry table for the
// subnormals (10 instructions per 32 values). The kernel is kernel_fp8_avx512bf16.inc and the parts
// it includes, shared with the VBMI variant.
#include <immintrin.h>

#include <cstring>
#include <utility>

#include "gemm/kernel.hpp"
#include "ridge/core/cpu.hpp"

// GCC 12's AVX-512 intrinsics initialise their "undefined" operand from itself, which -O3 reports
// as maybe-uninitialized, and at -O2 (the ASan build) as uninitialized (known false positives).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define RIDGE_FP8_VBMI 0
#define RIDGE_FP8_KERNEL_FN kernel_fp8_avx512bf16
#include "gemm/kernel_fp8_avx512bf16.inc"
