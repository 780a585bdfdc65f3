// fp8 rows of `ridge bench gemm`: fp8_gemm_nt against what a user without an FP8 kernel runs
// (oneDNN's bf16 matmul on the dequantized operands, dequantized once and untimed), and the grouped
// MoE layouts against the dense fp8 GEMM of the same total size. Calls alternate between ridge and
// the peer in rounds so bursts of load from other processes hit both alike.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "gemm_bench_fp8.hpp"
#include "gemm_peers.hpp"
#include "ridge/core.hpp"
#include "ridge/gemm_fp8.hpp"
#include "ridge/roofline.hpp"

namespace ridge::gemm_bench {
namespace {

void fill_uniform(Buffer<float>& buf, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : buf) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = static_cast<float>(static_cast<int64_t>(s >> 40) - (1 << 23)) * (1.0f / (1 << 23));
  }
}

// Times each function in turn, `rounds` times, and merges each one's samples.
std::vector<bench::Measurement> interleaved(const std::vector<std::function<void()>>& fns, const bench::Options& opt) {
  const int rounds = 3;
  bench::Options o = opt;
  o.iters = std::max(1, (opt.iters + rounds - 1) / rounds);
  o.min_time_s = opt.min_time_s / rounds;
  o.max_time_s = opt.max_time_s > 0 ? opt.max_time_s / rounds : 0;
  std::vector<bench::Measurement> out(fns.size());
  for (int r = 0; r < rounds; ++r) {
    if (r > 0) o.warmup = std::min(opt.warmup, 1);
    for (size_t f = 0; f < fns.size(); ++f) {
      auto m = bench::measure(fns[f], o);
      out[f].samples.insert(out[f].samples.end(), m.samples.begin(), m.samples.end());
      out[f].warmup += m.warmup;
    }
  }
  for (auto& m : out) m.stats = bench::compute_stats(m.samples);
  return out;
}

double calc_diff(const Buffer<bf16>& x, const Buffer<bf16>& y) {
  double xy = 0, xx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double a = to_float(x[i]), b = to_float(y[i]);
    xy += a * b;
    xx += a * a + b * b;
  }
  return xx > 0 ? 1.0 - 2.0 * xy / xx : 0.0;
}

// This CPU has no fp8 arithmetic: the fp8 GEMM runs on the bf16 dot-product units, so its compute
// roof is the probed bf16 peak (unless a chip file lists an fp8 peak).
void fill_fp8_bound(bench::Row& row) {
  const roofline::Chip* chip = bench::probed_chip();
  if (!chip) return;
  try {
    const double peak = chip->has_peak("fp8") ? chip->peak("fp8") : chip->peak("bf16");
    const double bw = chip->bandwidth();
    const double bound = std::min(peak, row.flops / row.bytes * bw);
    row.bound_gflops = bound / 1e9;
    row.pct_of_bound = row.gflops() / row.bound_gflops * 100.0;
    row.extra["compute_roof"] = chip->has_peak("fp8") ? "fp8" : "bf16 (no fp8 units)";
  } catch (const std::exception&) {
  }
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

}  // namespace

double fp8_bytes(int64_t m, int64_t n, int64_t k, int64_t groups_of_b) {
  return static_cast<double>(m) * k + static_cast<double>(groups_of_b) * n * k + 2.0 * static_cast<double>(m) * n;
}

bench::Row run_fp8_case(const Fp8Case& c, const bench::Options& options) {
  check(c.m > 0 && c.n > 0 && c.k > 0, "bench gemm: fp8 shape m={} n={} k={} (expected all > 0)", c.m, c.n, c.k);
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

  const bool onednn = c.peer && !grouped && gemm_peers::onednn_available();
  auto a = make_operand(m, k, true, 11, onednn);
  std::vector<Quantized> bs;
  for (int64_t g = 0; g < G; ++g) bs.push_back(make_operand(n, k, false, 100 + g, onednn));
  Buffer<bf16> d(static_cast<size_t>(m * n), "bench.gemm.d");
  const MatrixView<bf16> dv{d.data(), m, n, n};

  std::vector<std::function<void()>> fns;
  if (!grouped) {
    const auto packed = std::make_shared<gemm::PackedFp8B>(gemm::PackedFp8B::pack(bs[0].q.view(), bs[0].q.scale_view()));
    fns.push_back([&] { gemm::fp8_gemm_nt(a.q.view(), a.q.scale_view(), bs[0].q.view(), bs[0].q.scale_view(), dv); });
    fns.push_back([&, packed] { gemm::fp8_gemm_nt(a.q.view(), a.q.scale_view(), *packed, dv); });
    std::unique_ptr<gemm_peers::OnednnBf16Matmul> mm;
    Buffer<bf16> dp(onednn ? static_cast<size_t>(m * n) : 0, "bench.gemm.peer_d");
    if (onednn) {
      mm = std::make_unique<gemm_peers::OnednnBf16Matmul>(m, n, k, DType::bf16);
      fns.push_back([&] { mm->run(a.dequant.data(), bs[0].dequant.data(), dp.data()); });
      row.extra["peer_kernel"] = "onednn " + gemm_peers::onednn_version() + " " + mm->impl_name();
    }
    auto ms = interleaved(fns, options);
    row.set_time(ms[0]);
    row.extra["packed_b_ms"] = ms[1].median_ms();
    if (onednn) {
      row.add_peer("onednn_bf16_dequant", ms[2]);
      // Both outputs hold the same product up to quantization of the peer's bf16 inputs.
      gemm::fp8_gemm_nt(a.q.view(), a.q.scale_view(), bs[0].q.view(), bs[0].q.scale_view(), dv);
      row.extra["calc_diff_vs_peer"] = calc_diff(d, dp);
    }
  } else {
    // B as one [G, n, k] tensor.
    Buffer<fp8_e4m3> b(static_cast<size_t>(G * n * k), "bench.gemm.b");
    Buffer<float> sb(static_cast<size_t>(G * nb * kb), "bench.gemm.sb");
    for (int64_t g = 0; g < G; ++g) {
      std::copy(bs[g].q.values.begin(), bs[g].q.values.end(), b.data() + g * n * k);
      std::copy(bs[g].q.scales.begin(), bs[g].q.scales.end(), sb.data() + g * nb * kb);
    }
    const auto bt = TensorView<const fp8_e4m3>::contiguous(b.data(), {G, n, k});
    const auto sbt = TensorView<const float>::contiguous(sb.data(), {G, nb, kb});
    std::vector<int32_t> idx(static_cast<size_t>(m));
    for (int64_t r = 0; r < m; ++r) idx[r] = static_cast<int32_t>(r / c.m);
    std::vector<int32_t> masked(static_cast<size_t>(G), static_cast<int32_t>(c.m));
    if (c.layout == "contiguous") {
      check(c.m % gemm::m_alignment_for_contiguous_layout() == 0,
            "bench gemm: m_per_group {} is not a multiple of the contiguous alignment {}", c.m,
            gemm::m_alignment_for_contiguous_layout());
      fns.push_back([&] {
        gemm::m_grouped_fp8_gemm_nt_contiguous(a.q.view(), a.q.scale_view(), bt, sbt, dv, idx);
      });
    } else {
      fns.push_back([&] {
        gemm::m_grouped_fp8_gemm_nt_masked(
            TensorView<const fp8_e4m3>::contiguous(a.q.values.data(), {G, c.m, k}),
            TensorView<const float>::contiguous(a.q.scales.data(), {G, c.m, kb}), bt, sbt,
            TensorView<bf16>::contiguous(d.data(), {G, c.m, n}), masked, c.m);
      });
    }
    if (c.peer) {
      fns.push_back([&] { gemm::fp8_gemm_nt(a.q.view(), a.q.scale_view(), bs[0].q.view(), bs[0].q.scale_view(), dv); });
      row.extra["peer_kernel"] = "ridge fp8_gemm_nt, dense, same total m x n x k";
    }
    auto ms = interleaved(fns, options);
    row.set_time(ms[0]);
    if (c.peer) row.add_peer("ridge_fp8_dense_same_size", ms[1]);
  }
  fill_fp8_bound(row);
  return row;
}

}  // namespace ridge::gemm_bench
