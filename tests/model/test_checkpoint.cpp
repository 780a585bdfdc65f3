// Trainer::load against damaged checkpoints: every field of the metadata ('format', 'config', 'state')
// and every tensor (dtype, shape, values) is checked before anything changes, so a refused file leaves
// the trainer exactly as it was (weights, AdamW state, step, generator, loss scaler) and the file
// itself untouched; each refusal is one ridge::Error naming the file and the field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/tmpdir.hpp"
#include "model/checkpoint_edit.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/format.hpp"
#include "ridge/model/safetensors.hpp"
#include "ridge/model/train.hpp"

namespace rm = ridge::model;
using ridge::test::edit_header;
using ridge::test::edit_meta;
using ridge::test::ojson;
using ridge::test::read_bytes;
using ridge::test::TempDir;
using ridge::test::write_bytes;

namespace {

rm::ModelConfig config() {
  rm::ModelConfig c;
  c.vocab_size = 29;
  c.context_length = 8;
  c.d_model = 32;
  c.num_layers = 1;
  c.num_heads = 2;
  c.d_ff = 24;
  return c;
}

rm::TrainConfig train_config(uint64_t seed) {
  rm::TrainConfig t;
  t.batch = 2;
  t.seq = 8;
  t.seed = seed;
  return t;
}

std::vector<int32_t> batch(uint32_t seed) {
  std::vector<int32_t> v(16);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>((i * 7 + seed) % 29);
  return v;
}

// A trainer two steps in, so its weights, moments, step and generator all differ from a fresh one's.
void train_two_steps(rm::Trainer& t, uint32_t seed) {
  const auto x = batch(seed), y = batch(seed + 1);
  t.step(x.data(), y.data());
  t.step(x.data(), y.data());
}

// Everything load() may change.
struct Snapshot {
  std::vector<float> params, m, v;
  int64_t steps;
  ridge::text::Rng::State rng;
  double scale;
  int64_t streak, skipped;
  explicit Snapshot(rm::Trainer& t)
      : params(t.model().params().begin(), t.model().params().end()),
        m(t.optimizer().m().begin(), t.optimizer().m().end()),
        v(t.optimizer().v().begin(), t.optimizer().v().end()),
        steps(t.steps()),
        rng(t.rng().state()),
        scale(t.scaler().scale()),
        streak(t.scaler().clean_streak()),
        skipped(t.scaler().skipped()) {}
  bool operator==(const Snapshot& o) const {
    auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    return same(params, o.params) && same(m, o.m) && same(v, o.v) && steps == o.steps && rng == o.rng &&
           scale == o.scale && streak == o.streak && skipped == o.skipped;
  }
};

class CheckpointLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    rm::Trainer src(config(), train_config(3));
    train_two_steps(src, 5);
    good_path_ = dir_.file("good.safetensors");
    src.save(good_path_);
    good_ = read_bytes(good_path_);
  }

  // Writes `bytes` as a checkpoint and loads it into a trained trainer: the error's message, after
  // checking that the trainer and the file are as they were before.
  std::string refused(const std::string& bytes, std::string* argument = nullptr) {
    const std::string path = dir_.file("bad.safetensors");
    write_bytes(path, bytes);
    rm::Trainer t(config(), train_config(11));
    train_two_steps(t, 9);
    const Snapshot before(t);
    std::string what = "(no error)";
    try {
      t.load(path);
    } catch (const ridge::Error& e) {
      what = e.what();
      if (argument) *argument = e.argument();
    }
    EXPECT_TRUE(Snapshot(t) == before) << "the trainer changed although load() refused: " << what;
    EXPECT_EQ(read_bytes(path), bytes) << "load() changed the file";
    return what;
  }

  std::string path() const { return dir_.file("bad.safetensors"); }
  std::string ck(const std::string& what) const { return "checkpoint '" + path() + "': " + what; }

  TempDir dir_;
  std::string good_path_, good_;
};

TEST_F(CheckpointLoad, TheUnchangedFileResumesEverything) {
  rm::Trainer src(config(), train_config(3));
  train_two_steps(src, 5);
  rm::Trainer t(config(), train_config(11));
  t.load(good_path_);
  EXPECT_TRUE(Snapshot(t) == Snapshot(src));
  // The edit helpers reproduce the file byte for byte when they change nothing.
  EXPECT_EQ(edit_meta(good_, "state", [](ojson&) {}), good_);
}

TEST_F(CheckpointLoad, StateFieldsOfTheWrongTypeOrRangeAreRefused) {
  struct Case {
    const char* key;
    ojson value;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"step", -1, "state 'step' is -1; it must be an integer in 0..2^53"},
      {"step", "3", "state 'step' is \"3\"; it must be an integer in 0..2^53"},
      {"step", 2.5, "state 'step' is 2.5; it must be an integer in 0..2^53"},
      {"step", true, "state 'step' is true; it must be an integer in 0..2^53"},
      {"step", nullptr, "state 'step' is null; it must be an integer in 0..2^53"},
      {"step", (uint64_t{1} << 53) + 1, "state 'step' is 9007199254740993; it must be an integer in 0..2^53"},
      {"step", std::numeric_limits<uint64_t>::max(),
       "state 'step' is 18446744073709551615; it must be an integer in 0..2^53"},
      {"skipped_steps", "a", "state 'skipped_steps' is \"a\"; it must be an integer in 0..2^53"},
      {"loss_scale_streak", -5, "state 'loss_scale_streak' is -5; it must be an integer in 0..2^53"},
      {"precision", "bogus", "state 'precision' is \"bogus\"; it must be fp32, bf16 or fp16"},
      {"precision", 32, "state 'precision' is 32; it must be fp32, bf16 or fp16"},
      {"loss_scale", 0, "state 'loss_scale' is 0; it must be a number in [2^-16, 1e30]"},
      {"loss_scale", -1.0, "state 'loss_scale' is -1.0; it must be a number in [2^-16, 1e30]"},
      {"loss_scale", 1e31, "state 'loss_scale' is 1e+31; it must be a number in [2^-16, 1e30]"},
      {"loss_scale", "1", "state 'loss_scale' is \"1\"; it must be a number in [2^-16, 1e30]"},
      {"rng", ojson::array({1, 2, 3}),
       "state 'rng' must be 4 unsigned 64-bit integers (the generator's state)"},
      {"rng", ojson::array({1, 2, 3, -4}),
       "state 'rng' must be 4 unsigned 64-bit integers (the generator's state)"},
      {"rng", 7, "state 'rng' must be 4 unsigned 64-bit integers (the generator's state)"},
      {"rng", ojson::array({0, 0, 0, 0}), "state 'rng' is all zeros, which is not a generator state"},
      {"step", std::string(100, 'x'),
       "state 'step' is \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...; it must be an integer in 0..2^53"},
  };
  for (const Case& c : cases) {
    const auto bytes = edit_meta(good_, "state", [&](ojson& j) { j[c.key] = c.value; });
    EXPECT_EQ(refused(bytes), ck(c.expect)) << c.key << " = " << c.value.dump();
  }
}

TEST_F(CheckpointLoad, AMissingStateFieldIsNamed) {
  for (const char* key : {"step", "rng", "loss_scale", "loss_scale_streak", "skipped_steps", "precision"}) {
    const auto bytes = edit_meta(good_, "state", [&](ojson& j) { j.erase(key); });
    EXPECT_EQ(refused(bytes), ck(std::string("metadata 'state' has no '") + key + "'")) << key;
  }
}

TEST_F(CheckpointLoad, DamagedOrMissingMetadataIsRefused) {
  auto meta = [&](const std::function<void(ojson&)>& edit) {
    return edit_header(good_, [&](ojson& h) { edit(h["__metadata__"]); });
  };
  EXPECT_EQ(refused(meta([](ojson& m) { m["state"] = "{\"step\": 1"; })), ck("metadata 'state' is not JSON"));
  EXPECT_EQ(refused(meta([](ojson& m) { m["state"] = "[1, 2]"; })),
            ck("metadata 'state' is not a JSON object"));
  EXPECT_EQ(refused(meta([](ojson& m) { m.erase("state"); })),
            ck("metadata 'state' is missing (a ridge checkpoint has format, config and state)"));
  EXPECT_EQ(refused(meta([](ojson& m) { m.erase("config"); })),
            ck("metadata 'config' is missing (a ridge checkpoint has format, config and state)"));
  EXPECT_EQ(refused(meta([](ojson& m) { m.erase("format"); })),
            ck("metadata 'format' is missing; ridge reads 'ridge-checkpoint-1'"));
  EXPECT_EQ(refused(meta([](ojson& m) { m["format"] = "ridge-checkpoint-2"; })),
            ck("metadata 'format' is \"ridge-checkpoint-2\"; ridge reads 'ridge-checkpoint-1'"));
  EXPECT_EQ(refused(meta([](ojson& m) { m["config"] = "{"; })), ck("metadata 'config' is not JSON"));
  EXPECT_EQ(refused(edit_meta(good_, "config", [](ojson& j) { j.erase("d_ff"); })),
            ck("metadata 'config' is not a valid model config (ModelConfig JSON: missing 'd_ff')"));
  EXPECT_EQ(refused(edit_meta(good_, "config", [](ojson& j) { j["num_heads"] = "2"; })),
            ck("metadata 'config' is not a valid model config (ModelConfig JSON: 'num_heads' is not an int64 "
               "integer)"));
}

// Metadata JSON nested 300,000 deep went past the JSON library unchecked, and the message about a bad
// field dump()ed the value, which recursed until the stack ran out (SIGSEGV). Now every metadata value
// goes through input::parse_json's depth limit, and messages show an excerpt.
TEST_F(CheckpointLoad, DeeplyNestedMetadataIsRefusedNotACrash) {
  auto meta = [&](const std::string& key, const std::string& text) {
    return edit_header(good_, [&](ojson& h) { h["__metadata__"][key] = text; });
  };
  const std::string deep = std::string(300000, '[') + std::string(300000, ']');
  EXPECT_EQ(
      refused(meta("state", "{\"step\": " + deep + "}")),
      ck("metadata 'state' is nested deeper than 256 levels at line 1, column 265 (not a ridge input)"));
  EXPECT_EQ(
      refused(meta("config", deep)),
      ck("metadata 'config' is nested deeper than 256 levels at line 1, column 257 (not a ridge input)"));
  // Deep within the limit and long: the message shows a few levels of it.
  const std::string long_value =
      std::string(200, '[') + "\"" + std::string(1 << 20, 'x') + "\"" + std::string(200, ']');
  EXPECT_EQ(refused(edit_meta(good_, "state", [&](ojson& j) { j["step"] = ojson::parse(long_value); })),
            ck("state 'step' is [[[[[[[[[...]]]]]]]]]; it must be an integer in 0..2^53"));
}

// A config field that differs is an error about that field (the CLI names its flag from it), with both
// values.
TEST_F(CheckpointLoad, AModelThatDiffersNamesTheField) {
  struct Case {
    const char* key;
    ojson value;
    std::string mine, saved;
  };
  const std::vector<Case> cases = {
      {"vocab_size", 31, "29", "31"},
      {"context_length", 16, "8", "16"},
      {"d_model", 64, "32", "64"},
      {"num_layers", 2, "1", "2"},
      {"num_heads", 4, "2", "4"},
      {"d_ff", 48, "24", "48"},
      {"rope_theta", 500000.0, "10000", "500000"},
  };
  for (const Case& c : cases) {
    std::string arg;
    const auto what = refused(edit_meta(good_, "config", [&](ojson& j) { j[c.key] = c.value; }), &arg);
    EXPECT_EQ(arg, c.key);
    EXPECT_EQ(what, std::string(c.key) + ": this model has " + c.mine + " but checkpoint '" + path() +
                        "' was written for " + c.saved +
                        "; a checkpoint resumes only the model it was written for");
  }
}

// RMSNorm's epsilon is part of the model: a checkpoint whose config records another one is refused naming
// it, like any other field.
TEST_F(CheckpointLoad, AnotherRmsNormEpsIsRefusedNamingTheField) {
  std::string arg;
  const auto what = refused(edit_meta(good_, "config", [](ojson& j) { j["rms_norm_eps"] = 1e-6; }), &arg);
  EXPECT_EQ(arg, "rms_norm_eps");
  EXPECT_EQ(what, "rms_norm_eps: this model has 1e-05 but checkpoint '" + path() +
                      "' was written for 1e-06; a checkpoint resumes only the model it was written for");
}

TEST_F(CheckpointLoad, AnotherPrecisionIsRefusedNamingBoth) {
  std::string arg;
  const auto what = refused(edit_meta(good_, "state", [](ojson& j) { j["precision"] = "bf16"; }), &arg);
  EXPECT_EQ(arg, "precision");
  EXPECT_EQ(what, "precision: this run trains in fp32 but checkpoint '" + path() +
                      "' was written by a bf16 run; resume it in bf16");
}

TEST_F(CheckpointLoad, TensorDtypeShapeAndValuesAreChecked) {
  // Same byte counts, so the safetensors structure stays valid: only ridge's own checks can refuse these.
  EXPECT_EQ(refused(edit_header(good_, [](ojson& h) { h["lm_head.weight"]["dtype"] = "I32"; })),
            ck("tensor 'lm_head.weight' is I32; ridge reads F32 here"));
  EXPECT_EQ(refused(edit_header(good_,
                                [](ojson& h) {
                                  h["lm_head.weight"]["shape"] = {32, 29};
                                })),
            ck("tensor 'lm_head.weight' has the shape [32, 29]; this model's is [29, 32]"));
  EXPECT_EQ(refused(edit_header(good_, [](ojson& h) { h.erase("optimizer.exp_avg_sq.ln_final.weight"); })),
            ck("missing the optimizer state 'optimizer.exp_avg_sq.ln_final.weight'"));
  EXPECT_EQ(refused(edit_header(good_, [](ojson& h) { h.erase("layers.0.ffn.w2.weight"); })),
            ck("missing the tensor 'layers.0.ffn.w2.weight'"));

  // Values: a NaN weight, a negative second moment (AdamW would take its square root).
  const std::string written = dir_.file("values.safetensors");
  {
    rm::Trainer src(config(), train_config(3));
    train_two_steps(src, 5);
    src.model().param("ln_final.weight")[3] = std::numeric_limits<float>::quiet_NaN();
    src.save(written);
  }
  EXPECT_EQ(refused(read_bytes(written)),
            ck("tensor 'ln_final.weight' holds a non-finite value (nan) at index 3"));
  {
    rm::Trainer src(config(), train_config(3));
    train_two_steps(src, 5);
    std::vector<float> m(src.optimizer().m().begin(), src.optimizer().m().end());
    std::vector<float> v(src.optimizer().v().begin(), src.optimizer().v().end());
    v[static_cast<size_t>(src.model().tensor("lm_head.weight").offset) + 5] = -1.0f;
    src.save(written, m, v);
  }
  EXPECT_EQ(
      refused(read_bytes(written)),
      ck("tensor 'optimizer.exp_avg_sq.lm_head.weight' holds a negative second moment (-1) at index 5"));
}

// A weights-only file (no ridge metadata, as PyTorch writes it) loads any float dtype; an integer one is
// refused like a checkpoint's.
TEST_F(CheckpointLoad, WeightsOnlyFilesTakeFloatDtypesOnly) {
  rm::Trainer src(config(), train_config(3));
  rm::SafetensorsWriter w;
  std::vector<ridge::bf16> lm;
  for (const auto& t : src.model().tensors()) {
    if (t.name == "lm_head.weight") {
      for (float x : src.model().param(t.name)) lm.push_back(ridge::to_bf16(x));
      w.add(t.name, ridge::DType::bf16, t.shape, lm.data());
    } else {
      w.add(t.name, ridge::DType::f32, t.shape, src.model().param(t.name).data());
    }
  }
  const std::string path = dir_.file("weights.safetensors");
  w.write(path);
  rm::Trainer t(config(), train_config(11));
  t.load(path);
  EXPECT_EQ(t.steps(), 0);
  EXPECT_EQ(t.model().param("ln_final.weight")[0], src.model().param("ln_final.weight")[0]);

  const std::string bytes =
      edit_header(read_bytes(path), [](ojson& h) { h["layers.0.ln1.weight"]["dtype"] = "I32"; });
  EXPECT_EQ(refused(bytes),
            ck("tensor 'layers.0.ln1.weight' is I32; ridge reads F32, F64, BF16 or F16 here"));
}

// A grouped-query checkpoint (2 heads sharing 1 kv head) records num_kv_heads in its config, resumes
// its own model exactly, and is refused by the multi-head model of the same other sizes (and the other
// way round) naming num_kv_heads, before any tensor is read.
TEST_F(CheckpointLoad, GroupedQueryCheckpointsResumeAndOtherKvHeadsAreRefused) {
  rm::ModelConfig gqa = config();
  gqa.num_kv_heads = 1;
  rm::Trainer src(gqa, train_config(3));
  EXPECT_EQ(src.model().tensor("layers.0.attn.k_proj.weight").shape, (std::vector<int64_t>{16, 32}));
  train_two_steps(src, 5);
  const std::string file = dir_.file("gqa.safetensors");
  src.save(file);
  const auto md = rm::SafetensorsFile::load(file).metadata();
  EXPECT_EQ(ojson::parse(md.at("config")).at("num_kv_heads"), 1);
  rm::Trainer t(gqa, train_config(11));
  t.load(file);
  EXPECT_TRUE(Snapshot(t) == Snapshot(src));

  std::string arg;
  EXPECT_EQ(refused(read_bytes(file), &arg),
            "num_kv_heads: this model has 2 but checkpoint '" + path() +
                "' was written for 1; a checkpoint resumes only the model it was written for");
  EXPECT_EQ(arg, "num_kv_heads");
  rm::Trainer other(gqa, train_config(11));
  try {
    other.load(good_path_);
    ADD_FAILURE() << "a multi-head checkpoint loaded into the grouped-query model";
  } catch (const ridge::Error& e) {
    EXPECT_EQ(e.argument(), "num_kv_heads");
    EXPECT_NE(std::string(e.what()).find("this model has 1 but checkpoint"), std::string::npos) << e.what();
  }
}

}  // namespace
