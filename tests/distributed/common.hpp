// What the MPI tests share (test_distributed: one program, run as 2 ranks): the rank, the test model, the
// global batches every rank draws alike, and data parallelism's single-process reference.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "ridge/model/train.hpp"
#include "ridge/text/data.hpp"

namespace ridge::test::dist {

inline int rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// 2 layers of d_model 32 (2 heads, d_ff 48), vocab 64, context 8.
inline model::ModelConfig tiny() {
  model::ModelConfig c;
  c.vocab_size = 64;
  c.context_length = 8;
  c.d_model = 32;
  c.num_layers = 2;
  c.num_heads = 2;
  c.d_ff = 48;
  c.validate();
  return c;
}

constexpr int64_t kGlobalBatch = 4, kSeq = 8;

// `batch` sequences of kSeq per rank, a constant learning rate, clipping that acts.
inline model::TrainConfig train_config(int64_t batch, model::Precision p = model::Precision::fp32) {
  model::TrainConfig t;
  t.batch = batch;
  t.seq = kSeq;
  t.precision = p;
  t.lr_max = 3e-3;
  t.lr_min = 3e-3;
  t.max_grad_norm = 0.5;  // small enough that clipping acts on the averaged gradient
  t.seed = 7;
  return t;
}

// The global batches of every step, drawn the same way on every rank.
struct Batches {
  std::vector<std::vector<int32_t>> x, y;
};
inline Batches make_batches(int64_t vocab, int steps, uint64_t seed = 11) {
  Batches b;
  text::Rng rng(seed);
  for (int s = 0; s < steps; ++s) {
    std::vector<int32_t> x(static_cast<size_t>(kGlobalBatch * kSeq)), y(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
      y[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
    }
    b.x.push_back(std::move(x));
    b.y.push_back(std::move(y));
  }
  return b;
}

// Single process, gradient accumulation over the two half-batches: the DDP sum in one process. The
// trainer steps on the first half; the hook runs the second (x1, y1; its loss in loss1) and averages. An
// MoE model's expert counts are both halves' summed, as sum_expert_counts gives them over two ranks.
class AccumulateHalves : public model::StepHooks {
 public:
  explicit AccumulateHalves(model::Trainer& t) : t_(t) {}
  const int32_t *x1 = nullptr, *y1 = nullptr;
  double loss1 = 0;
  int world() const override { return 2; }
  void reduce_gradients(std::span<float> g) override {
    std::vector<float> g0(g.begin(), g.end());
    auto& m = t_.model();
    counts0_.clear();
    for (const auto& st : m.moe_stats()) counts0_.insert(counts0_.end(), st.count.begin(), st.count.end());
    m.zero_grad();
    loss1 = m.forward(x1, y1, t_.config().batch, t_.config().seq);
    m.backward(1.0f);
    for (size_t i = 0; i < g.size(); ++i) g[i] = (g0[i] + g[i]) / 2.0f;
    for (size_t i = 0; i < m.tensors().size(); ++i)
      if (t_.frozen(i)) std::fill_n(g.begin() + m.tensors()[i].offset, m.tensors()[i].numel, 0.0f);
  }
  // The step reads the counts of the last forward (the second half's) and asks for the sum.
  void sum_expert_counts(std::span<int64_t> counts) override {
    for (size_t i = 0; i < counts.size(); ++i) counts[i] += counts0_[i];
  }

 private:
  model::Trainer& t_;
  std::vector<int64_t> counts0_;
};

}  // namespace ridge::test::dist
