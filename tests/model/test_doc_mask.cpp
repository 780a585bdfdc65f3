// Document masking (`ridge train --doc-mask`): a batch whose rows pack several documents, each closed
// by an end-of-text token, must train exactly as if every document were run alone. The reference is
// independent of the mask: the fp64 model without it, run on one document at a time (batch 1, the
// document's own length), its losses weighted by length and its gradients accumulated with the same
// weights. Held to it: the fp64 model with the mask (math path, a document at a time) within double
// rounding, and the fp32 model with the mask on the varlen FlashAttention kernels, every ISA path, and on
// its math path, within fp32 rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "ridge/core/cpu.hpp"
#include "ridge/core/error.hpp"
#include "ridge/model/model.hpp"

namespace rm = ridge::model;

namespace {

constexpr int32_t kEot = 7;
constexpr int64_t kB = 2, kT = 21;

rm::ModelConfig doc_config() {
  rm::ModelConfig c;
  c.vocab_size = 41;
  c.context_length = kT;
  c.d_model = 64;
  c.num_layers = 2;
  c.num_heads = 4;  // d_head 16, FlashAttention's smallest
  c.num_kv_heads = 2;
  c.d_ff = 72;
  return c;
}

// Two rows: documents of 5, 1 (an eot right after an eot), 10 and 5 tokens (the last one cut by the
// row's end, no eot), and a row that is one eot-free document.
struct Batch {
  std::vector<int32_t> x, y;
  std::vector<std::pair<int64_t, int64_t>> docs;  // [start, end) in the packed rows
};

Batch make_batch() {
  std::mt19937 gen(11);
  std::uniform_int_distribution<int32_t> tok(0, 40);
  auto draw = [&] {
    int32_t t;
    do t = tok(gen);
    while (t == kEot);
    return t;
  };
  Batch b;
  b.x.resize(kB * kT);
  b.y.resize(kB * kT);
  for (auto& t : b.x) t = draw();
  for (auto& t : b.y) t = tok(gen);
  for (int64_t p : {4, 5, 15}) b.x[static_cast<size_t>(p)] = kEot;
  b.docs = {{0, 5}, {5, 6}, {6, 16}, {16, 21}, {21, 42}};
  return b;
}

template <typename A>
double max_abs(const A& a) {
  double m = 0;
  for (auto v : a) m = std::max(m, std::abs(static_cast<double>(v)));
  return m;
}
template <typename A, typename B>
double max_diff(const A& a, const B& b) {
  double m = 0;
  for (size_t i = 0; i < b.size(); ++i)
    m = std::max(m, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  return m;
}

// The reference: each document alone in the fp64 model without a mask.
struct Reference {
  double loss = 0;
  std::vector<double> logits;             // [kB * kT, vocab]
  std::vector<std::vector<double>> grad;  // per tensor
};

Reference run_alone(rm::TransformerLM<double>& m, const Batch& b) {
  Reference r;
  const int64_t V = m.config().vocab_size, N = kB * kT;
  r.logits.assign(static_cast<size_t>(N * V), 0.0);
  m.zero_grad();
  for (const auto& [t0, t1] : b.docs) {
    const int64_t len = t1 - t0;
    const double w = static_cast<double>(len) / static_cast<double>(N);
    r.loss += w * m.forward(b.x.data() + t0, b.y.data() + t0, 1, len);
    std::copy(m.logits().begin(), m.logits().end(), r.logits.begin() + t0 * V);
    m.backward(w);
  }
  for (const auto& t : m.tensors()) {
    const auto g = m.grad(t.name);
    r.grad.emplace_back(g.begin(), g.end());
  }
  return r;
}

template <typename S>
void expect_matches(rm::TransformerLM<S>& m, const Batch& b, const Reference& r, double bound) {
  m.set_document_mask(kEot);
  m.zero_grad();
  const double loss = static_cast<double>(m.forward(b.x.data(), b.y.data(), kB, kT));
  EXPECT_NEAR(loss, r.loss, bound * std::abs(r.loss));
  EXPECT_LE(max_diff(m.logits(), r.logits), bound * max_abs(r.logits));
  m.backward();
  for (size_t i = 0; i < m.tensors().size(); ++i) {
    const auto& t = m.tensors()[i];
    EXPECT_LE(max_diff(m.grad(t.name), r.grad[i]), bound * max_abs(r.grad[i])) << t.name;
  }
}

// Weights both models hold exactly: the fp64 model's initialisation rounded to fp32, norm weights
// moved away from 1.
void init_weights(rm::TransformerLM<double>& ref) {
  ref.init(3);
  std::mt19937 gen(5);
  std::normal_distribution<double> nd(0.0, 0.1);
  for (const auto& t : ref.tensors()) {
    auto p = ref.param(t.name);
    for (auto& w : p) {
      if (t.shape.size() == 1) w = 1.0 + nd(gen);
      w = static_cast<double>(static_cast<float>(w));
    }
  }
}

}  // namespace

TEST(DocumentMask, Fp64EqualsEachDocumentAlone) {
  const rm::ModelConfig c = doc_config();
  const Batch b = make_batch();
  rm::TransformerLM<double> ref(c, rm::Precision::fp32, rm::AttentionPath::math);
  init_weights(ref);
  const Reference r = run_alone(ref, b);
  rm::TransformerLM<double> m(c, rm::Precision::fp32, rm::AttentionPath::math);
  std::copy(ref.params().begin(), ref.params().end(), m.params().begin());
  expect_matches(m, b, r, 1e-12);
  // The mask matters: the same batch without it is another loss.
  m.set_document_mask(-1);
  EXPECT_GT(std::abs(m.forward(b.x.data(), b.y.data(), kB, kT) - r.loss), 1e-6 * std::abs(r.loss));
}

// fp32: as GroupedQueryAttention's fp32 bound, each of the ~12 reductions per layer (length at most
// k = max(N, D, F, V)) by k u, u = 2^-24, on both attention paths and every ISA path.
TEST(DocumentMask, Fp32EqualsEachDocumentAloneEveryPathAndIsa) {
  const rm::ModelConfig c = doc_config();
  const Batch b = make_batch();
  rm::TransformerLM<double> ref(c, rm::Precision::fp32, rm::AttentionPath::math);
  init_weights(ref);
  const Reference r = run_alone(ref, b);
  const double k = static_cast<double>(std::max({kB * kT, c.d_model, c.d_ff, c.vocab_size}));
  const double bound = 4.0 * (12.0 * static_cast<double>(c.num_layers) + 6.0) * k * std::ldexp(1.0, -24);
  const auto saved = ridge::cpu::active_isa();
  for (const auto isa : ridge::cpu::supported_isas()) {
    ridge::cpu::set_isa(isa);
    for (const auto path : {rm::AttentionPath::flash, rm::AttentionPath::math}) {
      SCOPED_TRACE(std::string(ridge::cpu::isa_name(isa)) + " " + rm::attention_path_name(path));
      rm::TransformerLM<float> m(c, rm::Precision::fp32, path);
      std::transform(ref.params().begin(), ref.params().end(), m.params().begin(),
                     [](double w) { return static_cast<float>(w); });
      expect_matches(m, b, r, bound);
    }
  }
  ridge::cpu::set_isa(saved);
}

TEST(DocumentMask, EotOutsideTheVocabularyIsAnError) {
  rm::TransformerLM<float> m(doc_config());
  try {
    m.set_document_mask(41);
    FAIL() << "no error";
  } catch (const ridge::Error& e) {
    EXPECT_NE(std::string(e.what()).find("eot_id: 41 is not a token of the vocabulary (0..40)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(m.document_mask(), -1);
}
