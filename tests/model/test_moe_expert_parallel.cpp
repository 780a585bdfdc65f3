// Expert parallelism in the model (ridge/model/expert_exchange.hpp), without MPI: W workers in threads of
// one process, each a TransformerLM built for its ExpertShard (holding only its block of each expert
// stack) on its slice of the batch, exchanging rows through memory. The reference is the single-process
// model run on each slice alone (no exchange): worker w's loss and its dense gradients must be that
// slice's, and its expert stacks' gradients the sum of every slice's gradient of its block. The MPI
// implementation and the training step around it are held to one process in tests/distributed.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ridge/core/error.hpp"
#include "ridge/core/threads.hpp"
#include "ridge/model/model.hpp"
#include "ridge/model/moe.hpp"
#include "ridge/model/ranges.hpp"
#include "ridge/model/roofline.hpp"
#include "ridge/text/data.hpp"

namespace rm = ridge::model;

namespace {

// The exchange of W threads: each worker publishes what it sends, all wait, each copies what is addressed
// to it, all wait again (so no sender reuses its buffer before every receiver copied). Blocking; wait()
// has nothing left to do.
struct Hub {
  explicit Hub(int w) : world(w), bar(w), send(static_cast<size_t>(w)), rows(static_cast<size_t>(w)) {}
  int world;
  std::barrier<> bar;
  std::vector<const std::byte*> send;
  std::vector<std::vector<int64_t>> rows;  // each worker's send counts (rows, or values for the counts)
};

class ThreadExchange : public rm::ExpertExchange {
 public:
  ThreadExchange(Hub& hub, int rank) : hub_(hub), rank_(rank) {}
  int rank() const override { return rank_; }
  int world() const override { return hub_.world; }
  void exchange_counts(std::span<const int64_t> send, std::span<int64_t> recv) override {
    const size_t n = send.size() / static_cast<size_t>(hub_.world);
    std::vector<int64_t> each(static_cast<size_t>(hub_.world), static_cast<int64_t>(n));
    start(send.data(), each, recv.data(), each, sizeof(int64_t));
  }
  int start(const void* send, std::span<const int64_t> send_rows, void* recv,
            std::span<const int64_t> recv_rows, int64_t row_bytes) override {
    const auto me = static_cast<size_t>(rank_);
    hub_.send[me] = static_cast<const std::byte*>(send);
    hub_.rows[me].assign(send_rows.begin(), send_rows.end());
    hub_.bar.arrive_and_wait();
    auto* out = static_cast<std::byte*>(recv);
    for (size_t s = 0; s < static_cast<size_t>(hub_.world); ++s) {
      const auto& r = hub_.rows[s];
      int64_t from = 0;
      for (size_t d = 0; d < me; ++d) from += r[d];
      EXPECT_EQ(r[me], recv_rows[s]) << "worker " << s << " sends " << r[me] << " rows to worker " << me;
      if (r[me] > 0)  // a worker that sends nothing may give no buffer at all
        std::memcpy(out, hub_.send[s] + from * row_bytes, static_cast<size_t>(r[me] * row_bytes));
      out += r[me] * row_bytes;
    }
    hub_.bar.arrive_and_wait();
    return ++tickets_;
  }
  void wait(int ticket) override { EXPECT_LE(ticket, tickets_); }
  int tickets() const { return tickets_; }

 private:
  Hub& hub_;
  int rank_;
  int tickets_ = 0;
};

struct Case {
  int64_t experts, top_k, shared;
  rm::moe::Gate gate;
  rm::moe::Balance balance;
  int world;
  rm::Precision precision = rm::Precision::fp32;
  bool one_block = false;  // every token routed to experts 0 .. top_k - 1: the other workers get no row
};

rm::ModelConfig config(const Case& k) {
  rm::ModelConfig c;
  c.vocab_size = 37;
  c.context_length = 8;
  c.d_model = 32;
  c.num_layers = 2;
  c.num_heads = 2;
  c.d_ff = 48;
  c.num_experts = k.experts;
  c.top_k = k.top_k;
  c.num_shared_experts = k.shared;
  c.d_expert = 24;
  c.router = k.gate;
  c.balance = k.balance;
  c.moe_layers = {0, 1};
  c.validate();
  return c;
}

constexpr int64_t kRows = 2, kSeq = 8;  // each worker's slice

rm::TransformerLM<float> make_model(const rm::ModelConfig& c, const Case& k, rm::ExpertShard shard = {}) {
  rm::TransformerLM<float> m(c, k.precision, rm::AttentionPath::flash, shard);
  m.init(5);
  if (k.one_block)  // all logits 0: every token's top-k are the lowest expert ids (ties to the lower)
    for (int64_t l = 0; l < c.num_layers; ++l) {
      auto w = m.param("layers." + std::to_string(l) + ".ffn.router.weight");
      std::fill(w.begin(), w.end(), 0.0f);
    }
  // A bias that is not zero, so that the choice reads it (balance bias).
  for (size_t i = 0; i < m.state().size(); ++i) m.state()[i] = 0.01f * static_cast<float>(i % 3);
  return m;
}

void check_case(const Case& k) {
  const rm::ModelConfig c = config(k);
  const int W = k.world;
  const int64_t n = kRows * kSeq;
  std::vector<int32_t> x(static_cast<size_t>(W * n)), y(x.size());
  ridge::text::Rng rng(3);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.vocab_size)));
    y[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.vocab_size)));
  }
  // The reference: each slice alone in one process.
  std::vector<float> ref_loss(static_cast<size_t>(W));
  std::vector<std::vector<float>> ref_grad(static_cast<size_t>(W));
  for (int w = 0; w < W; ++w) {
    auto m = make_model(c, k);
    ref_loss[static_cast<size_t>(w)] = m.forward(x.data() + w * n, y.data() + w * n, kRows, kSeq);
    m.backward();
    ref_grad[static_cast<size_t>(w)].assign(m.grads().begin(), m.grads().end());
  }
  // W workers exchanging through memory.
  Hub hub(W);
  std::vector<rm::TransformerLM<float>> models;
  std::vector<std::unique_ptr<ThreadExchange>> ex;
  for (int w = 0; w < W; ++w) {
    models.push_back(make_model(c, k, {w, W}));
    ex.push_back(std::make_unique<ThreadExchange>(hub, w));
    models.back().set_expert_exchange(ex.back().get());
  }
  std::vector<float> loss(static_cast<size_t>(W));
  std::vector<std::thread> threads;
  for (int w = 0; w < W; ++w)
    threads.emplace_back([&, w] {
      auto& m = models[static_cast<size_t>(w)];
      loss[static_cast<size_t>(w)] = m.forward(x.data() + w * n, y.data() + w * n, kRows, kSeq);
      m.backward();
    });
  for (auto& t : threads) t.join();
  // Per MoE layer 2 exchanges and the counts forward, 2 backward.
  for (const auto& e : ex) EXPECT_EQ(e->tickets(), 5 * c.num_layers);

  // The bound of the DDP tests (tests/distributed): the fp32 model's gradient error, ops x k x u x max|g|
  // (k the longest reduction, here the owner's W n top_k rows), twice for two evaluations; bf16 rounds
  // the gradients the GEMMs read, so a reassociated fp32 sum that crosses a rounding boundary moves an
  // operand by 2^-8: held by calc_diff below 1e-4 instead.
  const double u = std::ldexp(1.0, -24);
  const double kmax = static_cast<double>(std::max({W * n * k.top_k, c.d_model, c.d_ff, c.vocab_size}));
  const double ops = 12.0 * static_cast<double>(c.num_layers) + 6.0;
  const bool fp32 = k.precision == rm::Precision::fp32;
  const rm::TransformerLM<float> whole(c);  // the single process's layout, where ref_grad lies
  for (int w = 0; w < W; ++w) {
    EXPECT_NEAR(loss[static_cast<size_t>(w)], ref_loss[static_cast<size_t>(w)],
                4 * u * std::abs(ref_loss[static_cast<size_t>(w)]))
        << "worker " << w;
    const auto& m = models[static_cast<size_t>(w)];
    const auto g = m.grads();
    for (const auto& t : m.tensors()) {
      // The reference: this slice's gradient, or for an expert stack (this worker's block of E / W
      // experts) the sum over every slice of the block's gradient.
      const rm::TensorInfo& r = whole.tensor(t.name);
      const int64_t from = r.offset + (t.expert_stack() ? t.numel * w : 0);
      if (t.expert_stack()) {
        EXPECT_EQ(t.shape[0], c.num_experts / W) << t.name;
        EXPECT_EQ(t.expert_begin, c.num_experts / W * w) << t.name;
        EXPECT_EQ(t.numel * W, r.numel) << t.name;
      }
      std::vector<double> want(static_cast<size_t>(t.numel));
      for (int64_t i = 0; i < t.numel; ++i) {
        const auto at = static_cast<size_t>(from + i);
        if (!t.expert_stack())
          want[static_cast<size_t>(i)] = ref_grad[static_cast<size_t>(w)][at];
        else
          for (int s = 0; s < W; ++s) want[static_cast<size_t>(i)] += ref_grad[static_cast<size_t>(s)][at];
      }
      double gmax = 0, err = 0, ab = 0, aa = 0, bb = 0;
      for (int64_t i = 0; i < t.numel; ++i) {
        const double a = g[static_cast<size_t>(t.offset + i)], b = want[static_cast<size_t>(i)];
        gmax = std::max(gmax, std::abs(b));
        err = std::max(err, std::abs(a - b));
        ab += a * b, aa += a * a, bb += b * b;
      }
      if (fp32) {
        EXPECT_LE(err, 2 * ops * kmax * u * std::max(gmax, 1e-3)) << t.name << " on worker " << w;
      } else if (aa + bb > 0) {
        EXPECT_LE(1 - 2 * ab / (aa + bb), 1e-4) << t.name << " on worker " << w;
      }
    }
  }
}

std::string name(const Case& k) {
  return std::to_string(k.world) + " workers, E " + std::to_string(k.experts) + " top-" +
         std::to_string(k.top_k) + " " + rm::moe::gate_name(k.gate) + "+" + rm::moe::balance_name(k.balance) +
         (k.shared ? " with a shared expert" : "") +
         (k.one_block ? ", every token to worker 0's experts" : "") + " " + rm::precision_name(k.precision);
}

// One thread per worker: the kernels' own threads would only fight over the cores.
struct OneThread {
  int before = ridge::get_num_threads();
  OneThread() { ridge::set_num_threads(1); }
  ~OneThread() { ridge::set_num_threads(before); }
};

using G = rm::moe::Gate;
using Bal = rm::moe::Balance;

}  // namespace

TEST(ModelExpertParallel, WorkersInThreadsEqualEachSliceAlone) {
  OneThread one;
  for (const Case& k : {
           Case{4, 1, 0, G::softmax, Bal::aux, 2}, Case{4, 2, 1, G::sigmoid, Bal::bias, 2},
           Case{4, 2, 1, G::softmax, Bal::aux, 4}, Case{8, 2, 1, G::softmax, Bal::aux, 4},
           Case{8, 1, 0, G::sigmoid, Bal::bias, 4},
           Case{8, 2, 0, G::sigmoid, Bal::bias, 1},  // one worker: the exchange path, nothing leaves
       }) {
    SCOPED_TRACE(name(k));
    check_case(k);
  }
}

TEST(ModelExpertParallel, Bf16WorkersEqualEachSliceAlone) {
  OneThread one;
  check_case(Case{8, 2, 1, G::softmax, Bal::aux, 2, rm::Precision::bf16});
  check_case(Case{4, 1, 0, G::sigmoid, Bal::bias, 4, rm::Precision::bf16});
}

// Every token of every worker chooses worker 0's experts: the others send it everything, receive no row
// and run no expert (their grouped GEMMs have no rows), and their blocks' gradients are zero (the
// reference's are too).
TEST(ModelExpertParallel, AWorkerWhoseExpertsNoTokenChoseRunsNone) {
  OneThread one;
  for (const Case& k : {Case{4, 2, 0, G::softmax, Bal::aux, 2, rm::Precision::fp32, true},
                        Case{8, 1, 1, G::softmax, Bal::aux, 4, rm::Precision::fp32, true}}) {
    SCOPED_TRACE(name(k));
    check_case(k);
  }
}

// A worker's model holds its block of each stack, with the single process's values (init draws every
// expert's and keeps its own), and 1/W of the experts' parameters and gradients.
TEST(ModelExpertParallel, AWorkersModelHoldsItsBlockOfTheSingleProcesssExperts) {
  const rm::ModelConfig c = config(Case{8, 2, 1, G::sigmoid, Bal::bias, 4});
  rm::TransformerLM<float> whole(c);
  whole.init(11);
  int64_t experts = 0;
  for (const auto& t : whole.tensors())
    if (t.expert_stack()) experts += t.numel;
  for (int w = 0; w < 4; ++w) {
    rm::TransformerLM<float> m(c, rm::Precision::fp32, rm::AttentionPath::flash, {w, 4});
    m.init(11);
    EXPECT_EQ(m.params().size() + static_cast<size_t>(experts / 4 * 3), whole.params().size());
    EXPECT_EQ(m.grads().size(), m.params().size());
    for (const auto& t : m.tensors()) {
      const auto got = m.param(t.name);
      const auto all = whole.param(t.name);
      const size_t from = t.expert_stack() ? static_cast<size_t>(t.numel * w) : 0;
      EXPECT_EQ(t.whole_shape(), whole.tensor(t.name).shape) << t.name;
      ASSERT_EQ(got.size(), t.expert_stack() ? all.size() / 4 : all.size()) << t.name;
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], all[from + i]) << t.name << " [" << i << "]";
    }
    for (size_t i = 0; i < m.state().size(); ++i) EXPECT_EQ(m.state()[i], whole.state()[i]);
  }
}

// ridge train's memory check for a rank: its block of the experts' parameters, gradients and AdamW state,
// and the exchange's buffers on top of one process's step.
TEST(ModelExpertParallel, StepMemoryCountsARanksBlockAndTheExchange) {
  const rm::ModelConfig c = config(Case{8, 2, 1, G::softmax, Bal::aux, 4});
  for (const auto p : {rm::Precision::fp32, rm::Precision::bf16}) {
    const auto one = rm::step_memory(c, kRows, kSeq, p), four = rm::step_memory(c, kRows, kSeq, p, 4);
    const rm::TransformerLM<float> m(c, p, rm::AttentionPath::flash, {3, 4});
    EXPECT_EQ(four.parameters, static_cast<double>(m.params().size() * sizeof(float)));
    EXPECT_EQ(four.gradients, four.parameters);
    EXPECT_EQ(four.optimizer_state, 2 * four.parameters);
    EXPECT_LT(four.parameters, one.parameters);
    EXPECT_EQ(four.activations(), one.activations());
    EXPECT_EQ(one.exchange, 0.0);
    EXPECT_GT(four.exchange, 0.0);
    EXPECT_EQ(rm::step_memory(c, kRows, kSeq, p, 1).total(), one.total());
  }
  EXPECT_THROW(rm::step_memory(c, kRows, kSeq, rm::Precision::fp32, 0), ridge::Error);
}

TEST(ModelExpertParallel, ShardsThatCannotRunAreRefused) {
  const rm::ModelConfig c = config(Case{4, 2, 0, G::softmax, Bal::aux, 3});
  // Experts that do not share out, a dense model, a worker outside the world.
  auto refused = [&](const rm::ModelConfig& cfg, rm::ExpertShard shard, const std::string& says) {
    try {
      rm::TransformerLM<float> m(cfg, rm::Precision::fp32, rm::AttentionPath::flash, shard);
      ADD_FAILURE() << "worker " << shard.rank << " of " << shard.world << " was accepted";
    } catch (const ridge::Error& e) {
      EXPECT_EQ(e.argument(), "experts");
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused(c, {0, 3}, "3 workers do not share out 4 experts evenly");
  refused(c, {2, 2}, "worker 2 of 2 is not a worker");
  rm::ModelConfig dense = config(Case{4, 2, 0, G::softmax, Bal::aux, 1});
  dense.num_experts = 0, dense.top_k = 0, dense.d_expert = 0, dense.moe_layers.clear();
  refused(dense, {0, 2}, "needs an MoE model");

  // An exchange that is not the model's worker; a partial model without its exchange.
  Hub hub(2);
  ThreadExchange ex(hub, 1);
  rm::TransformerLM<float> m(c, rm::Precision::fp32, rm::AttentionPath::flash, {0, 2});
  m.init(1);
  try {
    m.set_expert_exchange(&ex);
    FAIL() << "worker 1's exchange was accepted by worker 0's model";
  } catch (const ridge::Error& e) {
    EXPECT_EQ(e.argument(), "exchange");
    EXPECT_NE(std::string(e.what()).find("holds the experts of worker 0 of 2, but the exchange is worker 1"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(m.expert_exchange(), nullptr);
  const std::vector<int32_t> x(8, 1);
  try {
    m.forward(x.data(), x.data(), 1, 8);
    FAIL() << "a forward without the experts of the other worker ran";
  } catch (const ridge::Error& e) {
    EXPECT_EQ(e.argument(), "exchange");
  }
  // A whole model and an exchange of several workers: refused too (it holds every expert).
  rm::TransformerLM<float> full(c);
  EXPECT_THROW(full.set_expert_exchange(&ex), ridge::Error);
  Hub one(1);
  ThreadExchange ex1(one, 0);
  rm::TransformerLM<float> d(dense);
  EXPECT_THROW(d.set_expert_exchange(&ex1), ridge::Error);
}

// The owner's layout: every source's rows of one expert together, in source order, padded.
TEST(ModelExpertParallel, ReceivedLayoutGroupsEachExpertsRowsBySource) {
  // 2 sources, 2 experts: source 0 sends 1 row of expert 0 and 2 of expert 1; source 1 sends 3 and 0.
  const std::vector<int64_t> count = {1, 2, 3, 0};
  const auto r = rm::moe::received_layout(count, 2, 2, 4);
  EXPECT_EQ(r.count, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(r.layout.offset, (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(r.layout.rows, 8);
  // Received order: s0e0, s0e1, s0e1, s1e0, s1e0, s1e0 -> expert 0's run [0, 4): s0's row then s1's three.
  EXPECT_EQ(r.layout.row, (std::vector<int64_t>{0, 4, 5, 1, 2, 3}));
  EXPECT_EQ(r.layout.m_indices, (std::vector<int32_t>{0, 0, 0, 0, 1, 1, -1, -1}));
  EXPECT_EQ(rm::moe::received_layout(std::vector<int64_t>{0, 0}, 1, 2, 64).layout.rows, 0);
  EXPECT_THROW(rm::moe::received_layout(count, 3, 2, 4), ridge::Error);
  EXPECT_THROW(rm::moe::received_layout(std::vector<int64_t>{1, -1}, 1, 2, 4), ridge::Error);
}
