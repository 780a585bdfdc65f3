// Issue 37's messages that named no option, and arithmetic that wrapped before a check: each through the
// real binary, exit 2, nothing on stdout, one line on stderr naming the flag the user typed (never the
// library's field: "parameters:", "ModelConfig:", "cache_tokens:", "eot_id:", "flash_attn_with_kvcache:").
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "../model/checkpoint_edit.hpp"
#include "run.hpp"

namespace {

namespace fs = std::filesystem;
using ridge::test::edit_meta;
using ridge::test::ojson;
using ridge::test::run;
using ridge::test::RunResult;

struct Dir {
  fs::path p = fs::temp_directory_path() / ("ridge_cli_messages_" + std::to_string(::getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
  Dir() { fs::create_directories(p); }
  ~Dir() { fs::remove_all(p); }
  std::string path(const std::string& name) const { return (p / name).string(); }
};

void spit(const std::string& path, const std::string& s) {
  std::ofstream(path, std::ios::binary) << s;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Exit 2, nothing on stdout, one line on stderr: "ridge: " + `starts` ..., holding each of `holds`.
void expect_refused(const RunResult& r, const std::string& starts,
                    const std::vector<std::string>& holds = {}) {
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  EXPECT_EQ(r.err.rfind("ridge: " + starts, 0), 0u) << r.err;
  for (const auto& h : holds) EXPECT_NE(r.err.find(h), std::string::npos) << "'" << h << "' in " << r.err;
}

// A small model whose random weights take well under a second to make.
const std::string kGenerate = "generate --size tiny --vocab 256 --context 64 --threads 1 ";

// `--vocab 1000000000000` was "parameters: 3.64 PiB asked for" (the allocator's tag), `--context 2^62`
// "ModelConfig: context_length ...": now the flags, and the size is held against memory before anything
// is allocated.
TEST(CliMessages, GenerateModelSizesNameTheFlags) {
  expect_refused(run("generate --size tiny --prompt hi --vocab 1000000000000"), "--size/--vocab: ",
                 {"vocabulary of 1000000000000", "parameters", "memory this machine has available"});
  expect_refused(run("generate --size tiny --prompt hi --context 4611686018427387904"),
                 "--context 4611686018427387904 ", {"overflow"});
  expect_refused(run("generate --size tiny --prompt hi --kv-heads 3"), "--kv-heads");
  expect_refused(run("generate --size bogus --prompt hi"), "--size: ");
}

// A checkpoint whose config says num_layers 1e6 (a valid config of 41 G parameters) laid out a million
// layers for 10-21 s, 3.6 GB resident, before "parameters: 153 GiB asked for": now refused from the config
// alone, naming --checkpoint, under an address-space limit the layout alone would break.
TEST(CliMessages, ACheckpointLargerThanMemoryIsRefusedBeforeLoading) {
  Dir d;
  const std::string text = d.path("t.txt"), ck = d.path("ck.safetensors"), big = d.path("big.safetensors");
  spit(text, std::string(400, 'a') + std::string(400, 'b'));
  const auto made =
      run("train --d-model 32 --layers 1 --heads 2 --d-ff 48 --threads 1 --context 16 --batch 2 "
          "--steps 1 --text " +
          text + " --checkpoint " + ck);
  ASSERT_EQ(made.code, 0) << made.err;
  spit(big, edit_meta(slurp(ck), "config", [](ojson& j) { j["num_layers"] = 1000000; }));
#if defined(__SANITIZE_ADDRESS__)
  const std::string ulimit;  // AddressSanitizer reserves terabytes of shadow up front
#else
  const std::string ulimit = "ulimit -v 2000000; ";
#endif
  const auto r =
      ridge::test::run_shell(ulimit + RIDGE_BINARY + " generate --threads 1 --prompt hi --checkpoint " + big);
  expect_refused(r, "--checkpoint: '" + big + "' records a model (", {"num_layers 1000000", "memory"});
}

// --prompt-file's problems were reported as --prompt's.
TEST(CliMessages, PromptFileProblemsNameThePromptFile) {
  Dir d;
  const std::string empty = d.path("empty.txt"), high = d.path("high.bin"), lng = d.path("long.txt");
  spit(empty, "");
  spit(high, "ok\xff");
  spit(lng, std::string(100, 'x'));
  expect_refused(run(kGenerate + "--prompt hi --prompt-file " + empty),
                 "--prompt-file: '" + empty + "' (prompt 2) is empty");
  expect_refused(run("generate --size tiny --vocab 200 --context 64 --threads 1 --prompt-file " + high),
                 "--prompt-file: '" + high + "' (prompt 1) holds the byte 255", {"(set by --vocab)"});
  expect_refused(run(kGenerate + "--prompt-file " + lng),
                 "--prompt-file: '" + lng + "' (prompt 1) has 100 tokens", {"(set by --context)"});
  // --prompt's own stay --prompt's.
  expect_refused(run(kGenerate + "--prompt " + std::string(70, 'y')), "--prompt: prompt 1 has 70 tokens");
}

// prompt + --max-tokens wrapped past 2^63 and passed the context check, to fail as "cache_tokens:
// -9223372036854775792 must be >= 0 (...)".
TEST(CliMessages, MaxTokensThatWouldWrapIsRefusedNamingIt) {
  for (const char* v : {"9223372036854775807", "9223372036854775806", "4611686018427387904"}) {
    SCOPED_TRACE(v);
    expect_refused(run(kGenerate + "--prompt hi --max-tokens " + v), "--max-tokens: prompt 1's 2 tokens + ",
                   {"at most 62 here"});
  }
}

// --splits 257 passed the parser's 0 .. 1024 and failed inside flash_attn_with_kvcache after the prefill.
TEST(CliMessages, SplitsPastTheKernelsLimitIsRefusedByTheParser) {
  expect_refused(run(kGenerate + "--prompt hi --splits 257"), "--splits: '257' is out of range",
                 {"0 .. 256"});
  const auto most = run(kGenerate + "--prompt hi --max-tokens 2 --splits 256");
  EXPECT_EQ(most.code, 0) << most.err;
}

// A token id is an int32: --eot-id 2147483648 under --vocab 2147483649 was narrowed to -2147483648 and
// refused as the trainer's "eot_id".
TEST(CliMessages, EotIdPastInt32IsRefusedNamingIt) {
  expect_refused(run("train --size tiny --steps 1 --doc-mask --eot-id 2147483648 --vocab 2147483649"),
                 "--eot-id: '2147483648' is out of range", {"0 .. 2147483647"});
}

}  // namespace

namespace {

// Found by the harness's sweep and cross attacks after issue 37's fixes: `roofline ddp --batch 1e12` was
// "model shape: batch = 8000000000000 ..." (batch x ranks, named for the analyzer's field); `bench
// tokenizer --text 1` was "bench tokenizer: cannot read '1'", a FIFO as --text hung, and --cache-dir onto
// an input was accepted.
TEST(CliMessages, RooflineDdpBatchAndTokenizerBenchFilesNameTheirFlags) {
  expect_refused(run("roofline ddp --hw h100 --batch 1000000000000"), "--batch: ", {"1000000000000", "2^40"});
  Dir d;
  spit(d.path("in.txt"), "some text to train on\n");
  ASSERT_EQ(::mkfifo(d.path("fifo").c_str(), 0600), 0);
  const std::string bench =
      "bench tokenizer --quick --no-progress --no-hf --no-python-ref --iters 1 --warmup 0 ";
  expect_refused(run(bench + "--text " + d.path("missing.txt")), "--text: ", {"missing.txt"});
  expect_refused(run(bench + "--text " + d.path("fifo")), "--text: ", {"fifo"});
  expect_refused(run(bench + "--text " + d.path("in.txt") + " --cache-dir " + d.path("in.txt")),
                 "--cache-dir: ");
  EXPECT_EQ(slurp(d.path("in.txt")), "some text to train on\n");
}

// bench tokenizer's --rounds and --python-time-limit go through the CLI's number options like every other
// count and time: CLI11's own conversion took "0x10" (the hostile harness, 2026-11-28).
TEST(CliMessages, BenchTokenizerNumbersAreTheCliNumbers) {
  Dir d;
  spit(d.path("in.txt"), "some text to train on\n");
  const std::string bench =
      "bench tokenizer --quick --no-progress --no-hf --no-python-ref --iters 1 --warmup 0 --text " +
      d.path("in.txt") + " ";
  expect_refused(run(bench + "--rounds=0x10"), "--rounds: ", {"0x10", "decimal integer 1 .. 100"});
  expect_refused(run(bench + "--rounds=010x"), "--rounds: ", {"010x"});
  expect_refused(run(bench + "--python-time-limit=0x10"), "--python-time-limit: ", {"0x10", "(0, 86400]"});
  expect_refused(run(bench + "--python-time-limit=nan"), "--python-time-limit: ", {"nan"});
}

}  // namespace
