// The model's MoE block (issue 40) against a reference written here from the definitions: the router's
// logits, softmax or sigmoid scores, the top-k by score (plus the router bias) with ties to the lower
// expert, the normalised gate weights, SwiGLU experts and shared experts, the auxiliary loss; around it
// the embedding, RMSNorm, the dense feed-forward of the other layers, the final norm, lm_head and the
// cross-entropy. The reference is one forward over dual numbers (value and derivative along one
// parameter), so each parameter's exact gradient is one forward with that parameter seeded: no finite
// differences, no formula shared with the model's backward. Its attention is left out: every layer's
// attention output projection is set to zero, which makes the attention block add nothing (and its
// q, k, v and ln1 gradients exactly zero) in the model too. The whole model with attention is held to
// central differences in test_model_gradients.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/tmpdir.hpp"
#include "ridge/core/cpu.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/memory.hpp"
#include "ridge/core/threads.hpp"
#include "ridge/gemm_fp8.hpp"
#include "ridge/model/model.hpp"
#include "ridge/model/moe.hpp"
#include "ridge/model/roofline.hpp"
#include "ridge/model/train.hpp"
#include "ridge/roofline/model_buffers.hpp"

namespace rm = ridge::model;

namespace {

// ---- Dual numbers: a value and its derivative along one direction.
struct Dual {
  double v = 0, d = 0;
};
Dual operator+(Dual a, Dual b) {
  return {a.v + b.v, a.d + b.d};
}
Dual operator-(Dual a, Dual b) {
  return {a.v - b.v, a.d - b.d};
}
Dual operator*(Dual a, Dual b) {
  return {a.v * b.v, a.d * b.v + a.v * b.d};
}
Dual operator/(Dual a, Dual b) {
  return {a.v / b.v, (a.d * b.v - a.v * b.d) / (b.v * b.v)};
}
Dual exp(Dual a) {
  const double e = std::exp(a.v);
  return {e, a.d * e};
}
Dual log(Dual a) {
  return {std::log(a.v), a.d / a.v};
}
Dual sqrt(Dual a) {
  const double s = std::sqrt(a.v);
  return {s, a.d / (2 * s)};
}
Dual c(double x) {
  return {x, 0};
}

using Vec = std::vector<Dual>;

// The parameters by name, as duals; one of them may carry the derivative's seed.
using Params = std::map<std::string, Vec>;

// RMSNorm of each row of x [n, d] with weight w.
Vec rmsnorm(const Vec& x, const Vec& w, int64_t n, int64_t d, double eps) {
  Vec y(x.size());
  for (int64_t i = 0; i < n; ++i) {
    Dual ss = c(0);
    for (int64_t j = 0; j < d; ++j) ss = ss + x[i * d + j] * x[i * d + j];
    const Dual r = c(1) / sqrt(ss / c(static_cast<double>(d)) + c(eps));
    for (int64_t j = 0; j < d; ++j) y[i * d + j] = x[i * d + j] * r * w[j];
  }
  return y;
}

// out = w [rows, cols] (at offset `at` of its tensor) times the vector in [cols].
Vec matvec(const Vec& w, int64_t at, int64_t rows, int64_t cols, const Dual* in) {
  Vec out(static_cast<size_t>(rows), c(0));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) out[r] = out[r] + w[at + r * cols + k] * in[k];
  return out;
}

Dual sigmoid(Dual x) {
  return c(1) / (c(1) + exp(c(0) - x));
}

// SwiGLU of one token h [D]: w2 (silu(w1 h) * (w3 h)), width f, expert `e` of a stack (0 for a matrix).
Vec swiglu(const Vec& w1, const Vec& w2, const Vec& w3, int64_t e, int64_t f, int64_t d, const Dual* h) {
  const Vec a = matvec(w1, e * f * d, f, d, h), b = matvec(w3, e * f * d, f, d, h);
  Vec g(static_cast<size_t>(f));
  for (int64_t j = 0; j < f; ++j) g[j] = a[j] * sigmoid(a[j]) * b[j];
  return matvec(w2, e * d * f, d, f, g.data());
}

struct RefOut {
  Dual loss, aux;
  Vec logits;
  std::vector<std::vector<int64_t>> counts;  // per MoE layer
};

// The model from the definitions, with each layer's attention adding nothing.
RefOut reference(const rm::ModelConfig& cfg, const Params& p, const std::vector<std::vector<double>>& biases,
                 const std::vector<int32_t>& x, const std::vector<int32_t>& y) {
  const int64_t N = static_cast<int64_t>(x.size()), D = cfg.d_model, V = cfg.vocab_size, F = cfg.d_ff;
  const double eps = cfg.rms_norm_eps;
  RefOut out;
  out.aux = c(0);
  Vec h(static_cast<size_t>(N * D));
  const Vec& emb = p.at("token_embeddings.weight");
  for (int64_t t = 0; t < N; ++t)
    for (int64_t j = 0; j < D; ++j) h[t * D + j] = emb[x[t] * D + j];
  size_t moe_at = 0;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const std::string pre = "layers." + std::to_string(l) + ".";
    const Vec n2 = rmsnorm(h, p.at(pre + "ln2.weight"), N, D, eps);
    if (!cfg.moe_layer(l)) {
      for (int64_t t = 0; t < N; ++t) {
        const Vec f = swiglu(p.at(pre + "ffn.w1.weight"), p.at(pre + "ffn.w2.weight"),
                             p.at(pre + "ffn.w3.weight"), 0, F, D, &n2[t * D]);
        for (int64_t j = 0; j < D; ++j) h[t * D + j] = h[t * D + j] + f[j];
      }
      continue;
    }
    const int64_t E = cfg.num_experts, k = cfg.top_k, De = cfg.expert_width(), S = cfg.shared_width();
    const auto& bias = biases[moe_at++];
    std::vector<int64_t> count(static_cast<size_t>(E), 0);
    std::vector<Dual> mean_q(static_cast<size_t>(E), c(0));
    std::vector<Vec> ffn(static_cast<size_t>(N));
    for (int64_t t = 0; t < N; ++t) {
      const Dual* ht = &n2[t * D];
      const Vec logit = matvec(p.at(pre + "ffn.router.weight"), 0, E, D, ht);
      // Scores: softmax over the E logits, or each one's sigmoid.
      Vec q(static_cast<size_t>(E));
      if (cfg.router == rm::moe::Gate::softmax) {
        double m = logit[0].v;
        for (const Dual& v : logit) m = std::max(m, v.v);
        Dual sum = c(0);
        for (int64_t e = 0; e < E; ++e) sum = sum + (q[e] = exp(logit[e] - c(m)));
        for (auto& v : q) v = v / sum;
      } else {
        for (int64_t e = 0; e < E; ++e) q[e] = sigmoid(logit[e]);
      }
      // The top k by score + bias, ties to the lower expert: a full stable sort.
      std::vector<int64_t> order(static_cast<size_t>(E));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return q[a].v + (bias.empty() ? 0.0 : bias[a]) > q[b].v + (bias.empty() ? 0.0 : bias[b]);
      });
      Dual chosen = c(0);
      for (int64_t j = 0; j < k; ++j) chosen = chosen + q[order[j]];
      Vec f(static_cast<size_t>(D), c(0));
      for (int64_t j = 0; j < k; ++j) {
        const int64_t e = order[j];
        ++count[e];
        const Vec o = swiglu(p.at(pre + "ffn.experts.w1.weight"), p.at(pre + "ffn.experts.w2.weight"),
                             p.at(pre + "ffn.experts.w3.weight"), e, De, D, ht);
        for (int64_t i = 0; i < D; ++i) f[i] = f[i] + q[e] / chosen * o[i];
      }
      if (S > 0) {
        const Vec o = swiglu(p.at(pre + "ffn.shared.w1.weight"), p.at(pre + "ffn.shared.w2.weight"),
                             p.at(pre + "ffn.shared.w3.weight"), 0, S, D, ht);
        for (int64_t i = 0; i < D; ++i) f[i] = f[i] + o[i];
      }
      ffn[t] = f;
      // The auxiliary loss's distribution: softmax p, or the sigmoids normalised over all E experts.
      Dual all = c(0);
      for (const Dual& v : q) all = all + v;
      for (int64_t e = 0; e < E; ++e)
        mean_q[e] = mean_q[e] + (cfg.router == rm::moe::Gate::softmax ? q[e] : q[e] / all) / c(double(N));
    }
    for (int64_t t = 0; t < N; ++t)
      for (int64_t j = 0; j < D; ++j) h[t * D + j] = h[t * D + j] + ffn[t][j];
    if (cfg.balance == rm::moe::Balance::aux) {
      Dual a = c(0);
      for (int64_t e = 0; e < E; ++e) a = a + c(double(count[e]) / double(N)) * mean_q[e];
      out.aux = out.aux + c(cfg.aux_loss_coef * double(E)) * a;
    }
    out.counts.push_back(count);
  }
  const Vec hf = rmsnorm(h, p.at("ln_final.weight"), N, D, eps);
  out.logits.resize(static_cast<size_t>(N * V));
  Dual ce = c(0);
  for (int64_t t = 0; t < N; ++t) {
    const Vec l = matvec(p.at("lm_head.weight"), 0, V, D, &hf[t * D]);
    double m = l[0].v;
    for (const Dual& v : l) m = std::max(m, v.v);
    Dual sum = c(0);
    for (const Dual& v : l) sum = sum + exp(v - c(m));
    ce = ce + (log(sum) + c(m) - l[y[t]]);
    std::copy(l.begin(), l.end(), out.logits.begin() + t * V);
  }
  out.loss = ce / c(double(N)) + out.aux;
  return out;
}

// Two layers, 4 experts of width 6, top-2; d_head 16, FlashAttention's smallest.
rm::ModelConfig moe_config() {
  rm::ModelConfig c;
  c.vocab_size = 13, c.context_length = 7, c.d_model = 16, c.num_layers = 2, c.num_heads = 1, c.d_ff = 12;
  c.num_experts = 4, c.top_k = 2, c.d_expert = 6;
  return c;
}

// n token ids below vocab, drawn from a seeded generator.
std::vector<int32_t> tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::generate(t.begin(), t.end(), [&] { return static_cast<int32_t>(g() % static_cast<uint32_t>(vocab)); });
  return t;
}

bool attention_tensor(const std::string& name) {
  return name.find(".attn.") != std::string::npos || name.find(".ln1.") != std::string::npos;
}

// A model's weights for the reference comparison: initialised, norms away from 1, and every attention
// output projection zero; with balance bias, router biases that change some choices.
template <typename S>
void prepare(rm::TransformerLM<S>& m, uint32_t seed) {
  m.init(seed);
  std::mt19937 g(seed + 1);
  std::normal_distribution<double> n(0.0, 0.1);
  for (const auto& t : m.tensors()) {
    if (t.shape.size() == 1)
      for (auto& w : m.param(t.name)) w = static_cast<S>(1.0 + n(g));
    if (t.name.find("attn.output_proj") != std::string::npos)
      for (auto& w : m.param(t.name)) w = S(0);
  }
  for (auto& b : m.state()) b = static_cast<S>(n(g));
}

// The reference's parameters: the model's values, the derivative seeded at (tensor, index) or nowhere.
Params params_of(const rm::TransformerLM<double>& m, const std::string& seed_name = "",
                 int64_t seed_at = -1) {
  Params p;
  for (const auto& t : m.tensors()) {
    Vec v(static_cast<size_t>(t.numel));
    for (int64_t i = 0; i < t.numel; ++i) v[i] = c(m.params()[static_cast<size_t>(t.offset + i)]);
    if (seed_at >= 0 && t.name == seed_name) v[static_cast<size_t>(seed_at)].d = 1;
    p[t.name] = std::move(v);
  }
  return p;
}
std::vector<std::vector<double>> biases_of(rm::TransformerLM<double>& m) {
  std::vector<std::vector<double>> b;
  const rm::ModelConfig& cfg = m.config();
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    if (!cfg.moe_layer(l)) continue;
    b.emplace_back();
    for (const auto& t : m.state_tensors())
      if (t.name == "layers." + std::to_string(l) + ".ffn.router.bias")
        b.back().assign(m.state().begin() + t.offset, m.state().begin() + t.offset + t.numel);
  }
  return b;
}

// The reference's loss, logits, counts and every parameter's gradient.
struct Reference {
  double loss = 0, aux = 0;
  std::vector<double> logits;
  std::vector<std::vector<int64_t>> counts;
  std::map<std::string, std::vector<double>> grad;
};
Reference reference_of(rm::TransformerLM<double>& m, const std::vector<int32_t>& x,
                       const std::vector<int32_t>& y) {
  Reference r;
  const auto biases = biases_of(m);
  const RefOut base = reference(m.config(), params_of(m), biases, x, y);
  r.loss = base.loss.v;
  r.aux = base.aux.v;
  for (const Dual& v : base.logits) r.logits.push_back(v.v);
  r.counts = base.counts;
  for (const auto& t : m.tensors()) {
    auto& g = r.grad[t.name];
    for (int64_t i = 0; i < t.numel; ++i)
      g.push_back(attention_tensor(t.name)
                      ? 0.0
                      : reference(m.config(), params_of(m, t.name, i), biases, x, y).loss.d);
  }
  return r;
}

// max |a - b| over max |b| (|a - b| where b is all zero).
template <typename A>
double rel_err(std::span<const A> a, const std::vector<double>& b) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return scale > 0 ? err / scale : err;
}

// DeepGEMM's calc_diff: 1 - 2 <a, b> / (|a|^2 + |b|^2), 0 for equal tensors.
template <typename A>
double calc_diff(std::span<const A> a, const std::vector<double>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * static_cast<double>(a[i]);
    bb += b[i] * b[i];
  }
  return aa + bb > 0 ? 1 - 2 * ab / (aa + bb) : 0;
}

struct Variant {
  const char* name;
  rm::moe::Gate gate;
  rm::moe::Balance balance;
  int64_t shared;
  std::vector<int64_t> layers;  // moe_layers
  int64_t top_k = 2;
};

std::vector<Variant> variants() {
  using G = rm::moe::Gate;
  using B = rm::moe::Balance;
  return {{"softmax aux shared all", G::softmax, B::aux, 1, {}},
          {"sigmoid aux", G::sigmoid, B::aux, 0, {}},
          {"softmax bias layer 1", G::softmax, B::bias, 0, {1}},
          {"sigmoid bias shared layer 0", G::sigmoid, B::bias, 2, {0}},
          {"softmax top-1", G::softmax, B::aux, 1, {}, 1},
          {"sigmoid top-k = E", G::sigmoid, B::aux, 0, {}, 4}};
}

rm::ModelConfig config_of(const Variant& v) {
  rm::ModelConfig c = moe_config();
  c.router = v.gate;
  c.balance = v.balance;
  c.num_shared_experts = v.shared;
  c.moe_layers = v.layers;
  c.top_k = v.top_k;
  c.aux_loss_coef = 0.05;  // large enough that a wrong auxiliary gradient shows
  return c;
}

// A case against the reference: its config, batch, the fp64 model with prepare()'s weights, the reference.
struct Case {
  rm::ModelConfig cfg;
  std::vector<int32_t> x, y;
  rm::TransformerLM<double> m64;
  Reference ref;
  explicit Case(const rm::ModelConfig& c, int64_t n)
      : cfg(c), x(tokens(n, c.vocab_size, 3)), y(tokens(n, c.vocab_size, 4)), m64(c) {
    prepare(m64, 5);
    ref = reference_of(m64, x, y);
  }
  // An fp32 model of precision p with the fp64 model's weights and biases.
  rm::TransformerLM<float> model(rm::Precision p, rm::AttentionPath a = rm::AttentionPath::flash) {
    rm::TransformerLM<float> m(cfg, p, a);
    const auto narrow = [](double v) { return static_cast<float>(v); };
    std::transform(m64.params().begin(), m64.params().end(), m.params().begin(), narrow);
    std::transform(m64.state().begin(), m64.state().end(), m.state().begin(), narrow);
    return m;
  }
};

// The model's counts per MoE layer.
template <typename S>
std::vector<std::vector<int64_t>> counts_of(const rm::TransformerLM<S>& m) {
  std::vector<std::vector<int64_t>> c;
  for (const auto& st : m.moe_stats()) c.push_back(st.count);
  return c;
}

// fp32 bound as the dense model's gradient test derives it (test_model_gradients.cpp): each of the
// reductions of a layer's chain adds at most k u relative error (k the longest reduction, u = 2^-24);
// an MoE layer's chain has at most 20 (forward: router, experts' w1|w3 and w2, the combine, the shared
// experts' two; backward: two per GEMM, the combine's, the gate's), 4x allowed.
double fp32_bound(const rm::ModelConfig& c, int64_t n) {
  const double k = static_cast<double>(
      std::max({n, c.d_model, c.d_ff, c.vocab_size, c.expert_width(), c.shared_width() + 1}));
  return 4.0 * (20.0 * static_cast<double>(c.num_layers) + 6.0) * k * std::ldexp(1.0, -24);
}

}  // namespace

// The fp64 model and the fp32 model (every ISA path, both attention paths) against the reference, in
// both gates, both balances, with and without shared experts, MoE in every layer or one: loss, auxiliary
// loss, logits, the routing's counts and every gradient. The fp64 model agrees to rounding (1e-9 of each
// tensor's scale, where a wrong term is O(1)); the fp32 model to the dense model's fp32 bound.
TEST(MoeBlock, MatchesTheReferenceInBothGatesAndBalances) {
  const int64_t B = 2, T = 7, N = B * T;
  for (const Variant& v : variants()) {
    SCOPED_TRACE(v.name);
    Case k(config_of(v), N);
    const rm::ModelConfig& cfg = k.cfg;
    const std::vector<int32_t>&x = k.x, &y = k.y;
    const Reference& ref = k.ref;
    rm::TransformerLM<double>& m64 = k.m64;
    if (v.balance == rm::moe::Balance::aux) {
      EXPECT_GT(ref.aux, 0.0);
    }

    m64.zero_grad();
    const double loss64 = m64.forward(x.data(), y.data(), B, T);
    EXPECT_LE(rel_err(m64.logits(), ref.logits), 1e-12);  // before backward turns them into dlogits
    m64.backward();
    EXPECT_NEAR(loss64, ref.loss, 1e-12 * std::abs(ref.loss));
    EXPECT_NEAR(m64.aux_loss(), ref.aux, 1e-12);
    EXPECT_EQ(counts_of(m64), ref.counts);
    for (const auto& t : m64.tensors()) {
      if (t.name.find("attn.output_proj") != std::string::npos) continue;  // the reference has no attention
      const auto& g = ref.grad.at(t.name);
      EXPECT_LE(rel_err<double>(m64.grad(t.name), g), 1e-9) << t.name;
      if (!attention_tensor(t.name)) {
        const double scale = std::abs(*std::max_element(
            g.begin(), g.end(), [](double a, double b) { return std::abs(a) < std::abs(b); }));
        EXPECT_GT(scale, 0.0) << t.name << ": the reference's gradient is zero, the case tests nothing";
      }
    }

    const double bound = fp32_bound(cfg, N);
    const auto saved = ridge::cpu::active_isa();
    for (const auto isa : ridge::cpu::supported_isas()) {
      ridge::cpu::set_isa(isa);
      for (const auto path : {rm::AttentionPath::flash, rm::AttentionPath::math}) {
        SCOPED_TRACE(std::string(ridge::cpu::isa_name(isa)) + " " + rm::attention_path_name(path));
        rm::TransformerLM<float> m = k.model(rm::Precision::fp32, path);
        m.zero_grad();
        const float loss = m.forward(x.data(), y.data(), B, T);
        EXPECT_LE(rel_err(m.logits(), ref.logits), bound);
        m.backward();
        EXPECT_NEAR(loss, ref.loss, bound * std::abs(ref.loss));
        EXPECT_EQ(counts_of(m), ref.counts);
        for (const auto& t : m.tensors()) {
          if (t.name.find("attn.output_proj") == std::string::npos) {
            EXPECT_LE(rel_err<float>(m.grad(t.name), ref.grad.at(t.name)), bound) << t.name;
          }
        }
      }
    }
    ridge::cpu::set_isa(saved);
  }
}

// bf16 and fp16 operands against the fp64 reference, with DeepGEMM's metric: the operands are rounded
// (u = 2^-9 for bf16, 2^-11 for fp16) at some 20 points of a layer's chain, so a tensor's relative error
// stays below 20u = 4% and calc_diff ~ (relative error)^2 / 2 below 1e-3. The routing must be the
// reference's (the test's weights leave no choice within rounding of a tie), and bf16 must differ from
// the reference by more than fp32 does, or it rounded nothing.
TEST(MoeBlock, Bf16AndFp16MatchTheReferenceByCalcDiff) {
  const int64_t B = 2, T = 7, N = B * T;
  for (const Variant& v : variants()) {
    SCOPED_TRACE(v.name);
    Case k(config_of(v), N);
    const Reference& ref = k.ref;
    for (const auto p : {rm::Precision::bf16, rm::Precision::fp16}) {
      SCOPED_TRACE(rm::precision_name(p));
      rm::TransformerLM<float> m = k.model(p);
      m.zero_grad();
      const float loss = m.forward(k.x.data(), k.y.data(), B, T);
      EXPECT_LE(calc_diff(m.logits(), ref.logits), 1e-3);
      EXPECT_GT(rel_err(m.logits(), ref.logits), 1e-4) << "the operands were not rounded";
      m.backward();
      ASSERT_EQ(counts_of(m), ref.counts);
      EXPECT_NEAR(loss, ref.loss, 0.04 * std::abs(ref.loss));
      for (const auto& t : m.tensors()) {
        if (!attention_tensor(t.name)) {
          EXPECT_LE(calc_diff<float>(m.grad(t.name), ref.grad.at(t.name)), 1e-3) << t.name;
        }
      }
    }
  }
}

// Routing through the whole block when one expert takes every token (its router row the only one that
// reads a coordinate every token has positive) and the others none: the empty experts' gradients are
// zero, the reference's too, and the load is E / k.
TEST(MoeBlock, OneExpertTakesEveryTokenAndTheOthersNone) {
  const int64_t B = 2, T = 7, N = B * T;
  for (const auto gate : {rm::moe::Gate::softmax, rm::moe::Gate::sigmoid}) {
    SCOPED_TRACE(rm::moe::gate_name(gate));
    rm::ModelConfig cfg = moe_config();
    cfg.num_layers = 1, cfg.top_k = 1, cfg.router = gate;
    const auto x = tokens(N, cfg.vocab_size, 7), y = tokens(N, cfg.vocab_size, 8);
    rm::TransformerLM<double> m64(cfg);
    prepare(m64, 9);
    auto emb = m64.param("token_embeddings.weight");
    for (int64_t v = 0; v < cfg.vocab_size; ++v) emb[static_cast<size_t>(v * cfg.d_model)] = 3.0;
    for (auto& w : m64.param("layers.0.ln2.weight")) w = 1.0;
    auto router = m64.param("layers.0.ffn.router.weight");
    std::fill(router.begin(), router.end(), 0.0);
    router[static_cast<size_t>(2 * cfg.d_model)] = 4.0;  // expert 2 reads coordinate 0
    const Reference ref = reference_of(m64, x, y);
    ASSERT_EQ(ref.counts, (std::vector<std::vector<int64_t>>{{0, 0, N, 0}}));
    rm::TransformerLM<float> m(cfg);
    for (size_t i = 0; i < m.params().size(); ++i) m.params()[i] = static_cast<float>(m64.params()[i]);
    m.zero_grad();
    const float loss = m.forward(x.data(), y.data(), B, T);
    m.backward();
    EXPECT_EQ(counts_of(m), ref.counts);
    EXPECT_DOUBLE_EQ(m.moe_stats()[0].load_imbalance, 4.0);
    const double bound = fp32_bound(cfg, N);
    EXPECT_NEAR(loss, ref.loss, bound * std::abs(ref.loss));
    for (const auto& t : m.tensors()) {
      if (!attention_tensor(t.name)) {
        EXPECT_LE(rel_err<float>(m.grad(t.name), ref.grad.at(t.name)), bound) << t.name;
      }
    }
    // Expert 0's weights took no token: their gradient is exactly zero.
    const auto g1 = m.grad("layers.0.ffn.experts.w1.weight");
    const int64_t per = cfg.expert_width() * cfg.d_model;
    EXPECT_TRUE(std::all_of(g1.begin(), g1.begin() + per, [](float v) { return v == 0.0f; }));
  }
}

// The same bits at 1 and 2 threads: loss, logits and every gradient.
TEST(MoeBlock, ThreadCountDoesNotChangeTheBits) {
  rm::ModelConfig cfg = config_of(variants()[0]);
  cfg.context_length = 24;
  const auto x = tokens(3 * 24, cfg.vocab_size, 5), y = tokens(3 * 24, cfg.vocab_size, 6);
  std::vector<std::vector<float>> grads, logits;
  std::vector<float> losses;
  const int saved = ridge::get_num_threads();
  for (const auto p : {rm::Precision::fp32, rm::Precision::bf16})
    for (int threads : {1, 2}) {
      ridge::set_num_threads(threads);
      rm::TransformerLM<float> m(cfg, p);
      m.init(2);
      m.zero_grad();
      losses.push_back(m.forward(x.data(), y.data(), 3, 24));
      logits.emplace_back(m.logits().begin(), m.logits().end());
      m.backward();
      grads.emplace_back(m.grads().begin(), m.grads().end());
    }
  ridge::set_num_threads(saved);
  for (size_t i : {size_t{0}, size_t{2}}) {
    EXPECT_EQ(losses[i], losses[i + 1]);
    EXPECT_TRUE(logits[i] == logits[i + 1]);
    EXPECT_TRUE(grads[i] == grads[i + 1]);
  }
}

// A few steps of a tiny MoE model on one batch lower its loss, under either balance; under balance
// bias each step moves every router bias by the speed towards balance, from that step's counts
// (DeepSeek-V3: b_e += speed * sign(mean - c_e)), and reports the load of each MoE layer.
TEST(MoeBlock, TrainingLowersTheLossAndTheBiasFollowsTheCounts) {
  for (const auto balance : {rm::moe::Balance::aux, rm::moe::Balance::bias}) {
    SCOPED_TRACE(rm::moe::balance_name(balance));
    rm::ModelConfig cfg = moe_config();
    cfg.context_length = 16, cfg.num_shared_experts = 1, cfg.balance = balance, cfg.bias_update_speed = 0.01;
    rm::TrainConfig t;
    t.batch = 2, t.seq = 16, t.lr_max = 1e-2;
    rm::Trainer tr(cfg, t);
    const auto x = tokens(32, cfg.vocab_size, 11), y = tokens(32, cfg.vocab_size, 12);
    double first = 0, last = 0;
    for (int s = 0; s < 30; ++s) {
      const std::vector<float> before(tr.model().state().begin(), tr.model().state().end());
      const rm::StepResult r = tr.step(x.data(), y.data());
      if (s == 0) first = r.loss;
      last = r.loss;
      const auto stats = tr.model().moe_stats();
      ASSERT_EQ(r.expert_load.size(), stats.size());
      for (size_t l = 0; l < stats.size(); ++l) EXPECT_DOUBLE_EQ(r.expert_load[l], stats[l].load_imbalance);
      if (balance == rm::moe::Balance::aux) {
        EXPECT_GT(r.aux_loss, 0.0);
        EXPECT_EQ(tr.model().state().size(), 0u);
        continue;
      }
      EXPECT_EQ(r.aux_loss, 0.0);
      ASSERT_EQ(tr.model().state().size(), stats.size() * 4);
      const double mean = 32.0 * cfg.top_k / 4;
      for (size_t l = 0; l < stats.size(); ++l)
        for (size_t e = 0; e < 4; ++e) {
          const double cnt = static_cast<double>(stats[l].count[e]);
          const double sign = cnt < mean ? 1 : cnt > mean ? -1 : 0;
          EXPECT_EQ(tr.model().state()[l * 4 + e], static_cast<float>(before[l * 4 + e] + 0.01 * sign));
        }
    }
    EXPECT_LT(last, 0.7 * first) << "first " << first << " last " << last;
  }
}

// Save, load into a fresh trainer: the same logits, the router biases included; a dense checkpoint in an
// MoE model and the reverse are refused naming num_experts, another top_k naming top_k.
TEST(MoeBlock, CheckpointsRoundTripAndRefuseAnotherModel) {
  ridge::test::TempDir dir;
  rm::ModelConfig cfg = moe_config();
  cfg.context_length = 8, cfg.balance = rm::moe::Balance::bias, cfg.num_shared_experts = 1,
  cfg.moe_layers = {1};
  rm::TrainConfig t;
  t.batch = 2, t.seq = 8;
  const auto x = tokens(16, cfg.vocab_size, 1), y = tokens(16, cfg.vocab_size, 2);
  rm::Trainer a(cfg, t);
  for (int s = 0; s < 3; ++s) a.step(x.data(), y.data());
  ASSERT_TRUE(
      std::any_of(a.model().state().begin(), a.model().state().end(), [](float b) { return b != 0; }));
  const std::string path = dir.file("moe.safetensors");
  a.save(path);
  rm::Trainer b(cfg, t);
  b.load(path);
  EXPECT_TRUE(std::equal(a.model().state().begin(), a.model().state().end(), b.model().state().begin()));
  a.model().forward(x.data(), nullptr, 2, 8);
  b.model().forward(x.data(), nullptr, 2, 8);
  EXPECT_TRUE(std::equal(a.model().logits().begin(), a.model().logits().end(), b.model().logits().begin()));
  EXPECT_EQ(rm::checkpoint_config(path), cfg);

  auto refused_naming = [&](const rm::ModelConfig& other, const std::string& field, const std::string& file) {
    rm::Trainer o(other, t);
    try {
      o.load(file);
      ADD_FAILURE() << "loaded a checkpoint of another model";
    } catch (const ridge::Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(field + ":", 0), 0u) << e.what();
    }
  };
  rm::ModelConfig dense = cfg;
  dense.num_experts = dense.top_k = dense.num_shared_experts = dense.d_expert = 0;
  dense.moe_layers.clear();
  refused_naming(dense, "num_experts", path);
  rm::Trainer d(dense, t);
  const std::string dense_path = dir.file("dense.safetensors");
  d.save(dense_path);
  refused_naming(cfg, "num_experts", dense_path);
  rm::ModelConfig k1 = cfg;
  k1.top_k = 1;
  refused_naming(k1, "top_k", path);
  rm::ModelConfig aux = cfg;
  aux.balance = rm::moe::Balance::aux;
  refused_naming(aux, "balance", path);
}

// The memory estimate counts what an MoE step allocates: each region exactly (a dense layer's block,
// an MoE layer's with the worst-case rows of the layout, the workspace), and the step's peak within
// the kernels' scratch of the total, which adds the routing's arrays. The experts' row alignment is the
// grouped GEMMs'.
TEST(MoeBlock, MemoryEstimateIsWhatTheModelAllocates) {
  EXPECT_EQ(ridge::roofline::kExpertRowAlignment, ridge::gemm::m_alignment_for_contiguous_layout());
  for (const auto p : {rm::Precision::fp32, rm::Precision::bf16, rm::Precision::fp16})
    for (const int64_t shared : {0, 2}) {
      rm::ModelConfig c = moe_config();
      c.vocab_size = 97, c.context_length = 24, c.d_model = 64, c.num_heads = 4, c.d_ff = 160,
      c.num_layers = 3;
      c.num_experts = 8, c.d_expert = 40, c.num_shared_experts = shared, c.moe_layers = {0, 2};
      c.balance = shared ? rm::moe::Balance::bias : rm::moe::Balance::aux;
      rm::TrainConfig t;
      t.batch = 2, t.seq = 24, t.precision = p;
      const auto est = rm::step_memory(c, t.batch, t.seq, p);
      SCOPED_TRACE(std::string(rm::precision_name(p)) + " shared " + std::to_string(shared));
      EXPECT_EQ(est.moe_layers, 2);
      EXPECT_GT(est.per_moe_layer, 0.0);
      EXPECT_GT(est.routing, 0.0);
      const int64_t base = ridge::memory::current_bytes();
      ridge::memory::reset_peak();
      {
        rm::Trainer trainer(c, t);
        const auto x = tokens(48, c.vocab_size, 1), y = tokens(48, c.vocab_size, 2);
        trainer.step(x.data(), y.data());
        const auto& model = trainer.model();
        EXPECT_EQ(static_cast<double>(model.params().size() * sizeof(float)), est.parameters);
        EXPECT_EQ(static_cast<double>(model.activation_bytes()), est.activations());
        EXPECT_EQ(static_cast<double>(model.workspace_bytes()), est.workspace);
      }
      const double peak = static_cast<double>(ridge::memory::peak_bytes() - base);
      EXPECT_GE(peak, est.total() - est.routing);
      EXPECT_LE(peak, est.total() * 1.15 + (1 << 20)) << "peak " << peak << " estimate " << est.total();
    }
}

// A dense model's buffers are what they were: no MoE buffer takes a place in a dense layout.
TEST(MoeBlock, DenseLayoutsHaveNoMoeBuffers) {
  ridge::roofline::ModelShape m;
  m.vocab_size = 100, m.d_model = 64, m.num_layers = 2, m.num_heads = 4, m.d_ff = 96, m.batch = 2, m.seq = 8;
  EXPECT_EQ(ridge::roofline::expert_rows(m), 0);
  for (const auto b :
       {ridge::roofline::Buf::router_logits, ridge::roofline::Buf::moe_x, ridge::roofline::Buf::moe_gemm,
        ridge::roofline::Buf::router_dlogits, ridge::roofline::Buf::shared_g})
    EXPECT_EQ(ridge::roofline::buffer_elements(b, m), 0);
  const auto mem = ridge::roofline::model_memory(m);
  EXPECT_EQ(mem.moe_layers, 0);
  EXPECT_EQ(mem.routing, 0.0);
  // The workspace ends with dout [N, D] of 4-byte elements, its size what it was before MoE.
  const auto ws = ridge::roofline::region_layout(ridge::roofline::Region::workspace, m, 4, 4);
  EXPECT_EQ(ws.bytes, ws.offset[static_cast<int>(ridge::roofline::Buf::dout)] + 16 * 64 * 4);
}
