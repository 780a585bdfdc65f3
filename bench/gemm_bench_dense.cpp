// fp32 and bf16 rows of `ridge bench gemm`: ridge against its peer in the same run.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <random>

#include "compare.hpp"
#include "gemm_bench.hpp"
#include "gemm_peers.hpp"
#include "bench/registry.hpp"
#include "ridge/core.hpp"
#include "ridge/gemm.hpp"
#include "core/check.hpp"

namespace ridge::gemm_bench {
namespace {

template <typename T>
void fill_random(Buffer<T>& buf, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : buf) {
    if constexpr (std::is_same_v<T, bf16>)
      x = to_bf16(u(rng));
    else
      x = u(rng);
  }
}

// Over the first `count` elements (copy 0 of the outputs).
template <typename T, typename U>
double max_rel_diff(const Buffer<T>& x, const Buffer<U>& y, size_t count) {
  return bench_compare::max_rel_diff(x.data(), y.data(), count);
}

}  // namespace

double dense_bytes(const GemmCase& c) {
  const double in = c.dtype == DType::f32 ? 4.0 : 2.0;
  return in * static_cast<double>(c.m * c.k + c.n * c.k) + 2.0 * static_cast<double>(c.m * c.n);
}

namespace {

// Sets the row's cache state and returns how many copies of the operands to rotate through.
int64_t rotation_for(bench::Row& row, double bytes_per_copy, bool warm) {
  if (warm) {
    row.cache = "warm";
    return 1;
  }
  const auto rot = bench::plan_rotation(bytes_per_copy, cpu::cache_sizes().last_level);
  row.cache = rot.cold ? "cold" : "warm";
  if (rot.copies > 1) row.extra["copies"] = rot.copies;
  return rot.copies;
}

// ridge's call on copy `i` of the operands (a, b, packed, d32/d16), fp32 or bf16 inputs. Each copy
// of A holds m*k elements stored as [a_rows, lda] per the layout, each copy of B n*k as [b_rows, ldb].
template <typename T>
struct DenseOperands {
  int64_t m, n, k, copies;
  gemm::Layout layout;
  int64_t a_rows, lda, b_rows, ldb;
  Buffer<T> a, b;
  Buffer<float> d32;
  Buffer<bf16> d16;
  std::vector<gemm::PackedB> packed;
  const T* a_ptr(int64_t i) const { return a.data() + i * m * k; }
  const T* b_ptr(int64_t i) const { return b.data() + i * n * k; }
  MatrixView<const T> av(int64_t i) const { return {a_ptr(i), a_rows, lda, lda}; }
  MatrixView<const T> bv(int64_t i) const { return {b_ptr(i), b_rows, ldb, ldb}; }
  template <typename D>
  void call(int64_t i, bool packed_b, MatrixView<D> dv) const {
    if constexpr (std::is_same_v<T, float>) {
      if (packed_b)
        gemm::f32_gemm_nt(av(i), packed[i], dv);
      else
        gemm::f32_gemm(layout, av(i), bv(i), dv);
    } else {
      if (packed_b)
        gemm::bf16_gemm_nt(av(i), packed[i], dv);
      else
        gemm::bf16_gemm(layout, av(i), bv(i), dv);
    }
  }
  void run(int64_t i, bool out_f32, bool packed_b) {
    if (out_f32)
      call(i, packed_b, MatrixView<float>{d32.data() + i * m * n, m, n, n});
    else
      call(i, packed_b, MatrixView<bf16>{d16.data() + i * m * n, m, n, n});
  }
};

// Copy 0 gets random values; the others repeat it, so every copy computes the same product.
template <typename T>
void replicate(Buffer<T>& buf, int64_t per_copy, int64_t copies, uint32_t seed) {
  Buffer<T> one(static_cast<size_t>(per_copy), "bench.gemm.src");
  fill_random(one, seed);
  for (int64_t i = 0; i < copies; ++i) std::copy(one.begin(), one.end(), buf.data() + i * per_copy);
}

}  // namespace

bench::Row run_dense_case(const GemmCase& c, const bench::Options& options) {
  check(c.dtype == DType::f32 || c.dtype == DType::bf16, "bench gemm: dense dtype {} (expected fp32 or bf16)",
        dtype_name(c.dtype));
  check(c.out == DType::f32 || c.out == DType::bf16, "bench gemm: output dtype {} (expected fp32 or bf16)",
        dtype_name(c.out));
  check(c.m > 0 && c.n > 0 && c.k > 0, "bench gemm: shape m={} n={} k={} (expected all > 0)", c.m, c.n, c.k);
  check(!c.packed_b || c.layout == gemm::Layout::nt,
        "bench gemm: packed B with layout {} (PackedB is nt only)", gemm::layout_name(c.layout));
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

  const bool out_f32 = c.out == DType::f32;
  const double in_size = c.dtype == DType::f32 ? 4.0 : 2.0, out_size = out_f32 ? 4.0 : 2.0;
  const int64_t copies = rotation_for(
      row, in_size * static_cast<double>(m * k + n * k) + out_size * static_cast<double>(m * n), c.warm);
  const auto sz = [&](int64_t per_copy) { return static_cast<size_t>(per_copy * copies); };

  auto run_typed = [&](auto tag) {
    using T = decltype(tag);
    DenseOperands<T> ops{m,
                         n,
                         k,
                         copies,
                         layout,
                         a_rows,
                         lda,
                         b_rows,
                         ldb,
                         Buffer<T>(sz(m * k), "bench.gemm.a"),
                         Buffer<T>(sz(n * k), "bench.gemm.b"),
                         Buffer<float>(out_f32 ? sz(m * n) : 0, "bench.gemm.d"),
                         Buffer<bf16>(out_f32 ? 0 : sz(m * n), "bench.gemm.d"),
                         {}};
    replicate(ops.a, m * k, copies, 1);
    replicate(ops.b, n * k, copies, 2);
    if (c.packed_b)
      for (int64_t i = 0; i < copies; ++i) ops.packed.push_back(gemm::PackedB::pack(ops.bv(i)));
    int64_t next = 0, next_peer = 0;
    std::vector<std::function<void()>> fns = {[&] {
      ops.run(next, out_f32, c.packed_b);
      next = (next + 1) % copies;
    }};
    // The peer's outputs, one per copy like ridge's.
    Buffer<float> dp32;
    Buffer<bf16> dp16;
    std::unique_ptr<gemm_peers::OnednnBf16Matmul> mm;
    std::string peer_name;
    std::function<void(int64_t)> peer_call;
    if constexpr (std::is_same_v<T, float>) {
      if (c.peer && gemm_peers::openblas_available()) {
        gemm_peers::openblas_set_threads(threads);
        row.extra["peer_kernel"] = "openblas " + gemm_peers::openblas_corename();
        dp32 = Buffer<float>(sz(m * n), "bench.gemm.peer_d");
        peer_name = "openblas_sgemm";
        peer_call = [&](int64_t i) {
          gemm_peers::openblas_sgemm(a_km, b_km, m, n, k, ops.a_ptr(i), lda, ops.b_ptr(i), ldb,
                                     dp32.data() + i * m * n, n);
        };
      } else if (c.peer) {
        row.note = "peer OpenBLAS not available (this ridge was configured without libopenblas-dev)";
      }
    } else {
      if (c.peer && gemm_peers::onednn_available()) {
        try {
          mm = std::make_unique<gemm_peers::OnednnBf16Matmul>(m, n, k, c.out, lda, ldb, n, a_km, b_km);
        } catch (const Error& e) {
          row.note = fmt::format("peer not available: {}", e.what());
        }
      }
      if (mm) {
        if (out_f32)
          dp32 = Buffer<float>(sz(m * n), "bench.gemm.peer_d");
        else
          dp16 = Buffer<bf16>(sz(m * n), "bench.gemm.peer_d");
        row.extra["peer_kernel"] = "onednn " + gemm_peers::onednn_version() + " " + mm->impl_name();
        peer_name = "onednn_bf16";
        peer_call = [&](int64_t i) {
          mm->run(ops.a_ptr(i), ops.b_ptr(i),
                  out_f32 ? static_cast<void*>(dp32.data() + i * m * n)
                          : static_cast<void*>(dp16.data() + i * m * n));
        };
      } else if (c.peer && !gemm_peers::onednn_available()) {
        row.note = "peer oneDNN not available (this ridge was configured without libdnnl-dev)";
      }
    }
    if (peer_call)
      fns.push_back([&] {
        peer_call(next_peer);
        next_peer = (next_peer + 1) % copies;
      });
    const auto ms = bench::measure_interleaved(fns, {options});
    row.set_time(ms[0]);
    if (peer_call) {
      row.add_peer(peer_name, ms[1]);
      // Both wrote copy 0 at some point; write it once more from each so the comparison is fresh.
      ops.run(0, out_f32, c.packed_b);
      peer_call(0);
      const size_t mn = static_cast<size_t>(m * n);
      double diff = 0;
      if constexpr (std::is_same_v<T, float>)
        diff = out_f32 ? max_rel_diff(ops.d32, dp32, mn) : max_rel_diff(ops.d16, dp32, mn);
      else
        diff = out_f32 ? max_rel_diff(ops.d32, dp32, mn) : max_rel_diff(ops.d16, dp16, mn);
      row.extra["max_rel_diff_vs_peer"] = diff;
    }
    if (c.check) {
      // The reference twin on copy 0's operands (every copy holds the same values).
      Buffer<float> ref(static_cast<size_t>(m * n), "bench.gemm.reference");
      const MatrixView<float> rv{ref.data(), m, n, n};
      if constexpr (std::is_same_v<T, float>)
        gemm::f32_gemm_reference(layout, ops.av(0), ops.bv(0), rv);
      else
        gemm::bf16_gemm_reference(layout, ops.av(0), ops.bv(0), rv);
      ops.run(0, out_f32, c.packed_b);
      const size_t mn = static_cast<size_t>(m * n);
      row.extra["max_rel_diff_vs_reference"] =
          out_f32 ? max_rel_diff(ops.d32, ref, mn) : max_rel_diff(ops.d16, ref, mn);
    }
  };
  if (c.dtype == DType::f32)
    run_typed(float{});
  else
    run_typed(bf16{});
  return row;
}

}  // namespace ridge::gemm_bench

// `ridge bench gemm-dense`: the fp32/bf16 rows alone over a grid (m, n, k, dtype, out, packed), for
// tuning the dense kernels without the fp8 sets; `ridge bench gemm` runs the published shapes.
namespace ridge::gemm_bench {
namespace {

bool g_dense_warm = false;

void gemm_dense_options(CLI::App& app) {
  app.add_flag(
      "--warm", g_dense_warm,
      "time every call on the same operands (they stay in cache) instead of rotating through copies that "
      "span 4x the last-level cache");
}

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
  for (const auto& l : ctx.grid.values("layout", {"nt"}))
    layouts.push_back(gemm::parse_layout(l, "--set layout"));
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
                // Errors name the axis the user typed (--set dtype=..., --set out=...).
                const auto axis = [](const std::string& v, const char* name) {
                  try {
                    return parse_dtype(v);
                  } catch (const Error& e) {
                    throw e.renamed(name);
                  }
                };
                c.dtype = axis(dt, "--set dtype");
                c.out = out == "default" ? (c.dtype == DType::f32 ? DType::f32 : DType::bf16)
                                         : axis(out, "--set out");
                c.packed_b = pk == "1";
                c.peer = peer;
                c.layout = layout;
                c.warm = g_dense_warm;
                ctx.emit(run_dense_case(c, ctx.options));
                ctx.progress.tick();
              }
}

}  // namespace
}  // namespace ridge::gemm_bench

RIDGE_BENCHMARK(gemm_dense, "gemm-dense",
                "fp32/bf16 GEMM (ridge) against OpenBLAS sgemm and oneDNN bf16 matmul",
                ridge::gemm_bench::run_gemm_dense, ridge::gemm_bench::gemm_dense_options);
