// Expert parallelism in the model (ridge/model/expert_exchange.hpp), without MPI: W workers in threads of
// one process, each a TransformerLM on its slice of the batch, exchanging rows through memory. The
// reference is the single-process model run on each slice alone (no exchange): worker w's loss and its
// dense gradients must be that slice's, each owner's block of the stacked expert gradients the sum of
// every slice's gradient of those experts, and every other block zero. The MPI implementation and the
// training step around it are held to one process in tests/distributed.
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

rm::TransformerLM<float> make_model(const rm::ModelConfig& c, const Case& k) {
  rm::TransformerLM<float> m(c, k.precision);
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

bool expert_stack(const rm::TensorInfo& t) {
  return t.name.find(".ffn.experts.") != std::string::npos;
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
    models.push_back(make_model(c, k));
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
  for (int w = 0; w < W; ++w) {
    EXPECT_NEAR(loss[static_cast<size_t>(w)], ref_loss[static_cast<size_t>(w)],
                4 * u * std::abs(ref_loss[static_cast<size_t>(w)]))
        << "worker " << w;
    const auto& m = models[static_cast<size_t>(w)];
    const auto g = m.grads();
    for (const auto& t : m.tensors()) {
      // The reference: this slice's gradient, or for an expert stack the sum over every slice in this
      // worker's block and zero elsewhere.
      std::vector<double> want(static_cast<size_t>(t.numel));
      const int64_t block = t.numel / W;
      for (int64_t i = 0; i < t.numel; ++i) {
        const auto at = static_cast<size_t>(t.offset + i);
        if (!expert_stack(t)) {
          want[static_cast<size_t>(i)] = ref_grad[static_cast<size_t>(w)][at];
        } else if (i / block == w) {
          for (int s = 0; s < W; ++s) want[static_cast<size_t>(i)] += ref_grad[static_cast<size_t>(s)][at];
        }
      }
      double gmax = 0, err = 0, ab = 0, aa = 0, bb = 0;
      for (int64_t i = 0; i < t.numel; ++i) {
        const double a = g[static_cast<size_t>(t.offset + i)], b = want[static_cast<size_t>(i)];
        gmax = std::max(gmax, std::abs(b));
        err = std::max(err, std::abs(a - b));
        ab += a * b, aa += a * a, bb += b * b;
        if (expert_stack(t) && i / block != w) {
          ASSERT_EQ(a, 0.0) << t.name << " [" << i << "] on worker " << w;
        }
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
// and run no expert (their grouped GEMMs have no rows), and their blocks' gradients are zero.
TEST(ModelExpertParallel, AWorkerWhoseExpertsNoTokenChoseRunsNone) {
  OneThread one;
  for (const Case& k : {Case{4, 2, 0, G::softmax, Bal::aux, 2, rm::Precision::fp32, true},
                        Case{8, 1, 1, G::softmax, Bal::aux, 4, rm::Precision::fp32, true}}) {
    SCOPED_TRACE(name(k));
    check_case(k);
  }
}

TEST(ModelExpertParallel, ExpertsThatDoNotShareOutOverTheWorkersAreRefused) {
  Hub hub(3);
  ThreadExchange ex(hub, 0);
  rm::TransformerLM<float> m(config(Case{4, 2, 0, G::softmax, Bal::aux, 3}));
  try {
    m.set_expert_exchange(&ex);
    FAIL() << "4 experts over 3 workers were accepted";
  } catch (const ridge::Error& e) {
    EXPECT_EQ(e.argument(), "exchange");
    EXPECT_NE(std::string(e.what()).find("4 experts do not share out evenly over 3 workers"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(m.expert_exchange(), nullptr);
  rm::ModelConfig dense = config(Case{4, 2, 0, G::softmax, Bal::aux, 1});
  dense.num_experts = 0, dense.top_k = 0, dense.d_expert = 0, dense.moe_layers.clear();
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
