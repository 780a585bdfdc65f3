// The real `ridge data train-bpe`, `data encode --tokenizer`, `data decode` and `data info --tokenizer`:
// a trained tokenizer round-trips a text through the files it writes, GPT-2's own files give GPT-2's
// ids, and bad input exits 2 with one line and loses nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../common/tmpdir.hpp"
#include "run.hpp"

namespace {

using ridge::test::read_bytes;
using ridge::test::run;
using ridge::test::RunResult;
using ridge::test::TempDir;
using ridge::test::write_bytes;

const std::string kData = std::string(RIDGE_SOURCE_DIR) + "/tests/data/";
const std::string kGpt2 = "--tokenizer " + kData + "gpt2_vocab.json --merges " + kData + "gpt2_merges.txt";

void expect_one_line_error(const RunResult& r, const std::string& must_mention) {
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;  // exactly one line
  EXPECT_EQ(r.err.rfind("ridge: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(must_mention), std::string::npos) << r.err;
}

std::string u16le(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += std::string{static_cast<char>(id & 0xFF), static_cast<char>(id >> 8)};
  return s;
}

const char* kText =
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness.<|endoftext|>Once upon a time, a cat sat on a mat. The cat's mat was red.\n\n"
    "  Indented line with  double spaces and digits 12345 67890.<|endoftext|>Café naïve 日本語 😀\n";

TEST(CliTokenizer, TrainEncodeDecodeAndInfoRoundTrip) {
  TempDir dir;
  const std::string text = dir.file("t.txt"), tok = dir.file("tok"), ids = dir.file("t.u16"),
                    back = dir.file("b.txt");
  write_bytes(text, kText);
  const RunResult t = run("data train-bpe " + text + " --vocab-size 300 --special '<|endoftext|>' -o " + tok +
                          " --threads 1 --json");
  ASSERT_EQ(t.code, 0) << t.err;
  const auto doc = nlohmann::json::parse(t.out);
  EXPECT_EQ(doc.at("vocab_size"), 300);
  EXPECT_EQ(doc.at("merges"), 300 - 257);
  const auto vocab = nlohmann::json::parse(read_bytes(tok + "/vocab.json"));
  EXPECT_EQ(vocab.size(), 300u);
  EXPECT_EQ(vocab.at("<|endoftext|>"), 0);
  EXPECT_EQ(nlohmann::json::parse(read_bytes(tok + "/special_tokens.json")),
            nlohmann::json({"<|endoftext|>"}));

  const RunResult e = run("data encode " + text + " -o " + ids + " --tokenizer " + tok);
  ASSERT_EQ(e.code, 0) << e.err;
  const std::string raw = read_bytes(ids);
  // Each special token is the one id 0 (two of them in the text).
  int zeros = 0;
  for (size_t i = 0; i + 1 < raw.size(); i += 2) zeros += raw[i] == 0 && raw[i + 1] == 0;
  EXPECT_EQ(zeros, 2);
  const size_t tokens = raw.size() / 2;
  EXPECT_LT(tokens, std::string(kText).size());  // merges made it shorter than one token per byte

  const RunResult d = run("data decode " + ids + " --tokenizer " + tok + " -o " + back);
  ASSERT_EQ(d.code, 0) << d.err;
  EXPECT_EQ(read_bytes(back), kText);
  const RunResult d2 = run("data decode " + ids + " --tokenizer " + tok);
  ASSERT_EQ(d2.code, 0) << d2.err;
  EXPECT_EQ(d2.out, kText);

  const RunResult i = run("data info --json " + ids + " --tokenizer " + tok);
  ASSERT_EQ(i.code, 0) << i.err;
  const auto info = nlohmann::json::parse(i.out);
  EXPECT_EQ(info.at("text_bytes"), std::string(kText).size());
  EXPECT_DOUBLE_EQ(info.at("bytes_per_token").get<double>(),
                   static_cast<double>(std::string(kText).size()) / static_cast<double>(tokens));
  EXPECT_EQ(info.at("tokenizer_hash"), doc.at("hash"));

  // The folder is replaced only with --force.
  expect_one_line_error(run("data train-bpe " + text + " --vocab-size 280 -o " + tok), "pass --force");
  EXPECT_EQ(nlohmann::json::parse(read_bytes(tok + "/vocab.json")).size(), 300u);
  ASSERT_EQ(run("data train-bpe " + text + " --vocab-size 280 -o " + tok + " --force").code, 0);
  EXPECT_EQ(nlohmann::json::parse(read_bytes(tok + "/vocab.json")).size(), 280u);
}

TEST(CliTokenizer, Gpt2FilesGiveGpt2Ids) {
  TempDir dir;
  write_bytes(dir.file("t.txt"), "Hello world<|endoftext|> the");
  const RunResult e = run("data encode " + dir.file("t.txt") + " -o " + dir.file("t.u16") + " " + kGpt2 +
                          " --special '<|endoftext|>'");
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(read_bytes(dir.file("t.u16")), u16le({15496, 995, 50256, 262}));
  const RunResult d = run("data decode " + dir.file("t.u16") + " " + kGpt2 + " --special '<|endoftext|>'");
  ASSERT_EQ(d.code, 0) << d.err;
  EXPECT_EQ(d.out, "Hello world<|endoftext|> the");
}

TEST(CliTokenizer, BadInputIsOneLineAndLosesNothing) {
  TempDir dir;
  const std::string text = dir.file("t.txt");
  write_bytes(text, kText);
  expect_one_line_error(
      run("data train-bpe " + text + " --vocab-size 256 --special '<|endoftext|>' -o " + dir.file("tok")),
      "--vocab-size: 256 is below 256 bytes + 1 special token = 257");
  EXPECT_FALSE(std::filesystem::exists(dir.file("tok")));
  expect_one_line_error(
      run("data train-bpe " + dir.file("absent.txt") + " --vocab-size 300 -o " + dir.file("tok")),
      "absent.txt");
  expect_one_line_error(run("data train-bpe " + text + " --vocab-size 300 -o " + text), "is not a folder");
  EXPECT_EQ(read_bytes(text), kText);
  expect_one_line_error(
      run("data train-bpe " + text + " --vocab-size 300 --special '' -o " + dir.file("tok")), "--special");
  expect_one_line_error(run("data train-bpe " + text + " --vocab-size 300 --special 1 -o " + dir.file("tok")),
                        "--special: '1' is one byte");
  EXPECT_FALSE(std::filesystem::exists(dir.file("tok")));
  // A tokenizer folder whose vocab.json is the text: refused even with --force.
  std::filesystem::create_directory(dir.file("tk"));
  write_bytes(dir.file("tk/vocab.json"), kText);
  expect_one_line_error(run("data train-bpe " + dir.file("tk/vocab.json") + " --vocab-size 300 -o " +
                            dir.file("tk") + " --force"),
                        "would replace the input TEXT");
  EXPECT_EQ(read_bytes(dir.file("tk/vocab.json")), kText);

  // Missing and malformed tokenizer files.
  write_bytes(dir.file("out.u16"), "keep");
  const std::string enc = "data encode " + text + " -o " + dir.file("out.u16") + " --force ";
  expect_one_line_error(run(enc + "--tokenizer " + dir.file("absent")),
                        "--tokenizer: '" + dir.file("absent") + "' does not exist");
  expect_one_line_error(run(enc + "--tokenizer " + kData + "gpt2_vocab.json"), "--merges");
  expect_one_line_error(run(enc + "--tokenizer " + dir.file("tk")), "--tokenizer: vocab file");
  write_bytes(dir.file("m.txt"), "#version: 0.2\nĠ t\nĠt\n");
  expect_one_line_error(run(enc + "--tokenizer " + kData + "gpt2_vocab.json --merges " + dir.file("m.txt")),
                        "--merges: merges file '" + dir.file("m.txt") + "': line 3: 'Ġt' is not a merge");
  expect_one_line_error(
      run(enc + "--tokenizer " + kData + "gpt2_vocab.json --merges " + dir.file("absent.txt")),
      "--merges: merges file '" + dir.file("absent.txt") + "': cannot open it");
  write_bytes(dir.file("m2.txt"), "Ġ t\nĠq zqxjzqxj\n");
  expect_one_line_error(run(enc + "--tokenizer " + kData + "gpt2_vocab.json --merges " + dir.file("m2.txt")),
                        "line 2: 'zqxjzqxj' is not a token of the vocabulary");
  EXPECT_EQ(read_bytes(dir.file("out.u16")), "keep");

  // A vocabulary too large for uint16 token files: refused before anything is written.
  std::filesystem::create_directory(dir.file("big"));
  {
    nlohmann::json v = nlohmann::json::object(), s = nlohmann::json::array();
    const auto gpt2 = nlohmann::json::parse(read_bytes(kData + "gpt2_vocab.json"));
    for (const auto& [k, id] : gpt2.items())
      if (id.get<int>() < 256) v[k] = id;
    for (int i = 256; i < 65537; ++i) {
      const std::string name = std::string("<").append(std::to_string(i)).append(">");
      v[name] = i;
      s.push_back(name);
    }
    write_bytes(dir.file("big/vocab.json"), v.dump());
    write_bytes(dir.file("big/merges.txt"), "#version: 0.2\n");
    write_bytes(dir.file("big/special_tokens.json"), s.dump());
  }
  expect_one_line_error(run(enc + "--tokenizer " + dir.file("big")),
                        "a vocabulary of 65537 tokens does not fit uint16 token files");
  EXPECT_EQ(read_bytes(dir.file("out.u16")), "keep");

  // Ids outside the tokenizer's vocabulary.
  write_bytes(dir.file("ids.u16"), u16le({1, 2, 60000}));
  expect_one_line_error(run("data decode " + dir.file("ids.u16") + " " + kGpt2),
                        "holds the id 60000, outside");
  expect_one_line_error(run("data info " + dir.file("ids.u16") + " " + kGpt2), "holds the id 60000");
  // decode's output: never an input, replaced only with --force.
  write_bytes(dir.file("ok.u16"), u16le({15496}));
  expect_one_line_error(run("data decode " + dir.file("ok.u16") + " " + kGpt2 + " -o " + dir.file("ok.u16")),
                        "is read as TOKENS");
  EXPECT_EQ(read_bytes(dir.file("ok.u16")), u16le({15496}));
  expect_one_line_error(run("data decode " + dir.file("ok.u16") + " " + kGpt2 + " -o " + text),
                        "pass --force");
  EXPECT_EQ(read_bytes(text), kText);
  expect_one_line_error(run("data decode " + dir.file("ok.u16")), "--tokenizer");
  expect_one_line_error(
      run("data encode " + text + " -o " + dir.file("x.u16") + " --merges " + dir.file("m.txt")),
      "pass --tokenizer too");
}

// The snapshot of a folder's files, name -> bytes.
std::map<std::string, std::string> contents(const std::string& dir) {
  std::map<std::string, std::string> m;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    m[e.path().filename().string()] =
        std::filesystem::is_directory(e.path()) ? "(folder)" : read_bytes(e.path());
  return m;
}

// A tokenizer's files are inputs of the command that reads them: no output may name one, in any
// spelling, --force or not (each of these had exited 0 with the tokenizer destroyed).
TEST(CliTokenizer, TheTokenizersFilesAreInputsThatNoOutputReplaces) {
  TempDir dir;
  const std::string text = dir.file("t.txt"), tok = dir.file("tok"), ids = dir.file("t.u16");
  write_bytes(text, kText);
  ASSERT_EQ(
      run("data train-bpe " + text + " --vocab-size 300 --special '<|endoftext|>' --threads 1 -o " + tok)
          .code,
      0);
  ASSERT_EQ(run("data encode " + text + " --tokenizer " + tok + " -o " + ids).code, 0);
  const auto before = contents(tok);
  for (const std::string& out :
       {tok + "/vocab.json", tok + "/./merges.txt", tok + "/../tok/special_tokens.json"}) {
    SCOPED_TRACE(out);
    expect_one_line_error(run("data encode " + text + " --tokenizer " + tok + " -o " + out + " --force"),
                          "-o/--output: '" + out + "' is read as --tokenizer");
    expect_one_line_error(run("data decode " + ids + " --tokenizer " + tok + " -o " + out + " --force"),
                          "-o/--output: '" + out + "' is read as --tokenizer");
  }
  EXPECT_EQ(contents(tok), before);
  // GPT-2's pair of files: vocab.json and --merges.
  std::filesystem::copy_file(kData + "gpt2_vocab.json", dir.file("v.json"));
  std::filesystem::copy_file(kData + "gpt2_merges.txt", dir.file("m.txt"));
  const std::string gpt2 = "--tokenizer " + dir.file("v.json") + " --merges " + dir.file("m.txt");
  expect_one_line_error(run("data encode " + text + " " + gpt2 + " -o " + dir.file("m.txt") + " --force"),
                        "is read as --merges");
  expect_one_line_error(run("data decode " + ids + " " + gpt2 + " -o " + dir.file("v.json") + " --force"),
                        "is read as --tokenizer");
  EXPECT_EQ(read_bytes(dir.file("m.txt")), read_bytes(kData + "gpt2_merges.txt"));
  EXPECT_EQ(read_bytes(dir.file("v.json")), read_bytes(kData + "gpt2_vocab.json"));
}

// `train-bpe -o OLD --force` replaces the folder as one set or not at all: what it cannot replace (a file
// its owner made read-only, a folder where a file goes, a file that is not the tokenizer's) is refused
// before any work, the old tokenizer whole (it had replaced vocab.json, then failed on the next file, exit
// 2, leaving a mix that did not load); two runs at once leave one of their tokenizers, never a mix.
TEST(CliTokenizer, TrainBpeReplacesTheFolderWholeOrNotAtAll) {
  TempDir dir;
  const std::string text = dir.file("t.txt"), tok = dir.file("tok"), ids = dir.file("ids.u16");
  write_bytes(text, kText);
  write_bytes(ids, u16le({1, 2, 3}));
  const std::string train = "data train-bpe " + text + " --special '<|endoftext|>' --threads 1 -o " + tok;
  ASSERT_EQ(run(train + " --vocab-size 300").code, 0);
  const auto before = contents(tok);
  const auto refused = [&](const std::string& words) {
    expect_one_line_error(run(train + " --vocab-size 280 --force"), words);
  };
  std::filesystem::permissions(tok + "/special_tokens.json", std::filesystem::perms::owner_read);
  refused("'" + tok + "/special_tokens.json' is read-only");
  std::filesystem::permissions(tok + "/special_tokens.json",
                               std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  EXPECT_EQ(contents(tok), before);
  std::filesystem::rename(tok + "/merges.txt", dir.file("merges.keep"));
  std::filesystem::create_directory(tok + "/merges.txt");
  refused("holds a folder 'merges.txt'");
  std::filesystem::remove(tok + "/merges.txt");
  std::filesystem::rename(dir.file("merges.keep"), tok + "/merges.txt");
  EXPECT_EQ(contents(tok), before);
  write_bytes(tok + "/notes.txt", "mine");
  refused("holds 'notes.txt', which is not one of vocab.json, merges.txt, special_tokens.json");
  std::filesystem::remove(tok + "/notes.txt");
  EXPECT_EQ(contents(tok), before);

  ASSERT_EQ(run(train + " --vocab-size 280 --force").code, 0);
  EXPECT_EQ(nlohmann::json::parse(read_bytes(tok + "/vocab.json")).size(), 280u);
  for (int round = 0; round < 6; ++round) {
    SCOPED_TRACE(round);
    const std::string bin = RIDGE_BINARY;
    const RunResult r =
        ridge::test::run_shell("(" + bin + " " + train + " --vocab-size 290 --force >/dev/null & " + bin +
                               " " + train + " --vocab-size 300 --force >/dev/null & " + bin + " data info " +
                               ids + " --tokenizer " + tok + "; wait) >/dev/null");
    EXPECT_EQ(r.err, "");
    EXPECT_EQ(run("data info " + ids + " --tokenizer " + tok).code, 0);
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir.path()))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"ids.u16", "t.txt", "tok"})) << "no temporary, no old set";
  }
}

}  // namespace
