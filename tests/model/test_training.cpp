// The training step around the model: the backward observer, fp16 loss scaling, checkpoints that
// resume exactly, the parameter layout, initialisation and thread-count independence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "ridge/core/error.hpp"
#include "ridge/core/threads.hpp"
#include "ridge/model/model.hpp"
#include "ridge/model/safetensors.hpp"
#include "ridge/model/train.hpp"

namespace rm = ridge::model;
namespace fs = std::filesystem;

namespace {

rm::ModelConfig small_config() {
  rm::ModelConfig c;
  c.vocab_size = 61;
  c.context_length = 24;
  c.d_model = 32;
  c.num_layers = 2;
  c.num_heads = 2;
  c.d_ff = 40;
  return c;
}

std::vector<int32_t> tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(gen);
  return t;
}

fs::path temp_dir() {
  const fs::path d = fs::temp_directory_path() / ("ridge_test_training_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

}  // namespace

TEST(ModelLayout, NamesShapesAndGradientReadyOrder) {
  const rm::ModelConfig c = small_config();
  rm::TransformerLM<float> m(c);
  EXPECT_EQ(static_cast<int64_t>(m.params().size()), c.param_count());
  const auto& t = m.tensors();
  EXPECT_EQ(t.front().name, "lm_head.weight");
  EXPECT_EQ(t[1].name, "ln_final.weight");
  EXPECT_EQ(t.back().name, "token_embeddings.weight");
  EXPECT_EQ(m.tensor("layers.1.attn.q_proj.weight").shape, (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(m.tensor("layers.0.ffn.w2.weight").shape, (std::vector<int64_t>{32, 40}));
  // Layer 1's gradients are final before layer 0's, so layer 1 sits earlier in the flat buffer.
  EXPECT_LT(m.tensor("layers.1.ln1.weight").offset, m.tensor("layers.0.ffn.w2.weight").offset);
  int64_t next = 0;
  for (const auto& x : t) {
    EXPECT_EQ(x.offset, next) << x.name;  // dense, in order
    next += x.numel;
  }
  EXPECT_EQ(m.num_groups(), static_cast<int>(c.num_layers) + 3);
  EXPECT_THROW(m.tensor("layers.9.ln1.weight"), ridge::Error);
}

TEST(ModelInit, SeededTruncatedNormalsWithTheCs336Scales) {
  const rm::ModelConfig c = small_config();
  rm::TransformerLM<float> a(c), b(c), other(c);
  a.init(3);
  b.init(3);
  other.init(4);
  EXPECT_TRUE(std::equal(a.params().begin(), a.params().end(), b.params().begin()));
  EXPECT_FALSE(std::equal(a.params().begin(), a.params().end(), other.params().begin()));
  for (const auto& t : a.tensors()) {
    const auto p = a.param(t.name);
    if (t.shape.size() == 1) {
      EXPECT_TRUE(std::all_of(p.begin(), p.end(), [](float v) { return v == 1.0f; })) << t.name;
      continue;
    }
    const double std = t.name == "token_embeddings.weight" ? 1.0 : std::sqrt(2.0 / (t.shape[0] + t.shape[1]));
    double ss = 0, mx = 0;
    for (float v : p) {
      ss += static_cast<double>(v) * v;
      mx = std::max(mx, std::abs(static_cast<double>(v)));
    }
    EXPECT_LE(mx, 3 * std * (1 + 1e-6)) << t.name;  // cut at 3 std
    // The truncated normal's std is 0.986 std; with >= 1000 samples the estimate is within ~5%.
    EXPECT_NEAR(std::sqrt(ss / static_cast<double>(p.size())), 0.986 * std, 0.08 * std) << t.name;
  }
}

// The observer fires once per group, in order, and a group's gradients are final when it fires.
TEST(ModelObserver, GroupsFireInOrderWithFinalGradients) {
  const rm::ModelConfig c = small_config();
  rm::TransformerLM<float> m(c);
  m.init(1);
  const auto x = tokens(2 * 24, c.vocab_size, 1), y = tokens(2 * 24, c.vocab_size, 2);
  std::vector<int> order;
  std::vector<std::vector<float>> at_fire;
  m.zero_grad();
  m.forward(x.data(), y.data(), 2, 24);
  m.backward(1.0f, [&](int g) {
    order.push_back(g);
    const auto& t = m.tensors();
    const int64_t b = t[static_cast<size_t>(m.group_begin(g))].offset;
    const auto& last = t[static_cast<size_t>(m.group_begin(g + 1) - 1)];
    at_fire.emplace_back(m.grads().begin() + b, m.grads().begin() + last.offset + last.numel);
  });
  ASSERT_EQ(static_cast<int>(order.size()), m.num_groups());
  for (int g = 0; g < m.num_groups(); ++g) {
    EXPECT_EQ(order[static_cast<size_t>(g)], g);
    const int64_t b = m.tensors()[static_cast<size_t>(m.group_begin(g))].offset;
    EXPECT_TRUE(std::equal(at_fire[static_cast<size_t>(g)].begin(), at_fire[static_cast<size_t>(g)].end(),
                           m.grads().begin() + b))
        << "group " << g << " changed after its observer call";
  }
}

TEST(ModelThreads, ThreadCountDoesNotChangeTheBits) {
  const rm::ModelConfig c = small_config();
  const auto x = tokens(3 * 24, c.vocab_size, 5), y = tokens(3 * 24, c.vocab_size, 6);
  std::vector<std::vector<float>> grads;
  std::vector<float> losses;
  const int saved = ridge::get_num_threads();
  for (int threads : {1, 2, 3}) {
    ridge::set_num_threads(threads);
    rm::TransformerLM<float> m(c);
    m.init(2);
    m.zero_grad();
    losses.push_back(m.forward(x.data(), y.data(), 3, 24));
    m.backward();
    grads.emplace_back(m.grads().begin(), m.grads().end());
  }
  ridge::set_num_threads(saved);
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_EQ(losses[0], losses[2]);
  EXPECT_TRUE(grads[0] == grads[1]);
  EXPECT_TRUE(grads[0] == grads[2]);
}

// fp16: a loss scale so large that the scaled gradient overflows fp16 makes the step skip (weights
// unchanged, optimizer not advanced) and the scale halve; once it is small enough, steps go through.
TEST(LossScaling, Fp16OverflowSkipsTheStepAndBacksOff) {
  const rm::ModelConfig c = small_config();
  rm::TrainConfig t;
  t.batch = 2;
  t.seq = 24;
  t.precision = rm::Precision::fp16;
  t.loss_scale = 0x1p40;  // |d loss / d logits| ~ 1/48 here: times 2^40 is far beyond fp16's 65504
  t.lr_max = 1e-3;
  rm::Trainer tr(c, t);
  const auto x = tokens(48, c.vocab_size, 1), y = tokens(48, c.vocab_size, 2);
  const std::vector<float> before(tr.model().params().begin(), tr.model().params().end());
  const rm::StepResult r = tr.step(x.data(), y.data());
  EXPECT_TRUE(r.skipped);
  EXPECT_EQ(r.loss_scale, 0x1p40);
  EXPECT_EQ(tr.scaler().scale(), 0x1p39);
  EXPECT_EQ(tr.steps(), 0);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), tr.model().params().begin()));
  // Back off until the scaled gradients fit: each skip halves the scale.
  int skips = 1;
  rm::StepResult s;
  do {
    s = tr.step(x.data(), y.data());
    skips += s.skipped;
  } while (s.skipped && skips < 200);
  EXPECT_FALSE(s.skipped);
  EXPECT_GE(skips, 10);  // 2^40 / 2^k must fall below ~65504 * 48 / max|p - onehot| ~ 2^21.6 first
  EXPECT_EQ(tr.steps(), 1);
  EXPECT_EQ(tr.scaler().skipped(), skips);
  EXPECT_FALSE(std::equal(before.begin(), before.end(), tr.model().params().begin()));
  // The unscaled gradient norm matches an fp32 run of the same weights (fp16 rounding aside).
  EXPECT_TRUE(std::isfinite(s.grad_norm));
}

TEST(LossScaling, GrowsAfterTheIntervalOfCleanSteps) {
  rm::LossScaler s(8.0, 2.0, 0.5, 3);
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 8.0);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 16.0);
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 8.0);
  EXPECT_EQ(s.clean_streak(), 0);
}

// Train 6 steps straight, or 3, save, load into a fresh trainer, 3 more: the same bits.
TEST(Checkpoint, ResumeContinuesBitForBit) {
  const rm::ModelConfig c = small_config();
  rm::TrainConfig t;
  t.batch = 2;
  t.seq = 24;
  t.lr_max = 3e-3;
  t.warmup_steps = 2;
  t.cosine_steps = 6;
  t.seed = 9;
  std::vector<uint16_t> data(500);
  std::mt19937 gen(3);
  for (auto& v : data) v = static_cast<uint16_t>(gen() % c.vocab_size);
  const fs::path dir = temp_dir();
  const std::string tok = (dir / "data.bin").string(), ck = (dir / "ck.safetensors").string();
  ridge::text::write_tokens(tok, data);
  const ridge::text::TokenFile f = ridge::text::TokenFile::open(tok);

  rm::Trainer straight(c, t);
  for (int i = 0; i < 6; ++i) straight.step(f);

  rm::Trainer first(c, t);
  for (int i = 0; i < 3; ++i) first.step(f);
  first.save(ck);
  rm::TrainConfig other_seed = t;
  other_seed.seed = 1234;  // a resumed run takes weights, optimizer and generator from the file
  rm::Trainer second(c, other_seed);
  second.load(ck);
  EXPECT_EQ(second.steps(), 3);
  for (int i = 0; i < 3; ++i) second.step(f);
  EXPECT_TRUE(std::equal(straight.model().params().begin(), straight.model().params().end(),
                         second.model().params().begin()));

  // A checkpoint is a safetensors file PyTorch reads by state_dict names.
  const rm::SafetensorsFile sf = rm::SafetensorsFile::load(ck);
  EXPECT_TRUE(sf.contains("layers.0.attn.q_proj.weight"));
  EXPECT_TRUE(sf.contains("optimizer.exp_avg.lm_head.weight"));

  // A model of another shape refuses it and keeps its weights.
  rm::ModelConfig c2 = c;
  c2.d_ff = 48;
  rm::Trainer wrong(c2, t);
  const std::vector<float> keep(wrong.model().params().begin(), wrong.model().params().end());
  EXPECT_THROW(wrong.load(ck), ridge::Error);
  EXPECT_TRUE(std::equal(keep.begin(), keep.end(), wrong.model().params().begin()));
  fs::remove_all(dir);
}

// Weights alone (as PyTorch's state_dict saved with safetensors): loaded, optimizer fresh.
TEST(Checkpoint, WeightsOnlyFileStartsAFreshOptimizer) {
  const rm::ModelConfig c = small_config();
  rm::TrainConfig t;
  t.batch = 1;
  t.seq = 8;
  rm::Trainer src(c, t);
  const fs::path dir = temp_dir();
  const std::string path = (dir / "weights.safetensors").string();
  rm::SafetensorsWriter w;
  for (const auto& x : src.model().tensors())
    w.add(x.name, ridge::DType::f32, x.shape, src.model().param(x.name).data());
  w.write(path);
  t.seed = 77;
  rm::Trainer dst(c, t);
  dst.load(path);
  EXPECT_EQ(dst.steps(), 0);
  EXPECT_TRUE(
      std::equal(src.model().params().begin(), src.model().params().end(), dst.model().params().begin()));
  fs::remove_all(dir);
}

// TrainConfig's optimizer range: the trainer keeps AdamW state for that range only from the start
// (what a data-parallel rank that knows its shard asks for), sharding to the same range later keeps
// the buffers and zeroes them, and a range outside the parameters is a ridge::Error naming the fields.
TEST(OptimizerRange, TrainerBuiltWithARangeHoldsOnlyIt) {
  const rm::ModelConfig c = small_config();
  rm::TrainConfig t;
  t.batch = 1;
  t.seq = 8;
  const int64_t n = c.param_count();
  t.optimizer_begin = n / 3;
  t.optimizer_end = n / 2;
  rm::Trainer tr(c, t);
  EXPECT_EQ(tr.optimizer().size(), n / 2 - n / 3);
  EXPECT_EQ(tr.optimizer_begin(), n / 3);
  EXPECT_EQ(tr.optimizer_end(), n / 2);
  const auto x = tokens(8, c.vocab_size, 1), y = tokens(8, c.vocab_size, 2);
  const std::vector<float> before(tr.model().params().begin(), tr.model().params().end());
  tr.step(x.data(), y.data());
  // Only the range moved.
  for (int64_t i = 0; i < n; ++i) {
    const bool inside = i >= n / 3 && i < n / 2;
    if (!inside) {
      ASSERT_EQ(tr.model().params()[static_cast<size_t>(i)], before[static_cast<size_t>(i)]) << i;
    }
  }
  const auto nonzero = [](std::span<float> s) {
    return std::any_of(s.begin(), s.end(), [](float v) { return v != 0.0f; });
  };
  EXPECT_TRUE(nonzero(tr.optimizer().m()));
  const float* m0 = tr.optimizer().m().data();
  tr.shard_optimizer(n / 3, n / 2);
  EXPECT_EQ(tr.optimizer().m().data(), m0);
  EXPECT_FALSE(nonzero(tr.optimizer().m()));
  EXPECT_FALSE(nonzero(tr.optimizer().v()));
  EXPECT_EQ(tr.steps(), 1);

  t.optimizer_end = -1;
  EXPECT_EQ(rm::Trainer(c, t).optimizer().size(), n - n / 3);
  for (auto [b, e] : {std::pair<int64_t, int64_t>{5, 4}, {-1, 3}, {0, n + 1}, {n + 1, -1}}) {
    t.optimizer_begin = b;
    t.optimizer_end = e;
    try {
      rm::Trainer bad(c, t);
      ADD_FAILURE() << "[" << b << ", " << e << ") was accepted";
    } catch (const ridge::Error& err) {
      EXPECT_EQ(std::string(err.what()).rfind("optimizer_begin, optimizer_end:", 0), 0u) << err.what();
    }
  }
}
