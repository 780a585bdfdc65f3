// `ridge bench moe`: an MoE layer's expert GEMMs through the grouped GEMMs against the same work as a loop
// of ridge's own dense GEMMs, one call per expert, measured in the same run (issue 40: the grouped path
// must be >= 1.5x the loop at E = 8, 64 and 256, top-k 2 and 8, 4096 tokens).
//
// The tokens are routed by moe::route over seeded uniform logits (uniform top-k) and laid out by
// moe::contiguous_layout, as the MoE block lays them out. Per expert e, with its rows X_e [c_e, d]:
//   forward:  H = X W13_e^T (w1|w3 fused, [2 de, d], nt), Y = A W2_e^T ([d, de], nt)
//   backward: dA = dY W2_e and dX = dH W13_e (nn: the weights as stored), dW2_e = dY^T A and
//             dW13_e = dH^T X (tn, the K-grouped GEMM, fp32)
// (A = silu(H1) H3 and dH, the SwiGLU's backward, are given: only the GEMMs are timed). The peer runs the
// same products expert by expert through f32_gemm / bf16_gemm; its results are the grouped results to the
// bit (max_rel_diff_vs_peer, checked expert by expert after timing).
//
// PyTorch eager's per-expert loop (the Hugging Face Mixtral block's; tools/torch_moe_peer.py) runs the same
// products over the same rows per expert, dtype and threads, in the same run just before ridge's rounds
// of the case (its own process: the median of its rounds' medians). --no-torch leaves it out.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "compare.hpp"
#include "operands.hpp"
#include "peer_python.hpp"
#include "core/json.hpp"
#include "ridge/core/process.hpp"
#include "bench/registry.hpp"
#include "ridge/core.hpp"
#include "ridge/gemm.hpp"
#include "ridge/model/moe.hpp"
#include "core/check.hpp"

namespace ridge::moe_bench {
namespace {

namespace moe = model::moe;

using bench_operands::fill_uniform;

struct Shape {
  int64_t experts = 0, top_k = 0, tokens = 0, d = 0, de = 0;
};

// The tokens routed by moe::route over seeded uniform logits (uniform top-k, softmax gate).
moe::Routing uniform_routing(const Shape& s) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> logits(static_cast<size_t>(s.tokens * s.experts));
  for (auto& l : logits) l = u(rng);
  moe::Routing r;
  moe::route(logits, s.tokens, s.experts, s.top_k, moe::Gate::softmax, {}, r);
  return r;
}

bool g_no_torch = false;
std::string g_python;

// PyTorch eager's per-expert loop over the layer's rows per expert: each pass's median time (ms), or why
// there is none.
struct TorchResult {
  std::map<std::string, double> median_ms;
  std::string why;
};
TorchResult torch_loop(const std::vector<int64_t>& counts, const Shape& s, const std::string& dtype,
                       const std::vector<std::string>& passes, const bench::Options& o) {
  TorchResult r;
  std::string cs, ps;
  for (int64_t c : counts) cs += (cs.empty() ? "" : ",") + std::to_string(c);
  for (const auto& p : passes) ps += (ps.empty() ? "" : ",") + p;
  nlohmann::json j;
  if (!bench_peers::run_json({bench_peers::python(g_python),
                              std::string(RIDGE_SOURCE_DIR) + "/tools/torch_moe_peer.py",
                              "--counts",
                              cs,
                              "--d-model",
                              std::to_string(s.d),
                              "--d-expert",
                              std::to_string(s.de),
                              "--dtype",
                              dtype,
                              "--passes",
                              ps,
                              "--threads",
                              std::to_string(get_num_threads()),
                              "--warmup",
                              std::to_string(std::max(1, o.warmup)),
                              "--iters",
                              std::to_string(std::max(1, o.iters)),
                              "--rounds",
                              "3"},
                             j, r.why)) {
    r.why = "PyTorch peer: " + r.why;
    return r;
  }
  for (const auto& p : passes)
    if (j.contains(p)) r.median_ms[p] = j[p].at("median_ms").get<double>();
  r.why = "torch " + j.value("torch", std::string("?"));
  return r;
}

// One case's routing, layout and buffers: activations of the input type T (the outputs too), weights of
// T, weight gradients in fp32 (only when the backward is timed).
template <typename T>
struct Layer {
  Shape s;
  moe::Routing routing;
  moe::ContiguousLayout layout;
  Buffer<T> x, a, h, y, dx, da, w13, w2;
  Buffer<float> dw13, dw2;

  Layer(const Shape& shape, moe::Routing r, bool backward) : s(shape), routing(std::move(r)) {
    layout = moe::contiguous_layout(routing, gemm::m_alignment_for_contiguous_layout());
    const int64_t rows = layout.rows, d = s.d, de = s.de, e = s.experts;
    auto make = [](Buffer<T>& b, int64_t n, const char* tag, uint64_t seed) {
      b = Buffer<T>(static_cast<size_t>(n), tag);
      fill_uniform(b, seed);
    };
    make(x, rows * d, "bench.moe.x", 1);
    make(a, rows * de, "bench.moe.a", 2);
    make(h, rows * 2 * de, "bench.moe.h", 3);
    make(y, rows * d, "bench.moe.y", 4);
    make(w13, e * 2 * de * d, "bench.moe.w13", 5);
    make(w2, e * d * de, "bench.moe.w2", 6);
    if (backward) {
      make(dx, rows * d, "bench.moe.dx", 7);
      make(da, rows * de, "bench.moe.da", 8);
      dw13 = Buffer<float>(static_cast<size_t>(e * 2 * de * d), "bench.moe.dw13");
      dw2 = Buffer<float>(static_cast<size_t>(e * d * de), "bench.moe.dw2");
    }
  }

  int64_t count(int64_t e) const { return routing.count[e]; }
  int64_t offset(int64_t e) const { return layout.offset[e]; }
  // Rows [offset(e), offset(e) + count(e)) of an activation buffer with `cols` columns.
  MatrixView<const T> rows_of(const Buffer<T>& b, int64_t cols, int64_t e) const {
    return {b.data() + offset(e) * cols, count(e), cols, cols};
  }
  MatrixView<T> rows_of(Buffer<T>& b, int64_t cols, int64_t e) {
    return {b.data() + offset(e) * cols, count(e), cols, cols};
  }
  // Every row of an activation buffer, read (in) or written (out).
  MatrixView<const T> in(const Buffer<T>& b, int64_t cols) const {
    return {b.data(), layout.rows, cols, cols};
  }
  MatrixView<T> out(Buffer<T>& b, int64_t cols) { return {b.data(), layout.rows, cols, cols}; }
  // Expert e's weight [rows, cols] within a stacked [E, rows, cols] buffer.
  template <typename W>
  MatrixView<W> expert(W* b, int64_t rows, int64_t cols, int64_t e) const {
    return {b + e * rows * cols, rows, cols, cols};
  }
  template <typename W>
  TensorView<W> stacked(W* b, int64_t rows, int64_t cols) const {
    return TensorView<W>::contiguous(b, {s.experts, rows, cols});
  }
};

// The dense GEMMs for fp32 or bf16 inputs.
template <typename T, typename TD>
void dense(gemm::Layout l, MatrixView<const T> a, MatrixView<const T> b, MatrixView<TD> d) {
  if constexpr (std::is_same_v<T, float>)
    gemm::f32_gemm(l, a, b, d);
  else
    gemm::bf16_gemm(l, a, b, d);
}

// The grouped GEMMs by input type: M-grouped (nt or nn) and K-grouped (tn).
template <typename T>
void m_grouped(gemm::Layout l, MatrixView<const T> a, TensorView<const T> b, MatrixView<T> d,
               std::span<const int32_t> idx) {
  if constexpr (std::is_same_v<T, float>)
    l == gemm::Layout::nn ? gemm::m_grouped_f32_gemm_nn_contiguous(a, b, d, idx)
                          : gemm::m_grouped_f32_gemm_nt_contiguous(a, b, d, idx);
  else
    l == gemm::Layout::nn ? gemm::m_grouped_bf16_gemm_nn_contiguous(a, b, d, idx)
                          : gemm::m_grouped_bf16_gemm_nt_contiguous(a, b, d, idx);
}
template <typename T>
void k_grouped(MatrixView<const T> a, MatrixView<const T> b, TensorView<float> d,
               std::span<const int32_t> idx) {
  if constexpr (std::is_same_v<T, float>)
    gemm::k_grouped_f32_gemm_tn_contiguous(a, b, d, idx);
  else
    gemm::k_grouped_bf16_gemm_tn_contiguous(a, b, d, idx);
}

// The layer's products through the grouped GEMMs. In the backward y plays dY and h plays dH.
template <typename T>
void grouped(Layer<T>& L, bool backward) {
  using gemm::Layout;
  const int64_t d = L.s.d, de = L.s.de;
  const auto& idx = L.layout.m_indices;
  const T *w13 = L.w13.data(), *w2 = L.w2.data();
  if (!backward) {
    m_grouped<T>(Layout::nt, L.in(L.x, d), L.stacked(w13, 2 * de, d), L.out(L.h, 2 * de), idx);
    m_grouped<T>(Layout::nt, L.in(L.a, de), L.stacked(w2, d, de), L.out(L.y, d), idx);
    return;
  }
  m_grouped<T>(Layout::nn, L.in(L.y, d), L.stacked(w2, d, de), L.out(L.da, de), idx);
  m_grouped<T>(Layout::nn, L.in(L.h, 2 * de), L.stacked(w13, 2 * de, d), L.out(L.dx, d), idx);
  k_grouped<T>(L.in(L.y, d), L.in(L.a, de), L.stacked(L.dw2.data(), d, de), idx);
  k_grouped<T>(L.in(L.h, 2 * de), L.in(L.x, d), L.stacked(L.dw13.data(), 2 * de, d), idx);
}

// Where the loop writes expert e's products: into the layer's buffers while timed, into scratch when its
// results are held against the grouped ones.
template <typename T>
struct Outputs {
  MatrixView<T> h, y, dx, da;
  MatrixView<float> dw13, dw2;
};

template <typename T>
Outputs<T> layer_outputs(Layer<T>& L, int64_t e, bool backward) {
  const int64_t d = L.s.d, de = L.s.de;
  Outputs<T> o{L.rows_of(L.h, 2 * de, e), L.rows_of(L.y, d, e), {}, {}, {}, {}};
  if (backward) {
    o.dx = L.rows_of(L.dx, d, e);
    o.da = L.rows_of(L.da, de, e);
    o.dw13 = L.expert(L.dw13.data(), 2 * de, d, e);
    o.dw2 = L.expert(L.dw2.data(), d, de, e);
  }
  return o;
}

// Expert e's products, one dense call each (an expert without rows: its dW = 0, as the grouped GEMM).
template <typename T>
void loop_expert(const Layer<T>& L, int64_t e, bool backward, const Outputs<T>& o) {
  using gemm::Layout;
  const int64_t d = L.s.d, de = L.s.de;
  const auto w13 = L.expert(L.w13.data(), 2 * de, d, e), w2 = L.expert(L.w2.data(), d, de, e);
  if (!backward) {
    if (L.count(e) == 0) return;
    dense<T, T>(Layout::nt, L.rows_of(L.x, d, e), w13, o.h);
    dense<T, T>(Layout::nt, L.rows_of(L.a, de, e), w2, o.y);
    return;
  }
  if (L.count(e) > 0) {
    dense<T, T>(Layout::nn, L.rows_of(L.y, d, e), w2, o.da);
    dense<T, T>(Layout::nn, L.rows_of(L.h, 2 * de, e), w13, o.dx);
  }
  dense<T, float>(Layout::tn, L.rows_of(L.y, d, e), L.rows_of(L.a, de, e), o.dw2);
  dense<T, float>(Layout::tn, L.rows_of(L.h, 2 * de, e), L.rows_of(L.x, d, e), o.dw13);
}

// The largest difference over the largest magnitude, accumulated over pairs of matrices.
struct Diff {
  double diff = 0, scale = 0;
  template <typename U>
  void add(MatrixView<const U> got, MatrixView<const U> ref) {
    for (int64_t i = 0; i < ref.rows; ++i)
      for (int64_t j = 0; j < ref.cols; ++j) {
        const double r = bench_compare::as_double(ref(i, j));
        scale = std::max(scale, std::fabs(r));
        diff = std::max(diff, std::fabs(bench_compare::as_double(got(i, j)) - r));
      }
  }
  double relative() const { return scale > 0 ? diff / scale : diff; }
};

// The loop's products expert by expert into scratch, held against what the grouped GEMMs left in the
// layer's buffers (run just before).
template <typename T>
double grouped_vs_loop(Layer<T>& L, bool backward) {
  const int64_t d = L.s.d, de = L.s.de;
  int64_t most = 0;
  for (int64_t e = 0; e < L.s.experts; ++e) most = std::max(most, L.count(e));
  Buffer<T> sh(static_cast<size_t>(std::max<int64_t>(1, most * 2 * de)), "bench.moe.check"),
      sy(static_cast<size_t>(std::max<int64_t>(1, most * d)), "bench.moe.check"),
      sdx(static_cast<size_t>(std::max<int64_t>(1, most * d)), "bench.moe.check"),
      sda(static_cast<size_t>(std::max<int64_t>(1, most * de)), "bench.moe.check");
  Buffer<float> sw13(static_cast<size_t>(backward ? 2 * de * d : 1), "bench.moe.check"),
      sw2(static_cast<size_t>(backward ? d * de : 1), "bench.moe.check");
  Diff diff;
  for (int64_t e = 0; e < L.s.experts; ++e) {
    const int64_t c = L.count(e);
    const Outputs<T> mine = layer_outputs(L, e, backward);
    const Outputs<T> ref{{sh.data(), c, 2 * de, 2 * de}, {sy.data(), c, d, d},
                         {sdx.data(), c, d, d},          {sda.data(), c, de, de},
                         {sw13.data(), 2 * de, d, d},    {sw2.data(), d, de, de}};
    loop_expert(L, e, backward, ref);
    auto held = [&](auto got, auto want) {
      using U = std::remove_const_t<std::remove_pointer_t<decltype(got.data)>>;
      diff.add(MatrixView<const U>{got.data, got.rows, got.cols, got.ld},
               MatrixView<const U>{want.data, want.rows, want.cols, want.ld});
    };
    if (!backward) {
      held(mine.h, ref.h);
      held(mine.y, ref.y);
    } else {
      held(mine.dx, ref.dx);
      held(mine.da, ref.da);
      held(mine.dw13, ref.dw13);
      held(mine.dw2, ref.dw2);
    }
  }
  return diff.relative();
}

template <typename T>
void run_case(bench::Context& ctx, const Shape& s, const std::vector<std::string>& passes, bool peer) {
  const bool any_backward = std::find(passes.begin(), passes.end(), "backward") != passes.end();
  moe::Routing routing = uniform_routing(s);
  const std::string dtype = std::is_same_v<T, float> ? "fp32" : "bf16";
  // The peer runs first, in its own process, before ridge allocates the layer: both hold E experts'
  // weights (and their fp32 gradients), which at E = 256 and full size do not fit twice.
  TorchResult torch;
  if (!g_no_torch) torch = torch_loop(routing.count, s, dtype, passes, ctx.options);
  Layer<T> L(s, std::move(routing), any_backward);
  const double rows = static_cast<double>(s.tokens * s.top_k), d = static_cast<double>(s.d),
               de = static_cast<double>(s.de), e = static_cast<double>(s.experts);
  const double elt = sizeof(T);
  for (const std::string& pass : passes) {
    const bool backward = pass == "backward";
    bench::Row row;
    row.benchmark = "moe";
    row.case_ = {{"experts", s.experts}, {"top_k", s.top_k}, {"tokens", s.tokens},
                 {"d_model", s.d},       {"d_expert", s.de}, {"pass", pass}};
    row.dtype = dtype;
    // Forward: 2 rows (2 de) d + 2 rows d de; backward: twice that for dX and dA, twice again for dW.
    row.flops = (backward ? 12.0 : 6.0) * rows * d * de;
    // Weights read once (and dW written in fp32), activations read and written once.
    const double weights = 3.0 * e * d * de;
    row.bytes = backward ? weights * (elt + 4.0) + elt * rows * (4.0 * d + 6.0 * de)
                         : weights * elt + elt * rows * (2.0 * d + 3.0 * de);
    row.cache = row.bytes >= 4.0 * static_cast<double>(cpu::cache_sizes().last_level) ? "cold" : "warm";
    row.extra["rows_padded"] = L.layout.rows;
    row.extra["load_imbalance"] = L.routing.load_imbalance();
    row.extra["kernel"] =
        gemm::blocking(std::is_same_v<T, float> ? DType::f32 : DType::bf16, cpu::active_isa(), s.d).kernel;
    std::vector<std::function<void()>> fns = {[&] { grouped(L, backward); }};
    if (peer)
      fns.push_back([&] {
        for (int64_t x = 0; x < s.experts; ++x) loop_expert(L, x, backward, layer_outputs(L, x, backward));
      });
    const auto ms = bench::measure_interleaved(fns, {ctx.options});
    row.set_time(ms[0]);
    if (peer) {
      row.add_peer("dense_loop", ms[1]);
      fns[0]();
      row.extra["max_rel_diff_vs_peer"] = grouped_vs_loop(L, backward);
    }
    if (const auto t = torch.median_ms.find(pass); t != torch.median_ms.end())
      row.add_peer("pytorch_eager_loop", t->second);
    row.note = g_no_torch ? "PyTorch peer skipped (--no-torch)"
                          : (torch.median_ms.empty() ? "PyTorch absent: " : "") + torch.why;
    const std::string what = fmt::format("E={} top_k={} {} {}", s.experts, s.top_k, row.dtype, pass);
    ctx.emit(std::move(row));
    ctx.progress.tick(what);
  }
}

void run_moe(bench::Context& ctx) {
  ctx.grid.check_keys({"experts", "top_k", "tokens", "d_model", "d_expert", "dtype", "pass", "peer"}, "moe");
  const auto experts = ctx.grid.counts("experts", {8, 64, 256});
  const auto top_ks = ctx.grid.counts("top_k", {2, 8});
  const auto tokens = ctx.grid.counts("tokens", {4096});
  const auto d_models = ctx.grid.counts("d_model", {ctx.quick ? 1024 : 2048});
  const auto d_experts = ctx.grid.counts("d_expert", {ctx.quick ? 512 : 1408});
  const auto dtypes = ctx.grid.values("dtype", {"fp32", "bf16"});
  const auto passes = ctx.grid.values("pass", {"forward", "backward"});
  const bool peer = ctx.grid.switches("peer", {true}).front();
  for (const auto& p : passes)
    check(p == "forward" || p == "backward", "--set pass: '{}' is not a pass (accepted: forward, backward)",
          p);
  std::vector<DType> types;
  for (const auto& dt : dtypes) {
    DType t;
    try {
      t = parse_dtype(dt);
    } catch (const Error& e) {
      throw e.renamed("--set dtype");
    }
    check(t == DType::f32 || t == DType::bf16, "--set dtype: '{}' is not accepted (accepted: fp32, bf16)",
          dt);
    types.push_back(t);
  }
  const int64_t align = gemm::m_alignment_for_contiguous_layout();
  const bool backward = std::find(passes.begin(), passes.end(), "backward") != passes.end();
  ctx.progress.start(experts.size() * top_ks.size() * tokens.size() * d_models.size() * d_experts.size() *
                     types.size() * passes.size());
  for (const DType t : types)
    for (int64_t e : experts)
      for (int64_t k : top_ks)
        for (int64_t n : tokens)
          for (int64_t d : d_models)
            for (int64_t de : d_experts) {
              // m_indices holds an expert as int32; every size is checked against memory before any
              // allocation, as doubles (the products of axes up to 2^40 pass 64 bits).
              check(e <= (int64_t{1} << 30), "--set experts: '{}' is out of range (accepted: 1 .. {})", e,
                    int64_t{1} << 30);
              check(k <= e, "--set top_k: '{}' is out of range (accepted: 1 .. {}, the experts)", k, e);
              const double elt = t == DType::f32 ? 4.0 : 2.0, de_ = static_cast<double>(de),
                           d_ = static_cast<double>(d), e_ = static_cast<double>(e);
              const double rows =
                  static_cast<double>(n) * static_cast<double>(k) + e_ * static_cast<double>(align);
              const double bytes = 4.0 * static_cast<double>(n) * e_ + 16.0 * static_cast<double>(n) * k +
                                   elt * (3.0 * e_ * d_ * de_ + rows * (4.0 * d_ + 4.0 * de_)) +
                                   elt * static_cast<double>(n) * (2.0 * d_ + 3.0 * de_) +
                                   (backward ? 12.0 * e_ * d_ * de_ + 12.0 * de_ * d_ : 0.0);
              memory::check_fits(
                  bytes,
                  fmt::format("--set experts={} top_k={} tokens={} d_model={} d_expert={}", e, k, n, d, de));
              const Shape s{e, k, n, d, de};
              if (t == DType::f32)
                run_case<float>(ctx, s, passes, peer);
              else
                run_case<bf16>(ctx, s, passes, peer);
            }
}

void moe_options(CLI::App& app) {
  app.add_flag("--no-torch", g_no_torch, "skip PyTorch eager's per-expert loop");
  app.add_option("--python", g_python,
                 "python interpreter for the PyTorch peer (default: the checkout's .venv, else python3)");
}

}  // namespace
}  // namespace ridge::moe_bench

RIDGE_BENCHMARK(moe, "moe",
                "an MoE layer's expert GEMMs (forward, backward) through the grouped GEMMs against a loop of "
                "ridge's dense GEMMs, one call per expert (axes: experts, top_k, tokens, d_model, d_expert, "
                "dtype, pass, peer)",
                ridge::moe_bench::run_moe, ridge::moe_bench::moe_options);
