// The training loop, model::train, against the steps it is made of: Trainer::step on batches that
// sample_batch draws from the trainer's generator, checkpoints that resume bit for bit, the logged
// window's figures against their definitions, stopping, and bad arguments refused by name before any
// step (the trainer unchanged).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "common/tmpdir.hpp"
#include "ridge/core/error.hpp"
#include "ridge/model/model.hpp"
#include "ridge/model/train.hpp"

namespace rm = ridge::model;
namespace rt = ridge::text;
using ridge::test::TempDir;

namespace {

rm::ModelConfig config() {
  return {
      {.vocab_size = 53, .context_length = 16, .d_model = 32, .num_layers = 2, .num_heads = 2, .d_ff = 40}};
}

rm::TrainConfig train_config() {
  rm::TrainConfig t;
  t.batch = 3;
  t.seq = 16;
  t.lr_max = 3e-3;
  t.lr_min = 3e-4;
  t.warmup_steps = 2;
  t.cosine_steps = 9;
  t.seed = 4;
  return t;
}

std::vector<uint16_t> data(size_t n, int64_t vocab) {
  std::mt19937 gen(8);
  std::vector<uint16_t> d(n);
  for (auto& v : d) v = static_cast<uint16_t>(gen() % static_cast<uint32_t>(vocab));
  return d;
}

// The reference: the loop written out with the trainer's own pieces.
std::vector<rm::StepResult> step_by_step(rm::Trainer& t, const std::vector<uint16_t>& d, int64_t steps) {
  const auto& c = t.config();
  std::vector<int32_t> x(static_cast<size_t>(c.batch * c.seq)), y(x.size());
  std::vector<rm::StepResult> out;
  for (int64_t s = t.steps(); s < steps; ++s) {
    rt::sample_batch(d.data(), static_cast<int64_t>(d.size()), c.batch, c.seq, t.rng(), x.data(), y.data());
    out.push_back(t.step(x.data(), y.data()));
  }
  return out;
}

bool same_params(rm::Trainer& a, rm::Trainer& b) {
  return std::equal(a.model().params().begin(), a.model().params().end(), b.model().params().begin(),
                    b.model().params().end());
}

std::vector<rm::StepLog> run(rm::Trainer& t, const rt::BatchSource& src, rm::LoopConfig loop) {
  std::vector<rm::StepLog> logs;
  loop.on_log = [&](const rm::StepLog& l) {
    logs.push_back(l);
    return false;
  };
  rm::train(t, src, loop);
  return logs;
}

}  // namespace

// Every step's loss, gradient norm and rate, and the final weights, are those of the loop written out;
// with log_every 1 each step is logged, with 4 the first, every fourth and the last, and each log's
// mean_loss is the mean over its window.
TEST(TrainLoop, EqualsTheStepsItIsMadeOf) {
  const auto d = data(400, config().vocab_size);
  rm::Trainer want(config(), train_config());
  const auto steps = step_by_step(want, d, 9);
  const rt::BatchSource src{nullptr, d, config().vocab_size};

  rm::Trainer every(config(), train_config());
  rm::LoopConfig loop;
  loop.steps = 9;
  loop.log_every = 1;
  const auto logs = run(every, src, loop);
  ASSERT_EQ(logs.size(), steps.size());
  for (size_t i = 0; i < logs.size(); ++i) {
    EXPECT_EQ(logs[i].step, static_cast<int64_t>(i + 1));
    EXPECT_EQ(logs[i].result.loss, steps[i].loss) << "step " << i + 1;
    EXPECT_EQ(logs[i].result.grad_norm, steps[i].grad_norm);
    EXPECT_EQ(logs[i].result.lr, steps[i].lr);
    EXPECT_EQ(logs[i].mean_loss, steps[i].loss);
  }
  EXPECT_TRUE(same_params(every, want));

  rm::Trainer some(config(), train_config());
  loop.log_every = 4;
  const auto few = run(some, src, loop);
  ASSERT_EQ(few.size(), 4u);
  const int64_t at[] = {1, 4, 8, 9}, from[] = {1, 2, 5, 9};
  for (size_t i = 0; i < few.size(); ++i) {
    EXPECT_EQ(few[i].step, at[i]);
    double sum = 0;
    for (int64_t s = from[i]; s <= at[i]; ++s) sum += steps[static_cast<size_t>(s - 1)].loss;
    EXPECT_DOUBLE_EQ(few[i].mean_loss, sum / static_cast<double>(at[i] - from[i] + 1)) << "step " << at[i];
  }
  EXPECT_TRUE(same_params(some, want));
}

// The figures of a log are the model's FLOPs and the batch's tokens per step over the window's time:
// mfu x peak x step time = training_flops, tokens/s x step time = batch x seq; time left is the time
// per step times the steps still to run. Without a peak, mfu is NaN.
TEST(TrainLoop, LoggedRatesFollowFromTheStepTime) {
  const auto d = data(400, config().vocab_size);
  rm::Trainer t(config(), train_config());
  rm::LoopConfig loop;
  loop.steps = 5;
  loop.log_every = 2;
  loop.peak_flops = 1e9;
  const auto logs = run(t, {nullptr, d, config().vocab_size}, loop);
  ASSERT_EQ(logs.size(), 4u);  // 1, 2, 4, 5
  const double flops = rm::training_flops(config(), 3, 16);
  for (const auto& l : logs) {
    const double s = l.step_ms / 1e3;
    EXPECT_NEAR(l.mfu * loop.peak_flops * s, flops, 1e-9 * flops);
    EXPECT_NEAR(l.tokens_per_s * s, 3.0 * 16, 1e-9 * 48);
    EXPECT_NEAR(l.seconds_left, s * static_cast<double>(loop.steps - l.step), 1e-12);
  }
  rm::Trainer u(config(), train_config());
  loop.peak_flops = 0;
  EXPECT_TRUE(std::isnan(run(u, {nullptr, d, config().vocab_size}, loop).back().mfu));
}

// 4 steps with a checkpoint, a fresh trainer loads it and the loop runs to 9: the weights of 9
// straight, and the resumed run's first log is step 5. save_every writes on its steps: the file the
// last step's log sees is the one save_every wrote at step 8.
TEST(TrainLoop, CheckpointsResumeBitForBitAndSaveEveryWritesOnItsSteps) {
  TempDir dir;
  const std::string ck = dir.file("ck.safetensors");
  const auto d = data(400, config().vocab_size);
  const rt::BatchSource src{nullptr, d, config().vocab_size};
  rm::Trainer straight(config(), train_config());
  step_by_step(straight, d, 9);

  rm::Trainer first(config(), train_config());
  rm::LoopConfig loop;
  loop.steps = 4;
  loop.checkpoint = ck;
  const auto head = run(first, src, loop);
  EXPECT_EQ(head.back().step, 4);
  rm::TrainConfig other = train_config();
  other.seed = 77;  // weights, optimizer and generator come from the file
  rm::Trainer second(config(), other);
  second.load(ck);
  loop.steps = 9;
  loop.save_every = 4;
  loop.log_every = 100;
  int64_t saved_before_last = -1;
  loop.on_log = [&](const rm::StepLog& l) {
    if (l.step == 9) {
      rm::Trainer peek(config(), train_config());
      peek.load(ck);
      saved_before_last = peek.steps();
    }
    return false;
  };
  const rm::TrainSummary s = rm::train(second, src, loop);
  EXPECT_EQ(s.first_step, 4);
  EXPECT_EQ(s.steps, 5);
  EXPECT_EQ(saved_before_last, 8);
  EXPECT_TRUE(same_params(second, straight));
  rm::Trainer last(config(), train_config());
  last.load(ck);
  EXPECT_EQ(last.steps(), 9);
  EXPECT_TRUE(same_params(last, straight));
}

// on_log returning true ends the run after that step, and the checkpoint is written there.
TEST(TrainLoop, StopsWhenTheLogSaysSoAndSavesThere) {
  TempDir dir;
  const auto d = data(400, config().vocab_size);
  rm::Trainer t(config(), train_config());
  rm::LoopConfig loop;
  loop.steps = 9;
  loop.log_every = 1;
  loop.checkpoint = dir.file("ck.safetensors");
  loop.on_log = [](const rm::StepLog& l) { return l.step == 3; };
  const rm::TrainSummary s = rm::train(t, {nullptr, d, config().vocab_size}, loop);
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.steps, 3);
  EXPECT_EQ(s.last.step, 3);
  rm::Trainer saved(config(), train_config());
  saved.load(loop.checkpoint);
  EXPECT_EQ(saved.steps(), 3);
  EXPECT_TRUE(same_params(saved, t));
}

// Bad arguments are refused before the first step, naming the argument, with the trainer unchanged;
// a token file cut short under the run is an error about `data`.
TEST(TrainLoop, BadArgumentsAreRefusedByNameBeforeAnyStep) {
  TempDir dir;
  const auto d = data(400, config().vocab_size);
  auto beyond = d;
  beyond[123] = 53;  // the vocabulary is 0..52
  const std::vector<uint16_t> short_data(16, 1);
  struct Case {
    std::string argument, contains;
    rt::BatchSource src;
    rm::LoopConfig loop;
  };
  auto loop = [](int64_t steps, int64_t log_every = 10, std::string ck = "", int64_t save_every = 0,
                 double peak = 0) {
    return rm::LoopConfig{.steps = steps,
                          .log_every = log_every,
                          .checkpoint = std::move(ck),
                          .save_every = save_every,
                          .peak_flops = peak,
                          .on_log = {}};
  };
  const rt::BatchSource good{nullptr, d, 53};
  const std::vector<Case> cases = {
      {"steps", "must be >= 1", good, loop(0)},
      {"log_every", "must be >= 1", good, loop(2, 0)},
      {"save_every", "needs a checkpoint", good, loop(2, 10, "", 1)},
      {"peak_flops", "finite", good, loop(2, 10, "", 0, NAN)},
      {"data", "token id 53, beyond the model's vocab_size 53", {nullptr, beyond, 53}, loop(2)},
      {"data", "has 16 tokens; a row of seq 16 needs at least 17", {nullptr, short_data, 53}, loop(2)},
      {"data", "random tokens below 54", {nullptr, {}, 54}, loop(2)},
      {"checkpoint", "does not exist", good, loop(2, 10, dir.file("no/such/ck.safetensors"))},
  };
  for (const Case& c : cases) {
    rm::Trainer t(config(), train_config());
    const std::vector<float> before(t.model().params().begin(), t.model().params().end());
    try {
      rm::train(t, c.src, c.loop);
      ADD_FAILURE() << c.argument << ": no error";
    } catch (const ridge::Error& e) {
      EXPECT_EQ(e.argument(), c.argument) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.contains), std::string::npos) << e.what();
    }
    EXPECT_EQ(t.steps(), 0);
    EXPECT_TRUE(std::equal(before.begin(), before.end(), t.model().params().begin())) << c.argument;
  }
  // steps at or below the trainer's own count: nothing to train.
  rm::Trainer t(config(), train_config());
  rm::train(t, good, loop(3));
  try {
    rm::train(t, good, loop(3));
    ADD_FAILURE() << "no error";
  } catch (const ridge::Error& e) {
    EXPECT_EQ(e.argument(), "steps") << e.what();
    EXPECT_NE(std::string(e.what()).find("has taken 3 already"), std::string::npos) << e.what();
  }

  // A token file cut short during the run.
  const std::string path = dir.file("tokens.bin");
  rt::write_tokens(path, d);
  const rt::TokenFile f = rt::TokenFile::open(path);
  rm::Trainer u(config(), train_config());
  rm::LoopConfig cut = loop(5, 1);
  cut.on_log = [&](const rm::StepLog&) {
    std::filesystem::resize_file(path, 8);
    return false;
  };
  try {
    rm::train(u, {&f, {}, 53}, cut);
    ADD_FAILURE() << "no error";
  } catch (const ridge::Error& e) {
    EXPECT_EQ(e.argument(), "data") << e.what();
    EXPECT_NE(std::string(e.what()).find("token file"), std::string::npos) << e.what();
  }
  EXPECT_EQ(u.steps(), 1);
}
