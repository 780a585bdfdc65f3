// fp32 and bf16 rows of `ridge bench gemm`: ridge against its peer in the same run.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "gemm_bench.hpp"
#include "gemm_peers.hpp"
#include "ridge/bench/registry.hpp"
#include "ridge/core.hpp"
#include "ridge/gemm.hpp"

namespace ridge::gemm_bench {
namespace {

template <typename T>
void fill_random(Buffer<T>& buf, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : buf) {
    if constexpr (std::is_same_v<T, bf16>) x = to_bf16(u(rng));
    else x = u(rng);
  }
}

// Alternates ridge and peer rounds so a burst of load from other processes hits both alike.
void interleaved(const std::function<void()>& ours, const std::function<void()>* peer, const bench::Options& opt,
                 bench::Measurement& mo, bench::Measurement& mp) {
  const int rounds = 3;
  bench::Options o = opt;
  o.iters = std::max(1, (opt.iters + rounds - 1) / rounds);
  o.min_time_s = opt.min_time_s / rounds;
  o.max_time_s = opt.max_time_s > 0 ? opt.max_time_s / rounds : 0;
  for (int r = 0; r < rounds; ++r) {
    if (r > 0) o.warmup = std::min(opt.warmup, 1);
    auto a = bench::measure(ours, o);
    mo.samples.insert(mo.samples.end(), a.samples.begin(), a.samples.end());
    mo.warmup += a.warmup;
    if (peer) {
      auto b = bench::measure(*peer, o);
      mp.samples.insert(mp.samples.end(), b.samples.begin(), b.samples.end());
      mp.warmup += b.warmup;
    }
  }
  mo.stats = bench::compute_stats(mo.samples);
  mp.stats = bench::compute_stats(mp.samples);
}

float value(float x) { return x; }
float value(bf16 x) { return to_float(x); }

template <typename T, typename U>
double max_rel_diff(const Buffer<T>& x, const Buffer<U>& y) {
  double scale = 0, diff = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(value(y[i]))));
    diff = std::max(diff, std::fabs(static_cast<double>(value(x[i])) - value(y[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

}  // namespace

double dense_bytes(const GemmCase& c) {
  const double in = c.dtype == DType::f32 ? 4.0 : 2.0;
  return in * static_cast<double>(c.m * c.k + c.n * c.k) + 2.0 * static_cast<double>(c.m * c.n);
}

bench::Row run_dense_case(const GemmCase& c, const bench::Options& options) {
  check(c.dtype == DType::f32 || c.dtype == DType::bf16, "bench gemm: dense dtype {} (expected fp32 or bf16)",
        dtype_name(c.dtype));
  check(c.out == DType::f32 || c.out == DType::bf16, "bench gemm: output dtype {} (expected fp32 or bf16)",
        dtype_name(c.out));
  check(c.m > 0 && c.n > 0 && c.k > 0, "bench gemm: shape m={} n={} k={} (expected all > 0)", c.m, c.n, c.k);
  check(!c.packed_b || c.layout == gemm::Layout::nt, "bench gemm: packed B with layout {} (PackedB is nt only)",
        gemm::layout_name(c.layout));
  const int64_t m = c.m, n = c.n, k = c.k;
  const gemm::Layout layout = c.layout;
  const bool a_km = layout == gemm::Layout::tn || layout == gemm::Layout::tt;
  const bool b_km = layout == gemm::Layout::nn || layout == gemm::Layout::tn;
  // Leading dimensions of the operands as stored.
  const int64_t lda = a_km ? m : k, ldb = b_km ? n : k;
  const int64_t a_rows = a_km ? k : m, b_rows = b_km ? k : n;
  const int threads = get_num_threads();
  bench::Row row;
  row.benchmark = "gemm";
  row.case_ = {{"m", m}, {"n", n}, {"k", k}, {"out", dtype_name(c.out)}};
  if (c.packed_b) row.case_["packed_b"] = true;
  if (layout != gemm::Layout::nt) row.case_["layout"] = gemm::layout_name(layout);
  row.dtype = c.dtype == DType::f32 ? "fp32" : "bf16";
  row.threads = threads;
  row.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  row.bytes = dense_bytes(c);
  const gemm::Blocking bk = gemm::blocking(c.dtype, cpu::active_isa(), k);
  row.extra["kernel"] = bk.kernel;

  bench::Measurement mo, mp;
  const bool out_f32 = c.out == DType::f32;
  Buffer<float> d32(out_f32 ? static_cast<size_t>(m * n) : 0, "bench.gemm.d");
  Buffer<bf16> d16(out_f32 ? 0 : static_cast<size_t>(m * n), "bench.gemm.d");
  if (c.dtype == DType::f32) {
    Buffer<float> a(static_cast<size_t>(m * k), "bench.gemm.a"), b(static_cast<size_t>(n * k), "bench.gemm.b");
    fill_random(a, 1);
    fill_random(b, 2);
    const MatrixView<const float> av{a.data(), a_rows, lda, lda}, bv{b.data(), b_rows, ldb, ldb};
    gemm::PackedB pb;
    if (c.packed_b) pb = gemm::PackedB::pack(bv);
    std::function<void()> ours = [&] {
      if (out_f32) {
        if (c.packed_b) gemm::f32_gemm_nt(av, pb, MatrixView<float>{d32.data(), m, n, n});
        else gemm::f32_gemm(layout, av, bv, MatrixView<float>{d32.data(), m, n, n});
      } else {
        if (c.packed_b) gemm::f32_gemm_nt(av, pb, MatrixView<bf16>{d16.data(), m, n, n});
        else gemm::f32_gemm(layout, av, bv, MatrixView<bf16>{d16.data(), m, n, n});
      }
    };
    Buffer<float> dp(static_cast<size_t>(m * n), "bench.gemm.peer_d");
    std::function<void()> peer = [&] {
      gemm_peers::openblas_sgemm(a_km, b_km, m, n, k, a.data(), lda, b.data(), ldb, dp.data(), n);
    };
    const bool have_peer = c.peer && gemm_peers::openblas_available();
    if (have_peer) {
      gemm_peers::openblas_set_threads(threads);
      row.extra["peer_kernel"] = "openblas " + gemm_peers::openblas_corename();
    }
    interleaved(ours, have_peer ? &peer : nullptr, options, mo, mp);
    row.set_time(mo);
    if (have_peer) {
      row.add_peer("openblas_sgemm", mp);
      row.extra["max_rel_diff_vs_peer"] = out_f32 ? max_rel_diff(d32, dp) : max_rel_diff(d16, dp);
    }
  } else {
    Buffer<bf16> a(static_cast<size_t>(m * k), "bench.gemm.a"), b(static_cast<size_t>(n * k), "bench.gemm.b");
    fill_random(a, 1);
    fill_random(b, 2);
    const MatrixView<const bf16> av{a.data(), a_rows, lda, lda}, bv{b.data(), b_rows, ldb, ldb};
    gemm::PackedB pb;
    if (c.packed_b) pb = gemm::PackedB::pack(bv);
    std::function<void()> ours = [&] {
      if (out_f32) {
        if (c.packed_b) gemm::bf16_gemm_nt(av, pb, MatrixView<float>{d32.data(), m, n, n});
        else gemm::bf16_gemm(layout, av, bv, MatrixView<float>{d32.data(), m, n, n});
      } else {
        if (c.packed_b) gemm::bf16_gemm_nt(av, pb, MatrixView<bf16>{d16.data(), m, n, n});
        else gemm::bf16_gemm(layout, av, bv, MatrixView<bf16>{d16.data(), m, n, n});
      }
    };
    const bool have_peer = c.peer && gemm_peers::onednn_available();
    std::unique_ptr<gemm_peers::OnednnBf16Matmul> mm;
    Buffer<float> dp32(have_peer && out_f32 ? static_cast<size_t>(m * n) : 0, "bench.gemm.peer_d");
    Buffer<bf16> dp16(have_peer && !out_f32 ? static_cast<size_t>(m * n) : 0, "bench.gemm.peer_d");
    std::function<void()> peer;
    if (have_peer) {
      mm = std::make_unique<gemm_peers::OnednnBf16Matmul>(m, n, k, c.out, lda, ldb, n, a_km, b_km);
      peer = [&] { mm->run(a.data(), b.data(), out_f32 ? static_cast<void*>(dp32.data()) : dp16.data()); };
      row.extra["peer_kernel"] = "onednn " + gemm_peers::onednn_version() + " " + mm->impl_name();
    }
    interleaved(ours, have_peer ? &peer : nullptr, options, mo, mp);
    row.set_time(mo);
    if (have_peer) {
      row.add_peer("onednn_bf16", mp);
      row.extra["max_rel_diff_vs_peer"] = out_f32 ? max_rel_diff(d32, dp32) : max_rel_diff(d16, dp16);
    }
  }
  return row;
}

}  // namespace ridge::gemm_bench

// `ridge bench gemm-dense`: the fp32/bf16 rows alone over a grid (m, n, k, dtype, out, packed), for
// tuning the dense kernels without the fp8 sets; `ridge bench gemm` runs the published shapes.
namespace ridge::gemm_bench {
namespace {

void run_gemm_dense(bench::Context& ctx) {
  ctx.grid.check_keys({"m", "n", "k", "dtype", "out", "packed", "peer", "layout"}, ctx.benchmark);
  const auto ms = ctx.grid.counts("m", {ctx.quick ? 256 : 2048});
  const auto ns = ctx.grid.counts("n", {ctx.quick ? 256 : 2048});
  const auto ks = ctx.grid.counts("k", {ctx.quick ? 256 : 2048});
  const auto dtypes = ctx.grid.values("dtype", {"fp32", "bf16"});
  const auto outs = ctx.grid.values("out", {"default"});
  const auto packed = ctx.grid.values("packed", {"0"});
  const bool peer = ctx.grid.switches("peer", {true}).front();
  std::vector<gemm::Layout> layouts;
  for (const auto& l : ctx.grid.values("layout", {"nt"})) layouts.push_back(gemm::parse_layout(l, "--set layout"));
  ctx.progress.start(ms.size() * ns.size() * ks.size() * dtypes.size() * outs.size() * packed.size() *
                     layouts.size());
  for (const gemm::Layout layout : layouts)
    for (const auto& dt : dtypes)
      for (const auto& out : outs)
        for (const auto& pk : packed)
          for (int64_t m : ms)
            for (int64_t n : ns)
              for (int64_t k : ks) {
                // Each size is at most 2^40, but m*k and m*n can pass 64 bits: held against memory first.
                const double dm = static_cast<double>(m), dn = static_cast<double>(n),
                             dk = static_cast<double>(k);
                memory::check_fits(4.0 * (dm * dk + dn * dk + 2.0 * dm * dn),
                                   fmt::format("--set m={} n={} k={}", m, n, k));
                GemmCase c;
                c.m = m;
                c.n = n;
                c.k = k;
                c.dtype = parse_dtype(dt);
                c.out = out == "default" ? (c.dtype == DType::f32 ? DType::f32 : DType::bf16) : parse_dtype(out);
                c.packed_b = pk == "1";
                c.peer = peer;
                c.layout = layout;
                ctx.emit(run_dense_case(c, ctx.options));
                ctx.progress.tick();
              }
}

}  // namespace
}  // namespace ridge::gemm_bench

RIDGE_BENCHMARK(gemm_dense, "gemm-dense", "fp32/bf16 GEMM (ridge) against OpenBLAS sgemm and oneDNN bf16 matmul",
                ridge::gemm_bench::run_gemm_dense);
