// The dense half of `ridge bench gemm`: gemm-fp8's bench/gemm_bench.cpp owns the command, the
// shape sets and the fp8 rows; it calls run_dense_case for the fp32 and bf16 rows.
#pragma once

#include <cstdint>
#include <string>

#include "ridge/bench/measure.hpp"
#include "bench/result.hpp"
#include "ridge/core/tensor.hpp"
#include "ridge/gemm.hpp"

namespace ridge::gemm_bench {

struct GemmCase {
  int64_t m = 0, n = 0, k = 0;
  DType dtype = DType::bf16;  // inputs: DType::f32 or DType::bf16
  // Output dtype: fp32 rows compare against sgemm (fp32 out); bf16 rows write bf16 like DeepGEMM.
  DType out = DType::bf16;
  bool packed_b = false;  // time ridge with B packed once, untimed (weights), instead of per call
  bool peer = true;       // also time the peer in the same run
  // Same operands every call (they stay in cache) instead of rotating through copies that span
  // 4x the last-level cache so each call reads them from DRAM (bench::plan_rotation).
  bool warm = false;
  // Also compare the result with the scalar reference twin (max_rel_diff_vs_reference).
  bool check = false;
  // Operands as stored: A [m,k] (nt, nn) or [k,m] (tn, tt), B [n,k] (nt, tt) or [k,n] (nn, tn).
  gemm::Layout layout = gemm::Layout::nt;
};

// Runs ridge's kernel and its peer (OpenBLAS sgemm for fp32, oneDNN bf16 matmul for bf16) on the
// same random operands, interleaved round by round so machine noise hits both alike, and returns
// a row: case {m, n, k}, dtype, cache ("cold" unless c.warm), median/min time, spread, flops = 2mnk, bytes =
// DeepGEMM's count (A and B in their dtype, D in bf16), peers with speedups, extra {"kernel", "peer_kernel",
// "max_rel_err"}. ridge::Error for an unsupported dtype or a bad shape.
bench::Row run_dense_case(const GemmCase& c, const bench::Options& options);

// Bytes DeepGEMM counts for one call: A and B in their dtype, D in bf16.
double dense_bytes(const GemmCase& c);

}  // namespace ridge::gemm_bench
