// fp8 rows of `ridge bench gemm`: fp8_gemm_nt against what a user without an FP8 kernel runs
// (oneDNN's bf16 matmul on the dequantized operands, dequantized once and untimed), and the grouped
// MoE layouts against the dense fp8 GEMM of the same total size. Calls alternate between ridge and
// the peer in rounds so bursts of load from other processes hit both alike.
#include "gemm_bench_fp8.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "compare.hpp"
#include "gemm_peers.hpp"
#include "operands.hpp"
#include "bench/result.hpp"
#include "ridge/core.hpp"
#include "ridge/gemm_fp8.hpp"
#include "report/report.hpp"
#include "ridge/roofline.hpp"
#include "core/check.hpp"

namespace ridge::gemm_bench {
namespace {

using bench_operands::fill_uniform;

double calc_diff(const Buffer<bf16>& x, const Buffer<bf16>& y, size_t count) {
  double xy = 0, xx = 0;
  for (size_t i = 0; i < count; ++i) {
    const double a = to_float(x[i]), b = to_float(y[i]);
    xy += a * b;
    xx += a * a + b * b;
  }
  return xx > 0 ? 1.0 - 2.0 * xy / xx : 0.0;
}

struct Quantized {
  gemm::Fp8Matrix q;
  Buffer<bf16> dequant;  // for the peer; empty when not needed
};

Quantized make_operand(int64_t rows, int64_t cols, bool per_token, uint64_t seed, bool dequant) {
  Buffer<float> x(static_cast<size_t>(rows * cols), "bench.gemm.fp32_src");
  fill_uniform(x, seed);
  const MatrixView<const float> xv{x.data(), rows, cols, cols};
  Quantized out{per_token ? gemm::per_token_cast_to_fp8(xv) : gemm::per_block_cast_to_fp8(xv), {}};
  if (dequant) {
    out.dequant = Buffer<bf16>(static_cast<size_t>(rows * cols), "bench.gemm.dequant");
    const int64_t sc = out.q.scale_cols;
#pragma omp parallel for num_threads(get_num_threads()) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* srow = out.q.scales.data() + (per_token ? r : r / 128) * sc;
      for (int64_t c = 0; c < cols; ++c)
        out.dequant[r * cols + c] = to_bf16(to_float(out.q.values[r * cols + c]) * srow[c / 128]);
    }
  }
  return out;
}

Quantized clone(const Quantized& x) {
  Quantized c;
  c.q.rows = x.q.rows;
  c.q.cols = x.q.cols;
  c.q.scale_rows = x.q.scale_rows;
  c.q.scale_cols = x.q.scale_cols;
  c.q.values = Buffer<fp8_e4m3>(x.q.values.size(), "bench.gemm.fp8_copy");
  c.q.scales = Buffer<float>(x.q.scales.size(), "bench.gemm.fp8_copy");
  std::copy(x.q.values.begin(), x.q.values.end(), c.q.values.begin());
  std::copy(x.q.scales.begin(), x.q.scales.end(), c.q.scales.begin());
  if (x.dequant.size()) {
    c.dequant = Buffer<bf16>(x.dequant.size(), "bench.gemm.dequant_copy");
    std::copy(x.dequant.begin(), x.dequant.end(), c.dequant.begin());
  }
  return c;
}

}  // namespace

double fp8_bytes(int64_t m, int64_t n, int64_t k, int64_t groups_of_b) {
  return static_cast<double>(m) * k + static_cast<double>(groups_of_b) * n * k +
         2.0 * static_cast<double>(m) * n;
}

bench::Row run_fp8_case(const Fp8Case& c, const bench::Options& options, const roofline::Chip* chip) {
  check(c.m > 0 && c.n > 0 && c.k > 0, "bench gemm: fp8 shape m={} n={} k={} (expected all > 0)", c.m, c.n,
        c.k);
  const bool grouped = c.groups > 0;
  check(!grouped || c.layout == "contiguous" || c.layout == "masked",
        "bench gemm: layout '{}' (expected contiguous or masked)", c.layout);
  const int64_t G = grouped ? c.groups : 1, n = c.n, k = c.k, m = c.m * G;
  const int64_t kb = gemm::fp8_scale_blocks(k), nb = gemm::fp8_scale_blocks(n);
  bench::Row row;
  row.benchmark = "gemm";
  row.case_ = {{"m", m}, {"n", n}, {"k", k}, {"out", "bf16"}};
  if (grouped) {
    row.case_["groups"] = G;
    row.case_["m_per_group"] = c.m;
    row.case_["layout"] = c.layout;
  }
  row.dtype = "fp8_e4m3";
  row.threads = get_num_threads();
  row.flops = 2.0 * static_cast<double>(m) * n * k;
  row.bytes = fp8_bytes(m, n, k, G);
  row.extra["kernel"] = std::string("fp8 -> bf16 in registers, ") + cpu::isa_name(cpu::active_isa());

  // Cold rows rotate through copies of every operand spanning 4x the last-level cache.
  int64_t copies = 1;
  if (c.warm) {
    row.cache = "warm";
  } else {
    const auto rot = bench::plan_rotation(row.bytes, cpu::cache_sizes().last_level);
    copies = rot.copies;
    row.cache = rot.cold ? "cold" : "warm";
    if (copies > 1) row.extra["copies"] = copies;
  }
  const bool onednn = c.peer && !grouped && gemm_peers::onednn_available();
  if (c.peer && !grouped && !onednn)
    row.note = "peer oneDNN not available (this ridge was configured without libdnnl-dev)";
  std::vector<Quantized> as;
  as.push_back(make_operand(m, k, true, 11, onednn));
  std::vector<Quantized> bs;
  for (int64_t g = 0; g < G; ++g) bs.push_back(make_operand(n, k, false, 100 + g, onednn));
  for (int64_t i = 1; i < copies; ++i) as.push_back(clone(as[0]));
  Buffer<bf16> d(static_cast<size_t>(copies * m * n), "bench.gemm.d");
  const auto dv = [&](int64_t i) { return MatrixView<bf16>{d.data() + i * m * n, m, n, n}; };
  // Each function walks the copies in its own order; `at` gives the copy for this call.
  auto counter = [copies](int64_t& next) {
    const int64_t i = next;
    next = (next + 1) % copies;
    return i;
  };

  std::vector<std::function<void()>> fns;
  std::vector<int64_t> next(3, 0);
  if (!grouped) {
    std::vector<Quantized> bcopies;  // copies 1.. of B; copy 0 is bs[0]
    for (int64_t i = 1; i < copies; ++i) bcopies.push_back(clone(bs[0]));
    const auto bq = [&](int64_t i) -> const Quantized& { return i == 0 ? bs[0] : bcopies[i - 1]; };
    std::vector<gemm::PackedFp8B> packed;
    for (int64_t i = 0; i < copies; ++i)
      packed.push_back(gemm::PackedFp8B::pack(bq(i).q.view(), bq(i).q.scale_view()));
    fns.push_back([&] {
      const int64_t i = counter(next[0]);
      gemm::fp8_gemm_nt(as[i].q.view(), as[i].q.scale_view(), bq(i).q.view(), bq(i).q.scale_view(), dv(i));
    });
    fns.push_back([&] {
      const int64_t i = counter(next[1]);
      gemm::fp8_gemm_nt(as[i].q.view(), as[i].q.scale_view(), packed[i], dv(i));
    });
    std::unique_ptr<gemm_peers::OnednnBf16Matmul> mm;
    Buffer<bf16> dp(onednn ? static_cast<size_t>(copies * m * n) : 0, "bench.gemm.peer_d");
    if (onednn) {
      try {
        mm = std::make_unique<gemm_peers::OnednnBf16Matmul>(m, n, k, DType::bf16);
      } catch (const Error& e) {
        row.note = fmt::format("peer not available: {}", e.what());
      }
    }
    if (mm) {
      fns.push_back([&] {
        const int64_t i = counter(next[2]);
        mm->run(as[i].dequant.data(), bq(i).dequant.data(), dp.data() + i * m * n);
      });
      row.extra["peer_kernel"] = "onednn " + gemm_peers::onednn_version() + " " + mm->impl_name();
    }
    auto ms = bench::measure_interleaved(fns, {options});
    row.set_time(ms[0]);
    row.extra["packed_b_ms"] = ms[1].median_ms();
    if (mm) {
      row.add_peer("onednn_bf16_dequant", ms[2]);
      // Both outputs (copy 0) hold the same product up to quantization of the peer's bf16 inputs.
      gemm::fp8_gemm_nt(as[0].q.view(), as[0].q.scale_view(), bs[0].q.view(), bs[0].q.scale_view(), dv(0));
      mm->run(as[0].dequant.data(), bs[0].dequant.data(), dp.data());
      row.extra["calc_diff_vs_peer"] = calc_diff(d, dp, static_cast<size_t>(m * n));
    }
    if (c.check) {
      // The reference twin (same two-level accumulation, fp32 out) on copy 0's operands.
      Buffer<float> ref(static_cast<size_t>(m * n), "bench.gemm.reference");
      gemm::fp8_gemm_nt_reference(as[0].q.view(), as[0].q.scale_view(), bs[0].q.view(), bs[0].q.scale_view(),
                                  MatrixView<float>{ref.data(), m, n, n});
      gemm::fp8_gemm_nt(as[0].q.view(), as[0].q.scale_view(), bs[0].q.view(), bs[0].q.scale_view(), dv(0));
      row.extra["max_rel_diff_vs_reference"] =
          bench_compare::max_rel_diff(d.data(), ref.data(), static_cast<size_t>(m * n));
    }
  } else {
    // B as one [G, n, k] tensor per copy.
    const int64_t bsize = G * n * k, ssize = G * nb * kb;
    Buffer<fp8_e4m3> b(static_cast<size_t>(copies * bsize), "bench.gemm.b");
    Buffer<float> sb(static_cast<size_t>(copies * ssize), "bench.gemm.sb");
    for (int64_t i = 0; i < copies; ++i)
      for (int64_t g = 0; g < G; ++g) {
        std::copy(bs[g].q.values.begin(), bs[g].q.values.end(), b.data() + i * bsize + g * n * k);
        std::copy(bs[g].q.scales.begin(), bs[g].q.scales.end(), sb.data() + i * ssize + g * nb * kb);
      }
    const auto bt = [&](int64_t i) {
      return TensorView<const fp8_e4m3>::contiguous(b.data() + i * bsize, {G, n, k});
    };
    const auto sbt = [&](int64_t i) {
      return TensorView<const float>::contiguous(sb.data() + i * ssize, {G, nb, kb});
    };
    std::vector<int32_t> idx(static_cast<size_t>(m));
    for (int64_t r = 0; r < m; ++r) idx[r] = static_cast<int32_t>(r / c.m);
    std::vector<int32_t> masked(static_cast<size_t>(G), static_cast<int32_t>(c.m));
    if (c.layout == "contiguous") {
      check(c.m % gemm::m_alignment_for_contiguous_layout() == 0,
            "bench gemm: m_per_group {} is not a multiple of the contiguous alignment {}", c.m,
            gemm::m_alignment_for_contiguous_layout());
      fns.push_back([&] {
        const int64_t i = counter(next[0]);
        gemm::m_grouped_fp8_gemm_nt_contiguous(as[i].q.view(), as[i].q.scale_view(), bt(i), sbt(i), dv(i),
                                               idx);
      });
    } else {
      fns.push_back([&] {
        const int64_t i = counter(next[0]);
        gemm::m_grouped_fp8_gemm_nt_masked(
            TensorView<const fp8_e4m3>::contiguous(as[i].q.values.data(), {G, c.m, k}),
            TensorView<const float>::contiguous(as[i].q.scales.data(), {G, c.m, kb}), bt(i), sbt(i),
            TensorView<bf16>::contiguous(d.data() + i * m * n, {G, c.m, n}), masked, c.m);
      });
    }
    if (c.peer) {
      // The dense GEMM of the same total size reads the first group's B of the same copy.
      fns.push_back([&] {
        const int64_t i = counter(next[1]);
        gemm::fp8_gemm_nt(as[i].q.view(), as[i].q.scale_view(),
                          MatrixView<const fp8_e4m3>{b.data() + i * bsize, n, k, k},
                          MatrixView<const float>{sb.data() + i * ssize, nb, kb, kb}, dv(i));
      });
      row.extra["peer_kernel"] = "ridge fp8_gemm_nt, dense, same total m x n x k";
    }
    auto ms = bench::measure_interleaved(fns, {options});
    row.set_time(ms[0]);
    if (c.peer) row.add_peer("ridge_fp8_dense_same_size", ms[1]);
  }
  if (chip) report::hold_fp8_row(row, *chip);
  return row;
}

}  // namespace ridge::gemm_bench
