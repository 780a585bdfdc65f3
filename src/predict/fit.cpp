// fit(): each op class's efficiency, measured on kernels of the shapes in fit_shapes.hpp and bounded on
// the chip's roofs. The classes are op_class()'s, asked of an op built like the model's, so the fit and
// the prediction name them the same way.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "model/expert_gemm.hpp"
#include "model/fused.hpp"
#include "model/linear.hpp"
#include "predict/fit_shapes.hpp"
#include "ridge/attention.hpp"
#include "ridge/bench.hpp"
#include "ridge/core.hpp"
#include "ridge/model/optim.hpp"
#include "ridge/predict.hpp"

namespace ridge::predict {
namespace {

namespace fsh = fit_shapes;

// The lowest of three rounds' medians: this VM sometimes stalls a 2-thread kernel of a few ms to a
// near-constant 8 ms for a whole round, and an efficiency is the rate the kernel runs at unstalled (the
// model's steps, hundreds of ms each, average such stalls out).
double time_ms(const std::function<void()>& fn) {
  bench::Options o;
  o.warmup = 2;
  o.iters = 5;
  double best = std::numeric_limits<double>::infinity();
  for (int round = 0; round < 3; ++round) best = std::min(best, bench::measure(fn, o).median_ms());
  return best;
}

roofline::ModelOp calib_op(const std::string& kind, const std::string& name, roofline::Cost cost) {
  roofline::ModelOp op;
  op.kind = kind;
  op.name = name;
  op.cost = std::move(cost);
  return op;
}

// A GEMM op's name as op_class() reads its layout: " dW" tn, " dX" nn, none nt.
std::string calib_name(const std::string& prefix, const std::string& layout) {
  return layout == "tn" ? prefix + " dW" : layout == "nn" ? prefix + " dX" : prefix;
}

// The GEMM classes' fits: per class, its shapes' summed bound over their summed time, and what was timed.
struct ClassSums {
  std::map<std::string, std::pair<double, double>> sums;  // class -> (bound ms, measured ms)
  void add(const roofline::Chip& chip, const roofline::ModelOp& op, model::Precision p, double ms,
           const std::string& shape, Efficiencies& e) {
    const double bound_ms = roofline::bound(op.cost, chip).t_lower * 1e3;
    const std::string cls = op_class(op, p);
    sums[cls].first += bound_ms;
    sums[cls].second += ms;
    std::string& what = e.shapes[cls];
    what += fmt::format("{}{}: {:.3f} ms measured, {:.3f} ms bound", what.empty() ? "" : "; ", shape, ms,
                        bound_ms);
  }
  void finish(Efficiencies& e) const {
    for (const auto& [cls, bm] : sums) e.by_class[cls] = std::min(1.0, bm.first / bm.second);
  }
};

template <typename O>
constexpr model::Precision precision_of() {
  return std::is_same_v<O, bf16> ? model::Precision::bf16 : model::Precision::fp32;
}

template <typename O>
void fit_gemms(const roofline::Chip& chip, Efficiencies& e) {
  // Each layout the way the model calls it (nt: Y = X W^T, M = tokens; nn: dX = dY W, M = tokens;
  // tn: dW = dY^T X, K = tokens). A class's efficiency is its shapes' summed bound over their summed time.
  constexpr int64_t kT = fsh::kTokens, kD = fsh::kDModel, kF = fsh::kDff, kV = fsh::kVocab;
  const std::vector<std::array<int64_t, 3>> rows = {{kT, kD, kD}, {kT, kF, kD}, {kT, kD, kF}, {kT, kV, kD}};
  const std::vector<std::array<int64_t, 3>> dw = {{kD, kD, kT}, {kF, kD, kT}, {kD, kF, kT}, {kV, kD, kT}};
  const DType t = std::is_same_v<O, bf16> ? DType::bf16 : DType::f32;
  ClassSums sums;
  for (const char* layout : {"nt", "nn", "tn"}) {
    const std::string l = layout;
    for (const auto& [m, n, k] : l == "tn" ? dw : rows) {
      Buffer<O> a(static_cast<size_t>(m * k), "calib.a"), b(static_cast<size_t>(n * k), "calib.b");
      Buffer<float> d(static_cast<size_t>(m * n), "calib.d");
      for (size_t i = 0; i < a.size(); ++i) a[i] = O(static_cast<float>(i % 7) * 0.1f);
      for (size_t i = 0; i < b.size(); ++i) b[i] = O(static_cast<float>(i % 5) * 0.1f);
      using model::linear::mat;
      const double ms = time_ms([&] {
        if (l == "nt")  // Y[m,n] = X[m,k] W[n,k]^T
          model::linear::forward(mat(a.data(), m, k), mat(b.data(), n, k), mat(d.data(), m, n));
        else if (l == "nn")  // dX[m,n] = dY[m,k] W[k,n]
          model::linear::input_grad(mat(a.data(), m, k), mat(b.data(), k, n), mat(d.data(), m, n));
        else  // dW[m,n] += dY[k,m]^T X[k,n]
          model::linear::weight_grad(mat(a.data(), k, m), mat(b.data(), k, n), mat(d.data(), m, n));
      });
      roofline::MatmulDtypes dt;
      dt.x = dt.w = t;
      dt.out = DType::f32;
      sums.add(chip, calib_op("gemm", calib_name("calib", l), roofline::matmul(m, k, n, dt)),
               precision_of<O>(), ms, fmt::format("{} M={} N={} K={}", l, m, n, k), e);
    }
  }
  sums.finish(e);
}

// The experts' grouped GEMMs as the MoE block calls them (model/expert_gemm.hpp): nt the forward's w1|w3
// and w2, nn their input gradients, tn their weight gradients (accumulated).
template <typename O>
void fit_grouped(const roofline::Chip& chip, Efficiencies& e) {
  constexpr int64_t G = fsh::kExperts, De = fsh::kExpertWidth, D = fsh::kDModel, Mg = fsh::kExpertRows;
  constexpr int64_t R = G * Mg;
  const std::vector<int64_t> rows(static_cast<size_t>(G), Mg);
  std::vector<int32_t> idx(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) idx[static_cast<size_t>(r)] = static_cast<int32_t>(r / Mg);
  const DType t = std::is_same_v<O, bf16> ? DType::bf16 : DType::f32;
  // (layout, the GEMM's n, k): nt d [R, n] = a [R, k] b[g] [n, k]^T; nn d [R, n] = a [R, k] b[g] [k, n];
  // tn d[g] [n, k] += a_g [rows, n]^T b_g [rows, k].
  const std::vector<std::tuple<std::string, int64_t, int64_t>> calls = {
      {"nt", 2 * De, D}, {"nt", D, De}, {"nn", De, D}, {"nn", D, 2 * De}, {"tn", D, De}, {"tn", 2 * De, D}};
  ClassSums sums;
  for (const auto& [l, n, k] : calls) {
    Buffer<O> a(static_cast<size_t>(R * std::max(n, k)), "calib.a"),
        b(static_cast<size_t>(std::max(G * n * k, R * k)), "calib.b");
    Buffer<float> d(static_cast<size_t>(std::max(R * n, G * n * k)), "calib.d");
    for (size_t i = 0; i < a.size(); ++i) a[i] = O(static_cast<float>(i % 7) * 0.1f);
    for (size_t i = 0; i < b.size(); ++i) b[i] = O(static_cast<float>(i % 5) * 0.1f);
    std::fill(d.begin(), d.end(), 0.0f);
    const auto stack = [&](int64_t r, int64_t c) {
      return TensorView<const O>::contiguous(b.data(), {G, r, c});
    };
    const double ms = time_ms([&] {
      if (l == "nt")
        model::experts::forward<O, float>(MatrixView<const O>{a.data(), R, k, k}, stack(n, k),
                                          MatrixView<float>{d.data(), R, n, n}, idx);
      else if (l == "nn")
        model::experts::input_grad<O, float>(MatrixView<const O>{a.data(), R, k, k}, stack(k, n),
                                             MatrixView<float>{d.data(), R, n, n}, idx);
      else
        model::experts::weight_grad<O, float>(MatrixView<const O>{a.data(), R, n, n},
                                              MatrixView<const O>{b.data(), R, k, k},
                                              TensorView<float>::contiguous(d.data(), {G, n, k}), idx);
    });
    const roofline::Cost cost = l == "tn" ? roofline::grouped_gemm_dw(rows, n, k, t, DType::f32)
                                          : roofline::grouped_gemm_contiguous(rows, n, k, t, DType::f32);
    sums.add(chip, calib_op("gemm", calib_name("gemm experts calib", l), cost), precision_of<O>(), ms,
             fmt::format("{} {} experts x {} rows, N={} K={}", l, G, Mg, n, k), e);
  }
  sums.finish(e);
}

template <typename O>
void fit_attention(const roofline::Chip& chip, Efficiencies& e) {
  const int64_t B = 1, H = fsh::kHeads, T = fsh::kSeq, Dh = fsh::kHeadDim;
  const size_t n = static_cast<size_t>(B * H * T * Dh);
  Buffer<O> q(n, "calib.q"), k(n, "calib.k"), v(n, "calib.v"), o(n, "calib.o"), d_o(n, "calib.do"),
      dq(n, "calib.dq"), dk(n, "calib.dk"), dv(n, "calib.dv");
  Buffer<float> lse(static_cast<size_t>(B * H * T), "calib.lse");
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (auto* buf : {&q, &k, &v, &d_o})
    for (auto& x : *buf) x = O(nd(rng));
  auto view = [&](Buffer<O>& b) { return TensorView<O>::contiguous(b.data(), {B, H, T, Dh}); };
  const auto L = TensorView<float>::contiguous(lse.data(), {B, H, T});
  attention::Options opt;
  opt.causal = true;
  const double ms = time_ms([&] {
    attention::flash_attention_forward<O>(view(q), view(k), view(v), view(o), L, opt);
    attention::flash_attention_backward<O>(view(q), view(k), view(v), view(o), view(d_o), L, view(dq),
                                           view(dk), view(dv), opt);
  });
  roofline::AttentionShape s;
  s.batch = B;
  s.heads = H;
  s.seq_q = s.seq_kv = T;
  s.head_dim = Dh;
  s.dtype = std::is_same_v<O, bf16> ? DType::bf16 : DType::f32;
  s.causal = true;
  s.backward = true;
  const auto op = calib_op("attention", "calib attention", roofline::attention_flash(s));
  const double bound_ms = roofline::bound(op.cost, chip).t_lower * 1e3;
  const std::string cls = op_class(op, precision_of<O>());
  e.by_class[cls] = std::min(1.0, bound_ms / ms);
  e.shapes[cls] = fmt::format("flash fwd+bwd causal B={} H={} T={} d={}: {:.3f} ms measured, {:.3f} ms bound",
                              B, H, T, Dh, ms, bound_ms);
}

void fit_streams(const roofline::Chip& chip, Efficiencies& e) {
  // Elementwise: a residual add.
  const int64_t n = fsh::kStream;
  Buffer<float> x(static_cast<size_t>(n), "calib.x"), y(static_cast<size_t>(n), "calib.y"),
      z(static_cast<size_t>(n), "calib.z");
  std::fill(x.begin(), x.end(), 1.0f);
  std::fill(y.begin(), y.end(), 2.0f);
  const int nt = get_num_threads();
  const double ms = time_ms([&] {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
  });
  const auto add = calib_op("elementwise", "residual add", roofline::elementwise(n, DType::f32, 2, 1));
  const double bound_ms = roofline::bound(add.cost, chip).t_lower * 1e3;
  const std::string add_cls = op_class(add, model::Precision::fp32);
  e.by_class[add_cls] = std::min(1.0, bound_ms / ms);
  e.shapes[add_cls] = fmt::format("x + y over {} fp32: {:.3f} ms measured, {:.3f} ms bound", n, ms, bound_ms);
  // Exp-heavy elementwise: SwiGLU forward and backward (the model's vector path), fp32, against the
  // memory roof of the bytes they move. Skipped where the active ISA has no vector path (those ops then
  // use the stream's efficiency).
  {
    const int64_t rows = fsh::kSwigluRows, f = fsh::kSwigluCols, nf = rows * f;
    Buffer<float> ab(static_cast<size_t>(2 * nf), "calib.ab"),
        saved(static_cast<size_t>(2 * nf), "calib.saved"), g(static_cast<size_t>(nf), "calib.g"),
        dab(static_cast<size_t>(2 * nf), "calib.dab");
    for (size_t i = 0; i < ab.size(); ++i) ab[i] = static_cast<float>(i % 11) * 0.3f - 1.5f;
    bool vector_path = true;
    const double sms = time_ms([&] {
      vector_path = model::fused::swiglu_forward(ab.data(), rows, f, saved.data(), g.data()) &&
                    model::fused::swiglu_backward(g.data(), saved.data(), rows, f, dab.data());
    });
    if (vector_path) {
      roofline::Cost sc;
      sc.op = "swiglu fwd+bwd";
      sc.compute = "fp32";
      sc.flops = 30.0L * nf;
      // forward reads a|b and writes their saved copy and g; backward reads dg and a|b, writes da|db.
      for (const auto& [elems, write] : std::vector<std::pair<int64_t, bool>>{
               {2 * nf, false}, {2 * nf, true}, {nf, true}, {nf, false}, {2 * nf, false}, {2 * nf, true}})
        sc.memory.push_back({"word", "fp32", static_cast<long double>(elems), 4.0L * elems, write});
      const auto swiglu = calib_op("elementwise", "swiglu", std::move(sc));
      const double sbound = roofline::bound(swiglu.cost, chip).t_lower * 1e3;
      const std::string cls = op_class(swiglu, model::Precision::fp32);
      e.by_class[cls] = std::min(1.0, sbound / sms);
      e.shapes[cls] = fmt::format(
          "SwiGLU forward + backward over {} x {} fp32: {:.3f} ms measured, "
          "{:.3f} ms bound",
          rows, f, sms, sbound);
    }
  }
  // Optimizer: AdamW.
  const int64_t p = fsh::kParams;
  Buffer<float> params(static_cast<size_t>(p), "calib.params"), grads(static_cast<size_t>(p), "calib.grads");
  std::fill(params.begin(), params.end(), 0.5f);
  std::fill(grads.begin(), grads.end(), 0.01f);
  model::AdamW<float> adam(p, model::AdamWConfig{});
  const double ams = time_ms([&] { adam.step(params.span(), grads.span()); });
  roofline::Cost c;
  c.op = "adamw";
  c.compute = "fp32";
  c.flops = 16.0L * p;
  for (int i = 0; i < 7; ++i)
    c.memory.push_back({"word", "fp32", static_cast<long double>(p), 4.0L * p, i >= 4});
  const auto adamw = calib_op("optimizer", "adamw", std::move(c));
  const double abound = roofline::bound(adamw.cost, chip).t_lower * 1e3;
  const std::string cls = op_class(adamw, model::Precision::fp32);
  e.by_class[cls] = std::min(1.0, abound / ams);
  e.shapes[cls] =
      fmt::format("AdamW over {} fp32 parameters: {:.3f} ms measured, {:.3f} ms bound", p, ams, abound);
}

}  // namespace

Efficiencies fit(const roofline::Chip& chip) {
  RIDGE_RANGE("fit efficiencies");
  Efficiencies e;
  e.chip = chip.id;
  e.threads = get_num_threads();
  fit_gemms<float>(chip, e);
  fit_gemms<bf16>(chip, e);
  fit_grouped<float>(chip, e);
  fit_grouped<bf16>(chip, e);
  fit_attention<float>(chip, e);
  fit_attention<bf16>(chip, e);
  fit_streams(chip, e);
  return e;
}

}  // namespace ridge::predict
