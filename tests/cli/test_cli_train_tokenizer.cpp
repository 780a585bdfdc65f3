// `ridge train --tokenizer` and `ridge generate --tokenizer` through the real binary: text read through a BPE
// tokenizer, the checkpoint's record of it (path, content hash, size), generation that encodes prompts and
// decodes output through it (the recorded one by default), and the refusals when the tokenizer given is not
// the checkpoint's (exit 2, one line). And `ridge bench tokenizer --quick` end to end: every row, the peers
// that are installed, token counts that agree.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "run.hpp"
#include "ridge/model/safetensors.hpp"
#include "ridge/text/tokenizer.hpp"

namespace fs = std::filesystem;
using ridge::test::run;

namespace {

const char* kTiny = "--d-model 32 --layers 1 --heads 2 --d-ff 48 --threads 1 --context 16 --batch 2";
const std::string kEot = "<|endoftext|>";

struct Dir {
  fs::path p = fs::temp_directory_path() / ("ridge_cli_train_tok_" + std::to_string(::getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
  Dir() { fs::create_directories(p); }
  ~Dir() { fs::remove_all(p); }
  std::string file(const std::string& name, const std::string& content) const {
    std::ofstream(p / name, std::ios::binary) << content;
    return (p / name).string();
  }
  std::string path(const std::string& name) const { return (p / name).string(); }
};

std::string corpus(int repeats) {
  std::string t;
  for (int i = 0; i < repeats; ++i)
    t += "the cat sat on the mat. the dog sat on the log. " + kEot + "a bird sang in the tree.\n";
  return t;
}

// A tokenizer trained by the library (not through the CLI under test), saved as `ridge data train-bpe` does.
ridge::text::Tokenizer make_tokenizer(const std::string& dir, const std::string& text, int64_t vocab) {
  auto t = ridge::text::train_bpe(text, vocab, {kEot}, 1);
  t.save_dir(dir);
  return t;
}

nlohmann::json tokenizer_record(const std::string& checkpoint) {
  const auto f = ridge::model::SafetensorsFile::load(checkpoint);
  const auto it = f.metadata().find("tokenizer");
  if (it == f.metadata().end()) return nullptr;
  return nlohmann::json::parse(it->second);
}

std::string hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void expect_one_line_error(const ridge::test::RunResult& r, const std::string& flag,
                           const std::string& words) {
  EXPECT_EQ(r.code, 2) << r.err;
  const auto lines = ridge::test::ridge_lines(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find(flag), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(words), std::string::npos) << lines[0];
}

}  // namespace

// Training through a tokenizer: the model's vocabulary is the tokenizer's, the checkpoint records it, and
// generation (without --tokenizer) encodes the prompt and decodes the output through the recorded one.
TEST(CliTrainTokenizer, TrainRecordsTheTokenizerAndGenerateUsesIt) {
  Dir d;
  const std::string tok_dir = d.path("tok"), text = d.file("text.txt", corpus(60)),
                    ck = d.path("ck.safetensors");
  const auto tok = make_tokenizer(tok_dir, corpus(60), 300);
  auto r = run(std::string("train ") + kTiny + " --steps 3 --text " + text + " --tokenizer " + tok_dir +
               " --checkpoint " + ck);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("through the tokenizer"), std::string::npos) << r.out;
  const auto rec = tokenizer_record(ck);
  ASSERT_TRUE(rec.is_object());
  EXPECT_EQ(rec["hash"], hex(tok.content_hash()));
  EXPECT_EQ(rec["vocab_size"], tok.vocab_size());
  EXPECT_EQ(fs::path(rec["path"].get<std::string>()), fs::absolute(tok_dir).lexically_normal());
  {
    const auto f = ridge::model::SafetensorsFile::load(ck);
    EXPECT_EQ(nlohmann::json::parse(f.metadata().at("config"))["vocab_size"], tok.vocab_size());
  }

  r = run("generate --checkpoint " + ck + " --prompt 'the cat sat' --max-tokens 6 --temperature 0 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& seq = j["sequences"][0];
  EXPECT_EQ(seq["prompt_tokens"], tok.encode("the cat sat").size());
  const std::vector<int32_t> ids = seq["tokens"].get<std::vector<int32_t>>();
  EXPECT_EQ(seq["text"], tok.decode(ids));
  // Greedy decoding stops at <|endoftext|> (the tokenizer's, the default --eos) or after 6 tokens.
  const int32_t eot = tok.special_id(kEot);
  for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_NE(ids[i], eot);

  // The same contents at another path are the same tokenizer.
  fs::copy(tok_dir, d.path("copy"));
  r = run("generate --checkpoint " + ck + " --prompt 'the dog' --max-tokens 2 --tokenizer " + d.path("copy"));
  EXPECT_EQ(r.code, 0) << r.err;
  // Resuming with the same tokenizer trains on and keeps the record.
  const std::string ck2 = d.path("ck2.safetensors");
  r = run(std::string("train ") + kTiny + " --steps 5 --text " + text + " --tokenizer " + d.path("copy") +
          " --resume " + ck + " --checkpoint " + ck2);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(tokenizer_record(ck2)["hash"], hex(tok.content_hash()));
}

// A tokenizer other than the checkpoint's is refused (its ids would mean other tokens), as is reading text
// byte by byte into a model trained through a tokenizer, and a recorded tokenizer that is gone or changed.
TEST(CliTrainTokenizer, RefusesAnotherTokenizer) {
  Dir d;
  const std::string a = d.path("a"), b = d.path("b"), text = d.file("text.txt", corpus(60));
  const std::string ck = d.path("ck.safetensors");
  make_tokenizer(a, corpus(60), 300);
  make_tokenizer(b, corpus(60) + "zebras quizzically vex jumbo fjords", 300);
  ASSERT_EQ(run(std::string("train ") + kTiny + " --steps 2 --text " + text + " --tokenizer " + a +
                " --checkpoint " + ck)
                .code,
            0);
  expect_one_line_error(run("generate --checkpoint " + ck + " --prompt hi --tokenizer " + b), "--tokenizer",
                        "is not the tokenizer checkpoint");
  expect_one_line_error(run(std::string("train ") + kTiny + " --steps 4 --text " + text + " --tokenizer " +
                            b + " --resume " + ck),
                        "--tokenizer", "is not the tokenizer checkpoint");
  expect_one_line_error(run(std::string("train ") + kTiny + " --steps 4 --text " + text + " --resume " + ck),
                        "--tokenizer", "give --tokenizer");
  expect_one_line_error(run("generate --checkpoint " + ck + " --prompt hi --tokenizer " + d.path("none")),
                        "--tokenizer", "not a tokenizer directory");
  // The recorded one changed in place (another tokenizer saved over it), then gone.
  make_tokenizer(a, corpus(60) + "zebras quizzically vex jumbo fjords", 300);
  expect_one_line_error(run("generate --checkpoint " + ck + " --prompt hi"), "--tokenizer", "has changed");
  fs::remove_all(a);
  expect_one_line_error(run("generate --checkpoint " + ck + " --prompt hi"), "--tokenizer",
                        "not there any more");
}

// The tokenizer's files are inputs of a run: --checkpoint, --trace and --memory (which replace a file
// without --force) may not name one, nor one of the tokenizer a --resume checkpoint records (which the
// new checkpoint records in turn). Each of the first three had exited 0 with the tokenizer destroyed.
TEST(CliTrainTokenizer, NoOutputReplacesAFileOfTheTokenizer) {
  Dir d;
  const std::string tok = d.path("tok"), text = d.file("text.txt", corpus(60)), ck = d.path("ck.safetensors");
  make_tokenizer(tok, corpus(60), 300);
  const auto read = [&](const std::string& name) {
    std::ifstream f(tok + "/" + name, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::string vocab = read("vocab.json"), merges = read("merges.txt");
  const std::string train =
      std::string("train ") + kTiny + " --steps 2 --text " + text + " --tokenizer " + tok;
  expect_one_line_error(run(train + " --checkpoint " + tok + "/vocab.json"), "--checkpoint",
                        "is read as --tokenizer");
  expect_one_line_error(run(train + " --trace " + tok + "/merges.txt"), "--trace", "is read as --tokenizer");
  expect_one_line_error(run(train + " --memory " + tok + "/./vocab.json"), "--memory",
                        "is read as --tokenizer");
  ASSERT_EQ(run(train + " --checkpoint " + ck).code, 0);
  expect_one_line_error(run(std::string("train ") + kTiny + " --steps 3 --resume " + ck + " --checkpoint " +
                            tok + "/merges.txt"),
                        "--checkpoint", "is read as the tokenizer --resume records");
  EXPECT_EQ(read("vocab.json"), vocab);
  EXPECT_EQ(read("merges.txt"), merges);
}

// A token file with ids beyond the tokenizer's vocabulary was not made with it; a tokenizer larger than
// the model's vocabulary cannot feed it.
TEST(CliTrainTokenizer, RefusesDataAndModelsThatDoNotFit) {
  Dir d;
  const std::string a = d.path("a");
  make_tokenizer(a, corpus(60), 300);
  std::string tokens;
  for (int i = 0; i < 200; ++i) {
    const uint16_t id = static_cast<uint16_t>(i == 50 ? 400 : i % 250);
    tokens.append(reinterpret_cast<const char*>(&id), 2);
  }
  const std::string data = d.file("tokens.bin", tokens);
  expect_one_line_error(
      run(std::string("train ") + kTiny + " --steps 2 --data " + data + " --tokenizer " + a), "--data",
      "not made with that tokenizer");
  expect_one_line_error(run(std::string("train ") + kTiny + " --steps 2 --vocab 280 --text " +
                            d.file("t.txt", corpus(20)) + " --tokenizer " + a),
                        "--vocab", "smaller than the");
  expect_one_line_error(run("generate --size tiny --vocab 256 --context 64 --prompt hi --tokenizer " + a),
                        "--tokenizer", "more than the model's vocabulary");
}

// The benchmark end to end on a small text of its own: every row is there, ridge's figures are real, a peer
// that is installed has its figures and the same token count as ridge, one that is not says why.
TEST(CliTrainTokenizer, BenchQuickRuns) {
  Dir d;
  std::string text;
  for (int i = 0; i < 4000; ++i)
    text += "Line " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog, it's said. " +
            (i % 7 == 0 ? kEot + "\n" : "\n");
  const std::string txt = d.file("text.txt", text);
  const auto r =
      run("bench tokenizer --quick --json --no-progress --text " + txt + " --python-time-limit 120");
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream in(r.out);
  int rows = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    ++rows;
    EXPECT_GT(j["median_ms"].get<double>(), 0) << line;
    EXPECT_GT(j["MB/s"].get<double>(), 0) << line;
    const std::string note = j.value("note", "");
    EXPECT_EQ(note.find("token counts differ"), std::string::npos) << note;
    EXPECT_EQ(note.find("failed"), std::string::npos) << note;
    // Each peer has a figure or a reason in the note.
    for (const std::string peer : {"HF tokenizers", "Python (CS336, simple)"}) {
      if (j["case"]["text"].get<std::string>().find("slice") == std::string::npos && peer[0] == 'P') continue;
      EXPECT_TRUE(j.contains(peer + " MB/s") || note.find(peer + ":") != std::string::npos)
          << peer << ": " << line;
    }
  }
  EXPECT_EQ(rows, 4);  // train and encode of 1 MB, and the Python peer's two rows
}
