// Quantization helpers with DeepGEMM's conventions: one scale per 1x128 (per token) or per 128x128
// (per block) tile, scale = max(amax, 1e-4) / 448 (or that scale rounded up to a power of two: UE8M0),
// values rounded to nearest even.
#include <algorithm>
#include <cmath>
#include <vector>

#include "gemm/check.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/threads.hpp"
#include "ridge/gemm_fp8.hpp"
#include "core/check.hpp"
#include "core/overlap.hpp"

namespace ridge::gemm {

namespace {

constexpr int64_t kSerialBelow = int64_t{1} << 16;

// amax of a block; NaN propagates so a NaN input gives a NaN scale rather than a silent finite one.
float block_amax(const MatrixView<const float>& x, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  float amax = 0.0f;
  bool nan = false;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) {
      const float v = std::fabs(x(r, c));
      nan |= std::isnan(v);
      amax = std::max(amax, v);
    }
  return nan ? NAN : std::max(amax, kFp8AmaxFloor);
}

// The block's scale from its amax: amax / 448, or with UE8M0 the least power of two >= it (so x / scale
// still fits e4m3's range; frexp gives the exponent exactly). NaN stays NaN.
float block_scale(float amax, Fp8Scales kind) {
  const float s = amax / 448.0f;
  if (kind == Fp8Scales::fp32 || !std::isfinite(s)) return s;
  int e = 0;
  const float m = std::frexp(s, &e);  // s = m 2^e, m in [0.5, 1)
  return std::ldexp(1.0f, m == 0.5f ? e - 1 : e);
}

void quantize_rows(const MatrixView<const float>& x, const MatrixView<fp8_e4m3>& q, int64_t r0, int64_t r1,
                   int64_t c0, int64_t c1, float amax, float scale, Fp8Scales kind, std::vector<float>& tmp) {
  // fp32 scales multiply by 448 / amax (DeepGEMM's form); a power of two divides exactly.
  const float mul = kind == Fp8Scales::fp32 ? 448.0f / amax : 1.0f / scale;
  tmp.resize(static_cast<size_t>(c1 - c0));
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = c0; c < c1; ++c) tmp[c - c0] = x(r, c) * mul;
    convert(tmp.data(), &q(r, c0), tmp.size(), Saturation::finite);
  }
}

// The outputs are written while x is still read (and a scale while its block's values are written).
void check_outputs(const MatrixView<const float>& x, const MatrixView<fp8_e4m3>& q,
                   const MatrixView<float>& scales) {
  check(!overlap::overlaps(q, x), "q: overlaps an input (x)");
  check(!overlap::overlaps(scales, x), "scales: overlaps an input (x)");
  check(!overlap::overlaps(scales, q), "scales: overlaps the other output (q)");
}

}  // namespace

void per_token_cast_to_fp8(MatrixView<const float> x, MatrixView<fp8_e4m3> q, MatrixView<float> scales,
                           Fp8Scales kind) {
  check(x.rows >= 0 && x.cols >= 1, "x: expected [m, k] with k >= 1, got [{}, {}]", x.rows, x.cols);
  check_matrix(x, "x", x.rows, x.cols);
  check_matrix(q, "q", x.rows, x.cols);
  check_matrix(scales, "scales", x.rows, fp8_scale_blocks(x.cols));
  check_outputs(x, q, scales);
  const int64_t kb = fp8_scale_blocks(x.cols);
  // A decode step casts one row per sequence before every GEMM: below kSerialBelow elements the threads
  // would cost more to wake than the row costs to cast.
#pragma omp parallel num_threads(get_num_threads()) if (x.rows * x.cols >= kSerialBelow)
  {
    std::vector<float> tmp;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < x.rows; ++r)
      for (int64_t b = 0; b < kb; ++b) {
        const int64_t c0 = b * kFp8Block, c1 = std::min(x.cols, c0 + kFp8Block);
        const float amax = block_amax(x, r, r + 1, c0, c1);
        scales(r, b) = block_scale(amax, kind);
        quantize_rows(x, q, r, r + 1, c0, c1, amax, scales(r, b), kind, tmp);
      }
  }
}

void per_block_cast_to_fp8(MatrixView<const float> x, MatrixView<fp8_e4m3> q, MatrixView<float> scales,
                           Fp8Scales kind) {
  check(x.rows >= 0 && x.cols >= 1, "x: expected [n, k] with k >= 1, got [{}, {}]", x.rows, x.cols);
  check_matrix(x, "x", x.rows, x.cols);
  check_matrix(q, "q", x.rows, x.cols);
  check_matrix(scales, "scales", fp8_scale_blocks(x.rows), fp8_scale_blocks(x.cols));
  check_outputs(x, q, scales);
  const int64_t rb = fp8_scale_blocks(x.rows), kb = fp8_scale_blocks(x.cols);
#pragma omp parallel num_threads(get_num_threads())
  {
    std::vector<float> tmp;
#pragma omp for schedule(static) collapse(2)
    for (int64_t br = 0; br < rb; ++br)
      for (int64_t b = 0; b < kb; ++b) {
        const int64_t r0 = br * kFp8Block, r1 = std::min(x.rows, r0 + kFp8Block);
        const int64_t c0 = b * kFp8Block, c1 = std::min(x.cols, c0 + kFp8Block);
        const float amax = block_amax(x, r0, r1, c0, c1);
        scales(br, b) = block_scale(amax, kind);
        quantize_rows(x, q, r0, r1, c0, c1, amax, scales(br, b), kind, tmp);
      }
  }
}

namespace {

Fp8Matrix make_matrix(int64_t rows, int64_t cols, int64_t srows) {
  Fp8Matrix out;
  out.rows = rows;
  out.cols = cols;
  out.scale_rows = srows;
  out.scale_cols = fp8_scale_blocks(cols);
  out.values = Buffer<fp8_e4m3>(static_cast<size_t>(rows * cols), "gemm.fp8.values");
  out.scales = Buffer<float>(static_cast<size_t>(srows * out.scale_cols), "gemm.fp8.scales");
  return out;
}

}  // namespace

Fp8Matrix per_token_cast_to_fp8(MatrixView<const float> x, Fp8Scales kind) {
  check(x.rows >= 0 && x.cols >= 1, "x: expected [m, k] with k >= 1, got [{}, {}]", x.rows, x.cols);
  Fp8Matrix out = make_matrix(x.rows, x.cols, x.rows);
  per_token_cast_to_fp8(x, {out.values.data(), x.rows, x.cols, x.cols},
                        {out.scales.data(), out.scale_rows, out.scale_cols, out.scale_cols}, kind);
  return out;
}

Fp8Matrix per_block_cast_to_fp8(MatrixView<const float> x, Fp8Scales kind) {
  check(x.rows >= 0 && x.cols >= 1, "x: expected [n, k] with k >= 1, got [{}, {}]", x.rows, x.cols);
  Fp8Matrix out = make_matrix(x.rows, x.cols, fp8_scale_blocks(x.rows));
  per_block_cast_to_fp8(x, {out.values.data(), x.rows, x.cols, x.cols},
                        {out.scales.data(), out.scale_rows, out.scale_cols, out.scale_cols}, kind);
  return out;
}

}  // namespace ridge::gemm
