// Data parallelism under `mpirun -np 2` (ctest runs this program as two ranks; every test makes the
// same collective calls in the same order on both). Each rank also builds the single-process
// references locally, so every comparison is between numbers one process holds.
//
// Why bit-exact: with two ranks every reduced element is fl(g0 + g1), one addition, which is
// commutative, so any all-reduce / reduce-scatter algorithm gives the same bits; dividing by 2 is
// exact. The single-process reference that computes the same thing is gradient accumulation of the
// two half-batches: backward on rank 0's slice, backward on rank 1's slice, (g0 + g1) / 2. Everything
// after (norm, clipping, AdamW, elementwise) is then the same arithmetic on the same bits. zero1's norm
// is the same bits because its shards are aligned to grad_norm's chunks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "ridge/core/error.hpp"
#include "ridge/core/memory.hpp"
#include "ridge/distributed.hpp"
#include "ridge/model/optim.hpp"
#include "ridge/model/train.hpp"

#include "distributed/common.hpp"

namespace rm = ridge::model;
namespace rd = ridge::distributed;

namespace {

using namespace ridge::test::dist;  // the model, the batches, the reference (common.hpp)

constexpr int64_t kSteps = 4;

rd::DdpConfig ddp(rd::DdpMode mode, double mb = 25, rd::Sharding s = rd::Sharding::none) {
  rd::DdpConfig c;
  c.mode = mode;
  c.bucket_mb = mb;
  c.sharding = s;
  return c;
}

struct RunSpec {
  RunSpec(rd::DdpConfig d, rm::Precision p = rm::Precision::fp32, std::vector<std::string> f = {})
      : ddp(d), precision(p), frozen(std::move(f)) {}
  rd::DdpConfig ddp;
  rm::Precision precision;
  std::vector<std::string> frozen;
};

std::vector<float> run_ddp(const RunSpec& spec, const Batches& b) {
  const int64_t local = kGlobalBatch / 2, n = local * kSeq;
  rm::Trainer t(tiny(), train_config(local, spec.precision));
  for (const auto& f : spec.frozen) t.set_frozen(f);
  // Rank 1 starts from other weights: the broadcast must make them rank 0's.
  if (rank() == 1) t.model().init(99);
  rd::DataParallel dp(t, spec.ddp);
  for (size_t s = 0; s < b.x.size(); ++s) {
    const auto off = static_cast<size_t>(rank() * n);
    t.step(b.x[s].data() + off, b.y[s].data() + off);
  }
  return {t.model().params().begin(), t.model().params().end()};
}

std::vector<float> run_accumulated(const RunSpec& spec, const Batches& b) {
  const int64_t local = kGlobalBatch / 2, n = local * kSeq;
  rm::Trainer t(tiny(), train_config(local, spec.precision));
  for (const auto& f : spec.frozen) t.set_frozen(f);
  AccumulateHalves acc(t);
  t.set_hooks(&acc);
  for (size_t s = 0; s < b.x.size(); ++s) {
    acc.x1 = b.x[s].data() + n;
    acc.y1 = b.y[s].data() + n;
    t.step(b.x[s].data(), b.y[s].data());
  }
  return {t.model().params().begin(), t.model().params().end()};
}

std::vector<float> run_full_batch(const Batches& b) {
  rm::Trainer t(tiny(), train_config(kGlobalBatch));
  for (size_t s = 0; s < b.x.size(); ++s) t.step(b.x[s].data(), b.y[s].data());
  return {t.model().params().begin(), t.model().params().end()};
}

size_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
  return a.size();
}

// A folder every rank sees: rank 0 makes it and, once every rank is done, removes it.
struct SharedDir {
  explicit SharedDir(const std::string& name)
      : dir((std::filesystem::temp_directory_path() / name).string()) {
    if (rank() == 0) std::filesystem::create_directories(dir);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  ~SharedDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank() == 0) std::filesystem::remove_all(dir);
  }
  std::string checkpoint(rd::Sharding s) const {
    return dir + "/ckpt_" + rd::sharding_name(s) + ".safetensors";
  }
  const std::string dir;
};

void expect_bit_exact(const RunSpec& spec) {
  const Batches b = make_batches(tiny().vocab_size, kSteps);
  const auto got = run_ddp(spec, b);
  const auto want = run_accumulated(spec, b);
  ASSERT_EQ(got.size(), want.size());
  const size_t i = first_difference(got, want);
  EXPECT_EQ(i, got.size()) << "rank " << rank() << ": parameter " << i << " is " << got[i] << ", want "
                           << want[i];
  // The run really trained: parameters moved away from the initialisation.
  rm::Trainer init(tiny(), train_config(2));
  EXPECT_LT(first_difference(got, {init.model().params().begin(), init.model().params().end()}), got.size());
}

}  // namespace

TEST(DistPlan, BucketsOneTwoThree) {
  rm::TransformerLM<float> m(tiny());
  const auto& ts = m.tensors();
  const std::vector<bool> none(ts.size(), false);
  const double total_mb = static_cast<double>(m.params().size()) * 4 / 1e6;
  EXPECT_EQ(rd::plan_buckets(ts, none, total_mb).size(), 1u);
  // Every bucket is a contiguous slice, in flat order, covering every tensor once.
  for (const double mb : {total_mb, total_mb * 0.6, total_mb * 0.4, 0.0}) {
    const auto bk = rd::plan_buckets(ts, none, mb);
    int64_t off = 0;
    int next = 0;
    for (const auto& x : bk) {
      EXPECT_EQ(x.offset, off);
      EXPECT_EQ(x.first, next);
      EXPECT_TRUE(x.numel * 4 <= mb * 1e6 || x.first == x.last);
      EXPECT_EQ(x.ready_group, ts[static_cast<size_t>(x.last)].group);
      off += x.numel;
      next = x.last + 1;
    }
    EXPECT_EQ(off, static_cast<int64_t>(m.params().size()));
  }
  EXPECT_EQ(rd::plan_buckets(ts, none, 0).size(), ts.size());
}

TEST(DistPlan, FrozenTensorsSplitBucketsAndAreLeftOut) {
  rm::TransformerLM<float> m(tiny());
  const auto& ts = m.tensors();
  std::vector<bool> frozen(ts.size(), false);
  frozen[3] = true;
  const auto bk = rd::plan_buckets(ts, frozen, 1e9);
  ASSERT_EQ(bk.size(), 2u);
  EXPECT_EQ(bk[0].last, 2);
  EXPECT_EQ(bk[1].first, 4);
}

TEST(DistPlan, ShardsCoverTheBufferContiguously) {
  rm::TransformerLM<float> m(tiny());
  const auto n = static_cast<int64_t>(m.params().size());
  for (int world : {1, 2, 3, 5}) {
    for (const auto& sh : {rd::shard_by_tensor(m.tensors(), std::vector<bool>(m.tensors().size()), world),
                           rd::shard_flat(n, world, rm::kNormChunk)}) {
      ASSERT_EQ(sh.size(), static_cast<size_t>(world));
      EXPECT_EQ(sh.front().first, 0);
      EXPECT_EQ(sh.back().second, n);
      for (size_t r = 1; r < sh.size(); ++r) EXPECT_EQ(sh[r].first, sh[r - 1].second);
    }
  }
}

// The test model's sizes: how many buckets a given bucket_mb makes (printed for the tests below).
double mb_for_buckets(int want) {
  rm::TransformerLM<float> m(tiny());
  const std::vector<bool> none(m.tensors().size(), false);
  for (double mb = 1e-3; mb < 10; mb *= 1.02)
    if (static_cast<int>(rd::plan_buckets(m.tensors(), none, mb).size()) == want) return mb;
  return -1;
}

TEST(DistDdp, NaiveEqualsAccumulatedSingleProcess) {
  expect_bit_exact(RunSpec(ddp(rd::DdpMode::naive)));
}
TEST(DistDdp, FlatEqualsAccumulatedSingleProcess) {
  expect_bit_exact(RunSpec(ddp(rd::DdpMode::flat)));
}
TEST(DistDdp, OverlapEqualsAccumulatedSingleProcess) {
  expect_bit_exact(RunSpec(ddp(rd::DdpMode::overlap)));
}
TEST(DistDdp, BucketedWithOneTwoThreeBuckets) {
  for (int n : {1, 2, 3}) {
    const double mb = mb_for_buckets(n);
    ASSERT_GT(mb, 0) << "no bucket size gives " << n << " buckets";
    SCOPED_TRACE(testing::Message() << n << " buckets (" << mb << " MB)");
    expect_bit_exact(RunSpec(ddp(rd::DdpMode::bucketed, mb)));
  }
}
TEST(DistDdp, FrozenTensorsStayAndAreNotCommunicated) {
  for (auto mode : {rd::DdpMode::naive, rd::DdpMode::flat, rd::DdpMode::overlap, rd::DdpMode::bucketed}) {
    SCOPED_TRACE(rd::ddp_mode_name(mode));
    RunSpec spec(ddp(mode, 0.01), rm::Precision::fp32, {"layers.1.ffn.w1.weight", "token_embeddings.weight"});
    expect_bit_exact(spec);
    // Frozen weights are the initial ones.
    const Batches b = make_batches(tiny().vocab_size, 2);
    const auto got = run_ddp(spec, b);
    rm::TransformerLM<float> init(tiny());
    init.init(7);
    const auto& t = init.tensor("token_embeddings.weight");
    for (int64_t i = 0; i < t.numel; ++i)
      ASSERT_EQ(got[static_cast<size_t>(t.offset + i)], init.params()[static_cast<size_t>(t.offset + i)]);
  }
}
TEST(DistDdp, Bf16EqualsAccumulatedSingleProcess) {
  for (auto mode : {rd::DdpMode::flat, rd::DdpMode::bucketed}) {
    SCOPED_TRACE(rd::ddp_mode_name(mode));
    expect_bit_exact(RunSpec(ddp(mode, 0.01), rm::Precision::bf16));
  }
}
// Both sharding schemes with every reduction mode: zero1's reduce-scatters per tensor (naive), per
// unfrozen run (flat) and per bucket from the backward observer (overlap, bucketed; the 3-bucket size
// makes buckets straddle the shard boundary), cs336's all-reduces the same way; with frozen tensors and
// in bf16. Bit-exact against accumulation, for the reason at the top of this file.
TEST(DistShard, EveryShardingWithEveryModeEqualsAccumulatedSingleProcess) {
  const double three = mb_for_buckets(3);
  ASSERT_GT(three, 0);
  {
    rm::TransformerLM<float> m(tiny());
    const auto bk = rd::plan_buckets(m.tensors(), std::vector<bool>(m.tensors().size()), three);
    const auto sh = rd::shard_flat(static_cast<int64_t>(m.params().size()), 2, rm::kNormChunk);
    ASSERT_GT(sh[0].second, 0) << "both zero1 shards hold elements";
    bool straddles = false;
    for (const auto& b : bk)
      straddles = straddles || (b.offset < sh[0].second && b.offset + b.numel > sh[0].second);
    ASSERT_TRUE(straddles) << "a bucket crosses the shard boundary at " << sh[0].second;
  }
  for (auto s : {rd::Sharding::cs336, rd::Sharding::zero1}) {
    for (auto mode : {rd::DdpMode::naive, rd::DdpMode::flat, rd::DdpMode::overlap, rd::DdpMode::bucketed}) {
      SCOPED_TRACE(testing::Message() << rd::sharding_name(s) << " + " << rd::ddp_mode_name(mode));
      expect_bit_exact(RunSpec(ddp(mode, three, s)));
      expect_bit_exact(RunSpec(ddp(mode, three, s), rm::Precision::fp32,
                               {"layers.0.attn.q_proj.weight", "token_embeddings.weight"}));
      expect_bit_exact(RunSpec(ddp(mode, three, s), rm::Precision::bf16, {"layers.1.ffn.w2.weight"}));
    }
  }
}

// zero1 with a bucketed reduce-scatter reports one collective per bucket and the bytes of the
// unfrozen gradient, like the all-reduce it replaces.
TEST(DistShard, Zero1BucketedCountsItsReduceScatters) {
  const double three = mb_for_buckets(3);
  rm::Trainer t(tiny(), train_config(2));
  t.set_frozen("layers.0.ffn.w1.weight");
  rd::DataParallel dp(t, ddp(rd::DdpMode::bucketed, three, rd::Sharding::zero1));
  const Batches b = make_batches(tiny().vocab_size, 1);
  t.step(b.x[0].data() + rank() * 2 * kSeq, b.y[0].data() + rank() * 2 * kSeq);
  int64_t unfrozen = 0;
  for (const auto& bk : dp.buckets()) unfrozen += bk.numel;
  EXPECT_EQ(unfrozen, static_cast<int64_t>(t.model().params().size()) -
                          t.model().tensor("layers.0.ffn.w1.weight").numel);
  EXPECT_EQ(dp.last_stats().collectives, static_cast<int>(dp.buckets().size()));
  EXPECT_EQ(dp.last_stats().bytes, unfrozen * 4);
}

// A trainer built with its zero1 shard as the optimizer range (what `ridge train` does) holds only
// that state from the start; DataParallel keeps the buffers (no reallocation) and the run is the same
// bits as accumulation.
TEST(DistShard, TrainerBuiltWithItsShardNeverHoldsTheWholeState) {
  const Batches b = make_batches(tiny().vocab_size, kSteps);
  rm::TransformerLM<float> probe(tiny());
  const auto sh = rd::shard_flat(static_cast<int64_t>(probe.params().size()), 2,
                                 rm::kNormChunk)[static_cast<size_t>(rank())];
  rm::TrainConfig tc = train_config(kGlobalBatch / 2);
  tc.optimizer_begin = sh.first;
  tc.optimizer_end = sh.second;
  const int64_t before = ridge::memory::usage().live_by_tag["optimizer state/m (exp_avg)"];
  rm::Trainer t(tiny(), tc);
  EXPECT_EQ(t.optimizer().size(), sh.second - sh.first);
  EXPECT_EQ(ridge::memory::usage().live_by_tag["optimizer state/m (exp_avg)"] - before,
            4 * (sh.second - sh.first));
  const float* m0 = t.optimizer().m().data();
  rd::DataParallel dp(t, ddp(rd::DdpMode::bucketed, mb_for_buckets(3), rd::Sharding::zero1));
  EXPECT_EQ(t.optimizer().m().data(), m0) << "sharding to the same range reallocated";
  for (size_t s = 0; s < b.x.size(); ++s) {
    const auto off = static_cast<size_t>(rank() * 2 * kSeq);
    t.step(b.x[s].data() + off, b.y[s].data() + off);
  }
  const std::vector<float> got(t.model().params().begin(), t.model().params().end());
  const auto want = run_accumulated(RunSpec(ddp(rd::DdpMode::flat)), b);
  EXPECT_EQ(first_difference(got, want), got.size());
}

// cs336's shard depends on the tensor layout and the frozen flags, so a trainer is built with the empty
// range initial_optimizer_range gives it: it holds no AdamW state until DataParallel allocates this
// rank's shard alone (the whole state is never live), with a frozen tensor set in between; the run is
// the same bits as accumulation.
TEST(DistShard, Cs336TrainerAllocatesOnlyItsShard) {
  const Batches b = make_batches(tiny().vocab_size, kSteps);
  const std::string frozen = "layers.0.ffn.w1.weight";
  rm::TrainConfig tc = train_config(kGlobalBatch / 2);
  rm::TransformerLM<float> probe(tiny());
  const auto n = static_cast<int64_t>(probe.params().size());
  std::tie(tc.optimizer_begin, tc.optimizer_end) =
      rd::initial_optimizer_range(rd::Sharding::cs336, n, 2, rank());
  EXPECT_EQ(tc.optimizer_begin, 0);
  EXPECT_EQ(tc.optimizer_end, 0);
  auto& usage = ridge::memory::usage;
  const std::string m = "optimizer state/m (exp_avg)", v = "optimizer state/v (exp_avg_sq)";
  const int64_t before = usage().live_by_tag[m] + usage().live_by_tag[v];
  rm::Trainer t(tiny(), tc);
  EXPECT_EQ(t.optimizer().size(), 0);
  EXPECT_EQ(usage().live_by_tag[m] + usage().live_by_tag[v], before);
  t.set_frozen(frozen);
  rd::DataParallel dp(t, ddp(rd::DdpMode::bucketed, mb_for_buckets(3), rd::Sharding::cs336));
  // The shard the frozen flags give (the frozen tensor counts for nothing in the balance).
  std::vector<bool> flags(probe.tensors().size());
  flags[static_cast<size_t>(&probe.tensor(frozen) - probe.tensors().data())] = true;
  const auto sh = rd::shard_by_tensor(probe.tensors(), flags, 2)[static_cast<size_t>(rank())];
  EXPECT_EQ(dp.shard(), sh);
  EXPECT_GT(sh.second - sh.first, 0);
  EXPECT_LT(sh.second - sh.first, n);
  EXPECT_EQ(t.optimizer().size(), sh.second - sh.first);
  EXPECT_EQ(usage().live_by_tag[m] + usage().live_by_tag[v] - before, 2 * 4 * (sh.second - sh.first));
  for (size_t s = 0; s < b.x.size(); ++s) {
    const auto off = static_cast<size_t>(rank() * 2 * kSeq);
    t.step(b.x[s].data() + off, b.y[s].data() + off);
  }
  const std::vector<float> got(t.model().params().begin(), t.model().params().end());
  const auto want = run_accumulated(RunSpec(ddp(rd::DdpMode::flat), rm::Precision::fp32, {frozen}), b);
  EXPECT_EQ(first_difference(got, want), got.size());
}

TEST(DistShard, InitialOptimizerRangeIsTheShardOrNothing) {
  const int64_t n = 100000;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(rd::initial_optimizer_range(rd::Sharding::none, n, 3, r), (std::pair<int64_t, int64_t>{0, -1}));
    EXPECT_EQ(rd::initial_optimizer_range(rd::Sharding::cs336, n, 3, r), (std::pair<int64_t, int64_t>{0, 0}));
    EXPECT_EQ(rd::initial_optimizer_range(rd::Sharding::zero1, n, 3, r),
              rd::shard_flat(n, 3, rm::kNormChunk)[static_cast<size_t>(r)]);
  }
  EXPECT_THROW(rd::initial_optimizer_range(rd::Sharding::zero1, n, 2, 2), ridge::Error);
}

TEST(DistShard, OptimizerStateIsHalved) {
  for (auto s : {rd::Sharding::cs336, rd::Sharding::zero1}) {
    rm::Trainer t(tiny(), train_config(2));
    const int64_t n = static_cast<int64_t>(t.model().params().size());
    rd::DataParallel dp(t, ddp(rd::DdpMode::flat, 25, s));
    const auto [b, e] = dp.shard();
    EXPECT_EQ(t.optimizer().size(), e - b);
    // About half: cs336 within one tensor of it, zero1 within one norm chunk (the tiny model holds
    // fewer than two chunks, so there it is 16384 and the rest).
    const int64_t slack = s == rd::Sharding::cs336 ? n / 4 : rm::kNormChunk;
    EXPECT_LE(std::abs(2 * (e - b) - n), 2 * slack) << rd::sharding_name(s);
    if (s == rd::Sharding::zero1 && e < n) {
      EXPECT_EQ(e % rm::kNormChunk, 0);
    }
    int64_t total = 0, mine = e - b;
    MPI_Allreduce(&mine, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(total, n);
  }
}

// Against single-process training on the concatenated global batch (one backward over all 4 x 8
// tokens). What differs: each weight gradient is a sum over the tokens; one process adds all N = 32
// token terms in its GEMM's order, two ranks add 16 each and then the two partial sums, so the same
// terms are summed in another association. Everything per token (activations, dX, the loss gradient
// 1/N, exact scaling by 2) is the same. Each association is within (N - 1) u sum|terms| of the exact
// sum; the fp32 model's gradient error bound from the model tests (ops * k * u * max|g|, k = the
// longest reduction) covers both, so two evaluations differ by at most twice it. That is held at the
// first step, before AdamW; after that AdamW's normalisation m / sqrt(v) turns a relative gradient
// difference into at most the same relative update difference (the update is scale-invariant up to
// eps), so parameters after S steps differ by at most S * lr * 2 * bound (|update| <= 1 per element
// for these few steps: |m_hat / sqrt(v_hat)| <= 1.4 here, by Cauchy-Schwarz over the first 4 steps).
TEST(DistDdp, MatchesFullBatchSingleProcessWithinReassociationBound) {
  const rm::ModelConfig c = tiny();
  const double u = std::ldexp(1.0, -24);
  const double k = static_cast<double>(std::max({kGlobalBatch * kSeq, c.d_model, c.d_ff, c.vocab_size}));
  const double ops = 12.0 * static_cast<double>(c.num_layers) + 6.0;
  const double bound = 2 * 4.0 * ops * k * u;
  const Batches b = make_batches(c.vocab_size, kSteps);
  for (auto [mode, s] : {std::pair{rd::DdpMode::flat, rd::Sharding::none},
                         std::pair{rd::DdpMode::bucketed, rd::Sharding::none},
                         std::pair{rd::DdpMode::overlap, rd::Sharding::zero1},
                         std::pair{rd::DdpMode::bucketed, rd::Sharding::cs336}}) {
    SCOPED_TRACE(testing::Message() << rd::ddp_mode_name(mode) << " " << rd::sharding_name(s));
    const auto got = run_ddp(RunSpec(ddp(mode, 0.01, s)), b);
    const auto want = run_full_batch(b);
    const double lr = train_config(1).lr_max;
    double err = 0;
    for (size_t i = 0; i < got.size(); ++i) err = std::max(err, std::abs(double(got[i]) - double(want[i])));
    EXPECT_LE(err, kSteps * lr * 1.4 * bound) << "max |p_ddp - p_full| after " << kSteps << " steps";
    if (rank() == 0)
      std::printf("  max |p_ddp - p_full| = %.3g after %d steps (bound %.3g)\n", err,
                  static_cast<int>(kSteps), kSteps * lr * 1.4 * bound);
    EXPECT_GT(err, 0.0) << "suspicious: the reassociated sums gave identical bits everywhere";
  }
}

TEST(DistDdp, CheckpointsOfShardedRunsLoadSingleProcessAndBack) {
  const Batches b = make_batches(tiny().vocab_size, 3);
  const SharedDir dir("ridge_dist_test");
  for (auto s : {rd::Sharding::cs336, rd::Sharding::zero1}) {
    SCOPED_TRACE(rd::sharding_name(s));
    const std::string path = dir.checkpoint(s);
    const int64_t n = kSeq;  // local batch 2 x kSeq tokens: rank r's slice starts at r * 2 * kSeq
    // Sharded: 2 steps, save, 1 more step.
    rm::Trainer t(tiny(), train_config(2));
    rd::DataParallel dp(t, ddp(rd::DdpMode::flat, 25, s));
    for (int step = 0; step < 2; ++step)
      t.step(b.x[step].data() + rank() * 2 * n, b.y[step].data() + rank() * 2 * n);
    dp.save(path);
    MPI_Barrier(MPI_COMM_WORLD);
    t.step(b.x[2].data() + rank() * 2 * n, b.y[2].data() + rank() * 2 * n);
    const std::vector<float> sharded(t.model().params().begin(), t.model().params().end());
    // Single process resumes from the sharded checkpoint and takes the third step with accumulation.
    rm::Trainer r(tiny(), train_config(2));
    r.load(path);
    EXPECT_EQ(r.steps(), 2);
    AccumulateHalves acc(r);
    r.set_hooks(&acc);
    acc.x1 = b.x[2].data() + 2 * n;
    acc.y1 = b.y[2].data() + 2 * n;
    r.step(b.x[2].data(), b.y[2].data());
    const std::vector<float> single(r.model().params().begin(), r.model().params().end());
    EXPECT_EQ(first_difference(sharded, single), sharded.size());
    // And back: a single-process checkpoint resumes into a sharded run.
    MPI_Barrier(MPI_COMM_WORLD);
    rm::Trainer r2(tiny(), train_config(2));
    r2.set_hooks(nullptr);
    r.set_hooks(nullptr);
    if (rank() == 0) r.save(path);
    MPI_Barrier(MPI_COMM_WORLD);
    r2.load(path);
    rd::DataParallel dp2(r2, ddp(rd::DdpMode::flat, 25, s));
    r2.load(path);  // after sharding: the optimizer keeps its own slice of the saved state
    EXPECT_EQ(r2.steps(), 3);
    const auto [sb, se] = dp2.shard();
    rm::Trainer full(tiny(), train_config(2));
    full.load(path);
    for (int64_t i = sb; i < se; ++i)
      ASSERT_EQ(r2.optimizer().m()[static_cast<size_t>(i - sb)],
                full.optimizer().m()[static_cast<size_t>(i)]);
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// The training loop under DataParallel: every rank draws the global batch of random tokens from its
// trainer's generator (seeded alike) and steps on its slice, so the weights equal the accumulated single
// process on the same draws (train_config's seed; inputs and targets drawn in turn, as make_batches
// does). The checkpoint goes through the hooks (zero1: the optimizer state gathered) and holds them.
TEST(DistLoop, TrainOnEachRanksSliceEqualsAccumulatedSingleProcess) {
  const SharedDir dir("ridge_dist_loop_test");
  for (auto s : {rd::Sharding::none, rd::Sharding::zero1}) {
    SCOPED_TRACE(rd::sharding_name(s));
    rm::Trainer t(tiny(), train_config(kGlobalBatch / 2));
    rd::DataParallel dp(t, ddp(rd::DdpMode::flat, 25, s));
    int logs = 0;
    const rm::LoopConfig loop{.steps = kSteps,
                              .log_every = 1,
                              .checkpoint = dir.checkpoint(s),
                              .save_every = 0,
                              .peak_flops = 0,
                              .on_log = [&](const rm::StepLog& l) {
                                EXPECT_EQ(l.step, ++logs);
                                EXPECT_TRUE(std::isfinite(l.result.loss));
                                return false;
                              }};
    const rm::TrainSummary sum = rm::train(t, ridge::text::BatchSource{nullptr, {}, tiny().vocab_size}, loop);
    EXPECT_EQ(sum.steps, kSteps);
    EXPECT_EQ(logs, kSteps);
    const std::vector<float> got(t.model().params().begin(), t.model().params().end());
    const auto want = run_accumulated(RunSpec(ddp(rd::DdpMode::flat)),
                                      make_batches(tiny().vocab_size, kSteps, train_config(2).seed));
    EXPECT_EQ(first_difference(got, want), got.size()) << "rank " << rank();
    MPI_Barrier(MPI_COMM_WORLD);
    rm::Trainer saved(tiny(), train_config(2));
    saved.load(loop.checkpoint);
    EXPECT_EQ(saved.steps(), kSteps);
    EXPECT_EQ(first_difference(got, {saved.model().params().begin(), saved.model().params().end()}),
              got.size());
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST(DistAgree, OneRankFailingEndsBothWithItsMessage) {
  const std::string err = rank() == 1 ? "data: 'x.bin' does not exist" : "";
  try {
    rd::agree(err);
    FAIL() << "agree returned although rank 1 failed";
  } catch (const ridge::Error& e) {
    EXPECT_EQ(rank(), 0);
    EXPECT_STREQ(e.what(), "rank 1: data: 'x.bin' does not exist");
  } catch (const rd::PeerFailed&) {
    EXPECT_EQ(rank(), 1);
  }
  EXPECT_NO_THROW(rd::agree(""));
  try {
    rd::check_same(rank() == 1 ? 5u : 4u, "model configuration");
    FAIL() << "check_same returned although the ranks differ";
  } catch (const ridge::Error& e) {
    EXPECT_EQ(rank(), 0);
    EXPECT_NE(std::string(e.what()).find("rank 1 has a different model configuration"), std::string::npos);
  } catch (const rd::PeerFailed&) {
    EXPECT_EQ(rank(), 1);
  }
}

namespace {
// agree_to_start on both ranks: "" when it returned, else the line rank 0 printed ("" on rank 1, which
// prints nothing); every rank must throw PeerFailed when it does not return.
std::string agree_line(const std::string& error, const rd::Fingerprint& fp, bool* returned) {
  testing::internal::CaptureStderr();
  *returned = false;
  try {
    rd::agree_to_start(error, fp);
    *returned = true;
  } catch (const rd::PeerFailed&) {
  }
  return testing::internal::GetCapturedStderr();
}
}  // namespace

// The ranks' agreement before the first collective: equal fingerprints (in any order; "not given" is
// the same as absent) pass; the first entry that differs is named by the lowest rank that differs,
// with both values; an error on any rank comes before a difference; rank 0 prints the one line.
TEST(DistAgree, AgreeToStartNamesTheFirstDifferenceOrTheError) {
  const bool r1 = rank() == 1;
  bool returned = false;
  // Equal, in another order, with a "not given" entry on one rank only.
  rd::Fingerprint a = {{"command", "'ridge train'"}, {"--steps", "'3'"}, {"--seed", "'5'"}};
  rd::Fingerprint b = {
      {"command", "'ridge train'"}, {"--seed", "'5'"}, {"--trace", "not given"}, {"--steps", "'3'"}};
  EXPECT_EQ(agree_line("", r1 ? b : a, &returned), "");
  EXPECT_TRUE(returned);

  // The first difference in rank 1's order: --set size, not --iters.
  rd::Fingerprint mine = {{"command", "'ridge bench allreduce'"},
                          {"--set size", r1 ? "'4M'" : "'1M'"},
                          {"--iters", r1 ? "'3'" : "'2'"}};
  std::string line = agree_line("", mine, &returned);
  EXPECT_FALSE(returned);
  EXPECT_EQ(line,
            r1 ? ""
               : "ridge: rank 1: --set size: '4M' here but '1M' on rank 0 (every MPI rank must be given the "
                 "same command line and data)\n");

  // An entry rank 0 has and rank 1 lacks.
  rd::Fingerprint t = {{"command", "'ridge train'"}};
  if (!r1) t.emplace_back("--trace", "'t.json'");
  line = agree_line("", t, &returned);
  EXPECT_FALSE(returned);
  EXPECT_EQ(line,
            r1 ? ""
               : "ridge: rank 1: --trace: not given here but 't.json' on rank 0 (every MPI rank must be "
                 "given the same command line and data)\n");

  // An error (rank 1's) comes before the difference; rank 0's own error has no prefix.
  line = agree_line(r1 ? "--steps: must be >= 1, got 0" : "", mine, &returned);
  EXPECT_FALSE(returned);
  EXPECT_EQ(line, r1 ? "" : "ridge: rank 1: --steps: must be >= 1, got 0\n");
  line = agree_line("--batch: bad\nvalue", a, &returned);
  EXPECT_FALSE(returned);
  EXPECT_EQ(line, r1 ? "" : "ridge: --batch: bad value\n");

  // MPI is running, so a process cannot join another agreement through join_to_finish.
  EXPECT_TRUE(rd::mpi_started());
  EXPECT_FALSE(rd::join_to_finish("", a).joined);
}

int main(int argc, char** argv) {
  rd::Session session;
  // Rank 0 prints everything, the others only their failures; any rank's failure fails the run.
  if (session.rank() != 0) GTEST_FLAG_SET(brief, true);
  testing::InitGoogleTest(&argc, argv);
  int failed = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}
