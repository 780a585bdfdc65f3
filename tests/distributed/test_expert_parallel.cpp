// Expert parallelism under `mpirun -np 2` (DataParallel with expert_parallel; the same program and main
// as test_distributed.cpp). The reference is the one the DDP tests use: one process accumulating the
// gradients of the two half-batches, (g0 + g1) / 2, then the same step. Expert parallelism computes the
// same gradients with other sums: an owner's expert gradient adds both ranks' rows in one grouped GEMM
// where the reference adds two GEMMs' results, and each MoE layer's input gradient adds each row's two
// halves before the token's rows (so every gradient below it is reassociated too). Held, as in
// DistDdp.MatchesFullBatchSingleProcessWithinReassociationBound: the first step's gradients within the fp32
// model's bound (ops x k x u x max|g|, twice), every step's loss, and the weights after 4 steps within that
// test's bound (S lr 1.4 x the gradient bound) as each tensor's root mean square. Not element by element:
// AdamW divides each element's update by that element's own gradient scale, so an element whose gradient
// nearly cancels (a small relative gradient bound does not hold for it) turns a reassociation difference
// into a visible one (up to 1.3e-4 here, 4% of the 4 steps' motion of lr x S = 1.2e-2, on a few elements).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "ridge/core/error.hpp"
#include "ridge/distributed.hpp"
#include "ridge/model/moe.hpp"
#include "ridge/model/train.hpp"

#include "distributed/common.hpp"

namespace rm = ridge::model;
namespace rd = ridge::distributed;

namespace {

using namespace ridge::test::dist;  // the model, the batches, the reference (common.hpp)

struct Moe {
  int64_t experts = 4, top_k = 2, shared = 0;
  rm::moe::Gate gate = rm::moe::Gate::softmax;
  rm::moe::Balance balance = rm::moe::Balance::aux;
};

// The DDP tests' model with an MoE block in both layers.
rm::ModelConfig model(const Moe& m) {
  rm::ModelConfig c = tiny();
  c.num_experts = m.experts, c.top_k = m.top_k, c.num_shared_experts = m.shared, c.d_expert = 24;
  c.router = m.gate, c.balance = m.balance, c.bias_update_speed = 0.01;
  c.validate();
  return c;
}

constexpr int64_t kSteps = 4, kLocal = kGlobalBatch / 2;

rm::TrainConfig train_config() {
  return ridge::test::dist::train_config(kLocal);
}
// This rank's trainer under expert parallelism: its model holds its block of the experts.
rm::TrainConfig ep_config() {
  rm::TrainConfig t = train_config();
  t.experts = {rank(), 2};
  return t;
}

// Values of a model that holds a block of the experts, laid out as the single process's model lays them
// out, and which of them it holds.
struct Whole {
  std::vector<float> values;
  std::vector<bool> held;
};
Whole as_whole(const rm::TransformerLM<float>& local, std::span<const float> values) {
  const rm::TransformerLM<float> layout(local.config());
  Whole w{std::vector<float>(layout.params().size(), 0.0f), std::vector<bool>(layout.params().size(), false)};
  for (const auto& t : local.tensors()) {
    const rm::TensorInfo& r = layout.tensor(t.name);
    const int64_t from = r.offset + t.whole_begin();
    for (int64_t i = 0; i < t.numel; ++i) {
      w.values[static_cast<size_t>(from + i)] = values[static_cast<size_t>(t.offset + i)];
      w.held[static_cast<size_t>(from + i)] = true;
    }
  }
  return w;
}

struct Run {
  std::vector<float> params;              // in the single process's layout
  std::vector<double> losses;             // the mean of the two halves' losses, per step
  std::vector<std::vector<double>> load;  // each step's expert load (from the counts of the whole batch)
  std::vector<float> grad1;               // the averaged gradient of the first step
  std::vector<bool> held;                 // the values this rank holds (all, for one process)
};

// Routers frozen at zero: every token's top-k are experts 0 .. top_k - 1 (ties go to the lower id).
std::vector<std::string> zero_routers(rm::Trainer& t) {
  std::vector<std::string> names;
  for (const auto& ti : t.model().tensors())
    if (ti.name.find(".ffn.router.weight") != std::string::npos) {
      names.push_back(ti.name);
      t.set_frozen(ti.name);
      auto w = t.model().param(ti.name);
      std::fill(w.begin(), w.end(), 0.0f);
    }
  return names;
}

Run run_expert_parallel(const Moe& moe, rd::DdpMode mode, const Batches& b, bool zero = false) {
  rm::Trainer t(model(moe), ep_config());
  if (rank() == 1)  // the broadcast must make the dense tensors rank 0's
    for (const auto& ti : t.model().tensors())
      if (!ti.expert_stack()) std::ranges::fill(t.model().param(ti.name), 0.5f);
  if (zero) zero_routers(t);
  rd::DdpConfig cfg;
  cfg.mode = mode;
  cfg.bucket_mb = 0.01;
  cfg.expert_parallel = true;
  rd::DataParallel dp(t, cfg);
  Run r;
  for (size_t s = 0; s < b.x.size(); ++s) {
    const auto off = static_cast<size_t>(rank() * kLocal * kSeq);
    const auto res = t.step(b.x[s].data() + off, b.y[s].data() + off);
    r.losses.push_back(rd::mean(res.loss));
    r.load.push_back(res.expert_load);
    if (s == 0) r.grad1 = as_whole(t.model(), t.model().grads()).values;
    EXPECT_EQ(dp.last_stats().expert_exchanges, 4 * 2) << "4 all-to-alls of rows per MoE layer";
    if (zero) {
      for (const auto& st : t.model().moe_stats())
        for (int64_t e = moe.top_k; e < moe.experts; ++e)
          EXPECT_EQ(st.count[static_cast<size_t>(e)], 0) << "a token chose expert " << e;
    }
  }
  Whole w = as_whole(t.model(), t.model().params());
  r.params = std::move(w.values);
  r.held = std::move(w.held);
  return r;
}

Run run_accumulated(const Moe& moe, const Batches& b, bool zero = false) {
  rm::Trainer t(model(moe), train_config());
  if (zero) zero_routers(t);
  AccumulateHalves acc(t);
  t.set_hooks(&acc);
  Run r;
  for (size_t s = 0; s < b.x.size(); ++s) {
    acc.x1 = b.x[s].data() + kLocal * kSeq;
    acc.y1 = b.y[s].data() + kLocal * kSeq;
    const auto res = t.step(b.x[s].data(), b.y[s].data());
    r.losses.push_back((res.loss + acc.loss1) / 2);
    r.load.push_back(res.expert_load);
    if (s == 0) r.grad1.assign(t.model().grads().begin(), t.model().grads().end());
  }
  r.params.assign(t.model().params().begin(), t.model().params().end());
  r.held.assign(r.params.size(), true);
  return r;
}

void expect_within_bound(const Moe& moe, rd::DdpMode mode, bool zero = false) {
  const rm::ModelConfig c = model(moe);
  const Batches b = make_batches(c.vocab_size, kSteps);
  const Run got = run_expert_parallel(moe, mode, b, zero);
  const Run want = run_accumulated(moe, b, zero);
  // The DDP tests' bounds (test_distributed.cpp), k the longest reduction: an owner's rows, every token's
  // top-k choices of the global batch.
  const double u = std::ldexp(1.0, -24);
  const double k =
      static_cast<double>(std::max({kGlobalBatch * kSeq * c.top_k, c.d_model, c.d_ff, c.vocab_size}));
  const double ops = 12.0 * static_cast<double>(c.num_layers) + 6.0;
  const double grad_bound = 2 * ops * k * u;  // relative to each tensor's largest gradient
  const double param_bound = kSteps * train_config().lr_max * 1.4 * 2 * 4.0 * ops * k * u;
  const auto& keep = got.held;  // the dense tensors and this rank's block of the experts
  rm::TransformerLM<float> layout(c);
  double worst_grad = 0, worst_rms = 0, worst_elem = 0;
  for (const auto& t : layout.tensors()) {
    double gmax = 0, gerr = 0, ss = 0;
    int64_t n = 0;
    for (int64_t i = t.offset; i < t.offset + t.numel; ++i) {
      const auto at = static_cast<size_t>(i);
      if (!keep[at]) continue;
      gmax = std::max(gmax, std::abs(double(want.grad1[at])));
      gerr = std::max(gerr, std::abs(double(got.grad1[at]) - double(want.grad1[at])));
      const double d = double(got.params[at]) - double(want.params[at]);
      ss += d * d;
      ++n;
      worst_elem = std::max(worst_elem, std::abs(d));
    }
    if (n == 0) continue;
    EXPECT_LE(gerr, grad_bound * gmax) << t.name << ": the first step's gradient";
    const double rms = std::sqrt(ss / static_cast<double>(n));
    EXPECT_LE(rms, param_bound) << t.name << ": root mean square of p_ep - p_single after " << kSteps
                                << " steps";
    worst_grad = std::max(worst_grad, gmax > 0 ? gerr / gmax : 0.0);
    worst_rms = std::max(worst_rms, rms);
  }
  for (size_t s = 0; s < got.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], 1e-5 * std::abs(want.losses[s])) << "step " << s + 1;
    EXPECT_EQ(got.load[s], want.load[s]) << "step " << s + 1 << ": the routing differs";
  }
  // It trained: the parameters moved from the initial ones far more than they differ.
  rm::Trainer init(c, train_config());
  double moved = 0;
  for (size_t i = 0; i < got.params.size(); ++i)
    if (keep[i]) moved = std::max(moved, std::abs(double(got.params[i]) - double(init.model().params()[i])));
  EXPECT_GT(moved, 100 * param_bound);
  if (rank() == 0)
    std::printf(
        "  %s: first-step gradient %.2g of its tensor's largest (bound %.2g); after %d steps rms |p_ep - "
        "p_single| %.2g (bound %.2g), largest element %.2g\n",
        rd::ddp_mode_name(mode), worst_grad, grad_bound, static_cast<int>(kSteps), worst_rms, param_bound,
        worst_elem);
}

using G = rm::moe::Gate;
using B = rm::moe::Balance;

}  // namespace

// E 4 and 8, top-1 and top-2, softmax with the auxiliary loss and sigmoid with the balance bias, with and
// without a shared expert, over the four reduction modes (the expert tensors in none of their buckets).
TEST(DistExpertParallel, EqualsAccumulatedSingleProcessWithinReassociationBound) {
  for (const auto& [moe, mode] : {
           std::pair{Moe{4, 1, 0, G::softmax, B::aux}, rd::DdpMode::flat},
           std::pair{Moe{4, 2, 1, G::sigmoid, B::bias}, rd::DdpMode::bucketed},
           std::pair{Moe{8, 2, 0, G::softmax, B::aux}, rd::DdpMode::overlap},
           std::pair{Moe{8, 1, 1, G::sigmoid, B::bias}, rd::DdpMode::naive},
           std::pair{Moe{8, 2, 1, G::softmax, B::aux}, rd::DdpMode::bucketed},
       }) {
    SCOPED_TRACE(testing::Message() << "E " << moe.experts << " top-" << moe.top_k << " "
                                    << rm::moe::gate_name(moe.gate) << "+"
                                    << rm::moe::balance_name(moe.balance) << (moe.shared ? " shared" : "")
                                    << ", " << rd::ddp_mode_name(mode));
    expect_within_bound(moe, mode);
  }
}

// Routers frozen at zero: every token of both ranks chooses experts 0 .. top_k - 1, all of them rank 0's.
// Rank 1 sends every row to rank 0 and receives none: its grouped GEMMs have no rows, its experts no
// gradient (they only decay, as the single process's do).
TEST(DistExpertParallel, ARankWhoseExpertsNoTokenChoosesStillTrains) {
  expect_within_bound(Moe{4, 2, 1, G::softmax, B::aux}, rd::DdpMode::flat, true);
  expect_within_bound(Moe{8, 1, 0, G::sigmoid, B::aux}, rd::DdpMode::overlap, true);
}

// The checkpoint a 2-rank run writes is the single process's: every rank's block of each expert stack in
// it (weights and AdamW state) is that rank's own bits, the dense tensors everyone's; resumed on 2 ranks
// (each loading its block) it takes the next steps as the run that wrote it did, bit for bit.
TEST(DistExpertParallel, CheckpointsHoldEveryOwnersBlocksAndResume) {
  const Moe moe{8, 2, 1, G::sigmoid, B::bias};
  const rm::ModelConfig c = model(moe);
  const Batches b = make_batches(c.vocab_size, kSteps);
  const std::string path = (std::filesystem::temp_directory_path() / "ridge_ep_ckpt.safetensors").string();
  rm::Trainer t(c, ep_config());
  rd::DdpConfig cfg;
  cfg.mode = rd::DdpMode::bucketed;
  cfg.bucket_mb = 0.01;
  cfg.expert_parallel = true;
  rd::DataParallel dp(t, cfg);
  auto step = [&](rm::Trainer& tr, size_t s) {
    const auto off = static_cast<size_t>(rank() * kLocal * kSeq);
    tr.step(b.x[s].data() + off, b.y[s].data() + off);
  };
  step(t, 0);
  step(t, 1);
  dp.save(path);
  MPI_Barrier(MPI_COMM_WORLD);
  rm::Trainer saved(c, train_config());  // one process, every expert
  saved.load(path);
  EXPECT_EQ(saved.steps(), 2);
  const Whole p = as_whole(t.model(), t.model().params()), m = as_whole(t.model(), t.optimizer().m()),
              v = as_whole(t.model(), t.optimizer().v());
  for (size_t i = 0; i < p.held.size(); ++i) {
    if (!p.held[i]) continue;
    ASSERT_EQ(saved.model().params()[i], p.values[i]) << "parameter " << i << " on rank " << rank();
    ASSERT_EQ(saved.optimizer().m()[i], m.values[i]) << "exp_avg " << i << " on rank " << rank();
    ASSERT_EQ(saved.optimizer().v()[i], v.values[i]) << "exp_avg_sq " << i << " on rank " << rank();
  }
  for (size_t i = 0; i < saved.model().state().size(); ++i)
    ASSERT_EQ(saved.model().state()[i], t.model().state()[i]) << "router bias " << i;
  // The plain save() of a model that holds a block refuses: the file needs every rank's.
  EXPECT_THROW(t.save(path + ".alone"), ridge::Error);
  EXPECT_FALSE(std::filesystem::exists(path + ".alone"));
  // Resume on both ranks and take the last two steps; the run that wrote it takes them too.
  rm::Trainer resumed(c, ep_config());
  resumed.load(path);
  EXPECT_EQ(resumed.model().params().size(), t.model().params().size());
  for (size_t i = 0; i < t.model().params().size(); ++i)
    ASSERT_EQ(resumed.model().params()[i], t.model().params()[i]) << "loaded parameter " << i;
  rd::DataParallel dp2(resumed, cfg);
  for (size_t s = 2; s < b.x.size(); ++s) {
    step(t, s);
    step(resumed, s);
  }
  for (size_t i = 0; i < t.model().params().size(); ++i)
    ASSERT_EQ(resumed.model().params()[i], t.model().params()[i]) << "parameter " << i;
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank() == 0) std::filesystem::remove(path);
}

// What expert parallelism refuses: experts that do not share out over the ranks (on every rank, before any
// collective), optimizer sharding, a dense model.
TEST(DistExpertParallel, RefusesWhatItCannotShard) {
  rd::DdpConfig cfg;
  cfg.expert_parallel = true;
  {
    rm::ModelConfig c = model(Moe{3, 1});
    rm::Trainer t(c, train_config());
    try {
      rd::DataParallel dp(t, cfg);
      FAIL() << "3 experts over 2 ranks were accepted";
    } catch (const ridge::Error& e) {
      EXPECT_NE(std::string(e.what()).find("2 ranks do not share out 3 experts evenly"), std::string::npos)
          << e.what();
    }
  }
  for (auto s : {rd::Sharding::zero1, rd::Sharding::cs336}) {
    rd::DdpConfig sharded = cfg;
    sharded.sharding = s;
    try {
      sharded.validate();
      FAIL() << rd::sharding_name(s) << " was accepted";
    } catch (const ridge::Error& e) {
      EXPECT_EQ(e.argument(), "expert_parallel");
    }
  }
  rm::ModelConfig dense = model(Moe{});
  dense.num_experts = 0, dense.top_k = 0, dense.d_expert = 0;
  rm::Trainer t(dense, train_config());
  EXPECT_THROW(rd::DataParallel(t, cfg), ridge::Error);
  // A trainer that holds every expert (not built for its rank's block).
  rm::Trainer whole(model(Moe{}), train_config());
  try {
    rd::DataParallel dp(whole, cfg);
    FAIL() << "a trainer holding every expert was accepted";
  } catch (const ridge::Error& e) {
    EXPECT_EQ(e.argument(), "expert_parallel");
    EXPECT_NE(std::string(e.what()).find("TrainConfig::experts"), std::string::npos) << e.what();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}
