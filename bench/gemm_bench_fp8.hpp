// The FP8 half of `ridge bench gemm` (bench/gemm_bench_fp8.cpp): dense fp8_gemm_nt against oneDNN's
// bf16 matmul on the dequantized operands, and the grouped layouts against the dense fp8 GEMM of the
// same total size.
#pragma once

#include <cstdint>
#include <string>

#include "ridge/bench/measure.hpp"
#include "bench/result.hpp"

namespace ridge::roofline {
struct Chip;
}

namespace ridge::gemm_bench {

struct Fp8Case {
  int64_t m = 0, n = 0, k = 0;  // dense; for grouped: m = rows per group
  int64_t groups = 0;           // 0: dense
  std::string layout;           // "contiguous" or "masked" for grouped runs
  bool peer = true;
  bool check = false;  // also compare with fp8_gemm_nt_reference (dense rows): max_rel_diff_vs_reference
  bool warm = false;   // same operands every call, instead of copies spanning 4x the last-level cache
};

// DeepGEMM's byte count: A and B in fp8, D in bf16 (scales are < 1% and left out, as DeepGEMM does).
double fp8_bytes(int64_t m, int64_t n, int64_t k, int64_t groups_of_b = 1);

// `chip`: this machine's roofline (null: the row carries no bound). This CPU has no fp8 arithmetic,
// so the row's compute roof is the chip's bf16 peak unless it lists an fp8 one (report::hold_fp8_row).
bench::Row run_fp8_case(const Fp8Case& c, const bench::Options& options, const roofline::Chip* chip);

}  // namespace ridge::gemm_bench
