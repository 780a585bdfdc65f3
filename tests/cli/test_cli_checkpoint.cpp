// `ridge train --resume` of a checkpoint whose metadata was edited, or with a model or precision other
// than the checkpoint's: exit 2, exactly one line naming the flag the user would change (or, for a field
// no flag sets, the checkpoint's field and this run's value), the checkpoint byte-identical afterwards
// and no output written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../model/checkpoint_edit.hpp"
#include "run.hpp"

namespace fs = std::filesystem;
using ridge::test::edit_meta;
using ridge::test::ojson;
using ridge::test::run;

namespace {

const std::string kModel = "--d-model 32 --layers 1 --heads 2 --d-ff 48 --threads 1 --context 16 --batch 2";

struct Dir {
  fs::path p = fs::temp_directory_path() / ("ridge_cli_ckpt_" + std::to_string(::getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
  Dir() { fs::create_directories(p); }
  ~Dir() { fs::remove_all(p); }
  std::string path(const std::string& name) const { return (p / name).string(); }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void spit(const std::string& path, const std::string& s) {
  std::ofstream(path, std::ios::binary) << s;
}

class CliCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string text(2000, 'a');
    for (size_t i = 0; i < text.size(); i += 5) text[i] = 'b';
    txt_ = d_.path("t.txt");
    spit(txt_, text);
    const std::string ck = d_.path("ck.safetensors");
    const auto r = run("train " + kModel + " --steps 2 --text " + txt_ + " --checkpoint " + ck);
    ASSERT_EQ(r.code, 0) << r.err;
    good_ = slurp(ck);
  }

  // Resumes from `bytes` (written to bad.safetensors) with `flags` added: exit 2 and stderr exactly
  // "ridge: " + expect; the file is unchanged and the run wrote no checkpoint.
  void expect_refused(const std::string& bytes, const std::string& flags, const std::string& expect) {
    const std::string bad = d_.path("bad.safetensors"), out = d_.path("out.safetensors");
    spit(bad, bytes);
    const auto r = run("train " + kModel + " --steps 3 --text " + txt_ + " --resume " + bad +
                       " --checkpoint " + out + (flags.empty() ? "" : " " + flags));
    EXPECT_EQ(r.code, 2) << flags << "\n" << r.err;
    EXPECT_EQ(r.err, "ridge: " + expect + "\n") << flags;
    EXPECT_EQ(slurp(bad), bytes) << "the checkpoint changed: " << flags;
    EXPECT_FALSE(fs::exists(out)) << flags;
  }

  std::string bad() const { return d_.path("bad.safetensors"); }

  Dir d_;
  std::string txt_, good_;
};

// The reproductions of issue 20's case 4: each edit of the state metadata is one line naming the field.
TEST_F(CliCheckpoint, EditedStateMetadataIsOneLineNamingTheField) {
  const std::string pre = "--resume: checkpoint '" + bad() + "': ";
  expect_refused(edit_meta(good_, "state", [](ojson& j) { j["step"] = -1; }), "",
                 pre + "state 'step' is -1; it must be an integer in 0..2^53");
  expect_refused(edit_meta(good_, "state", [](ojson& j) { j["precision"] = "bogus"; }), "",
                 pre + "state 'precision' is \"bogus\"; it must be fp32, bf16 or fp16");
  expect_refused(edit_meta(good_, "state", [](ojson& j) { j["skipped_steps"] = "a"; }), "",
                 pre + "state 'skipped_steps' is \"a\"; it must be an integer in 0..2^53");
  expect_refused(edit_meta(good_, "state", [](ojson& j) { j.erase("loss_scale"); }), "",
                 pre + "metadata 'state' has no 'loss_scale'");
  expect_refused(
      edit_meta(good_, "config", [](ojson& j) { j["d_model"] = "32"; }), "",
      pre +
          "metadata 'config' is not a valid model config (ModelConfig JSON: 'd_model' is not an int64 "
          "integer)");
}

// Issue 20's case 11, the checkpoint half: a model that differs names the flag that sets the field.
TEST_F(CliCheckpoint, AnotherModelNamesTheFlagThatDiffers) {
  const std::string tail = " but checkpoint '" + bad() + "' was written for ";
  const std::string why = "; a checkpoint resumes only the model it was written for";
  // kModel's own flags come first; a repeated flag is refused by the parser, so these edit the file's
  // config instead and leave the run as it is: the message is the same either way.
  expect_refused(edit_meta(good_, "config", [](ojson& j) { j["d_ff"] = 64; }), "",
                 "--d-ff: this model has 48" + tail + "64" + why);
  expect_refused(edit_meta(good_, "config", [](ojson& j) { j["num_layers"] = 2; }), "",
                 "--layers: this model has 1" + tail + "2" + why);
  expect_refused(edit_meta(good_, "config", [](ojson& j) { j["num_heads"] = 4; }), "",
                 "--heads: this model has 2" + tail + "4" + why);
  expect_refused(edit_meta(good_, "config", [](ojson& j) { j["d_model"] = 64; }), "",
                 "--d-model: this model has 32" + tail + "64" + why);
  expect_refused(edit_meta(good_, "config", [](ojson& j) { j["context_length"] = 32; }), "",
                 "--context: this model has 16" + tail + "32" + why);
  expect_refused(good_, "--vocab 300", "--vocab: this model has 300" + tail + "256" + why);
  // rope_theta has no flag: the checkpoint's field and this run's value.
  expect_refused(edit_meta(good_, "config", [](ojson& j) { j["rope_theta"] = 500000.0; }), "",
                 "--resume: rope_theta: this model has 10000" + tail + "500000" + why);
  expect_refused(good_, "--precision bf16",
                 "--precision: this run trains in bf16 but checkpoint '" + bad() +
                     "' was written by a fp32 run; resume it in fp32");
}

// The file as written resumes (so the refusals above are the edits', not the set-up's).
TEST_F(CliCheckpoint, TheUneditedCheckpointResumes) {
  spit(bad(), good_);
  const auto r = run("train " + kModel + " --steps 3 --json --text " + txt_ + " --resume " + bad());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out.substr(0, r.out.find('\n'))).at("step").get<int>(), 3) << r.out;
  EXPECT_EQ(slurp(bad()), good_);
}

}  // namespace
