// `ridge train` as a user runs it: real output, JSON lines, checkpoints, and the one-line error
// contract for bad data, sizes and flags (exit 2, nothing the user had is lost).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "run.hpp"
#include "ridge/model/safetensors.hpp"
#include "core/json.hpp"

namespace fs = std::filesystem;
using ridge::test::run;

namespace {

const char* kTiny = "--d-model 32 --layers 1 --heads 2 --d-ff 48 --threads 1";

struct Dir {
  fs::path p = fs::temp_directory_path() / ("ridge_cli_train_" + std::to_string(::getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
  Dir() { fs::create_directories(p); }
  ~Dir() { fs::remove_all(p); }
  std::string file(const std::string& name, const std::string& content) const {
    const fs::path f = p / name;
    std::ofstream(f, std::ios::binary) << content;
    return f.string();
  }
  std::string path(const std::string& name) const { return (p / name).string(); }
};

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

// On a text with a strong pattern the loss falls far below ln(256) = 5.55 in a few steps; every JSON
// line has the documented fields; the checkpoint is a safetensors file with the model's tensors.
TEST(CliTrain, TrainsOnTextPrintsJsonAndWritesACheckpoint) {
  Dir d;
  std::string text;
  for (int i = 0; i < 400; ++i) text += "the cat sat on the mat. ";
  const std::string txt = d.file("text.txt", text), ck = d.path("ck.safetensors");
  const auto r = run(std::string("train ") + kTiny + " --text " + txt +
                     " --context 32 --batch 4 --steps 30 --lr 1e-2 --log-every 10 --json --checkpoint " + ck);
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream in(r.out);
  std::string line;
  double first = 0, last = 0;
  int n = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    for (const char* k : {"step", "loss", "lr", "tokens_per_s", "mfu", "grad_norm"})
      EXPECT_TRUE(j.contains(k)) << k;
    (n == 0 ? first : last) = j.at("loss").get<double>();
    ++n;
  }
  EXPECT_EQ(n, 4);  // steps 1, 10, 20, 30
  EXPECT_GT(first, 4.5);
  EXPECT_LT(last, 2.0);
  const auto sf = ridge::model::SafetensorsFile::load(ck);
  EXPECT_TRUE(sf.contains("token_embeddings.weight"));
  EXPECT_EQ(sf.at("lm_head.weight").shape, (std::vector<int64_t>{256, 32}));
}

// Document masking: a text whose documents are separated by NUL bytes (the default --eot-id 0 of
// byte-level data) trains with --doc-mask, the header says where attention stops, and the loss falls.
TEST(CliTrain, TrainsWithADocumentMask) {
  Dir d;
  std::string text;
  for (int i = 0; i < 200; ++i) text += std::string("the cat sat on the mat. ") + (i % 3 == 2 ? '\0' : ' ');
  const std::string txt = d.file("docs.txt", text);
  const auto r = run(std::string("train ") + kTiny + " --text " + txt +
                     " --context 32 --batch 4 --steps 30 --lr 1e-2 --log-every 10 --doc-mask");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("doc mask  attention does not cross token 0 (end of text)"), std::string::npos)
      << r.out;
  const auto r2 =
      run(std::string("train ") + kTiny + " --text " + txt +
          " --context 32 --batch 4 --steps 30 --lr 1e-2 --log-every 10 --json --doc-mask --eot-id 46");
  ASSERT_EQ(r2.code, 0) << r2.err;
  std::istringstream in(r2.out);
  std::string line;
  std::vector<double> loss;
  while (std::getline(in, line)) loss.push_back(nlohmann::json::parse(line).at("loss").get<double>());
  ASSERT_EQ(loss.size(), 4u);
  EXPECT_LT(loss.back(), loss.front() - 1.0);
}

// Grouped-query attention from the command line: 2 heads sharing 1 kv head train (the loss falls as in
// the multi-head run above), the model line says so, the checkpoint records num_kv_heads with k_proj and
// v_proj of one head, it resumes with the same flags, and a run without --kv-heads is refused naming it.
TEST(CliTrain, TrainsWithKvHeadsAndTheCheckpointRemembersThem) {
  Dir d;
  std::string text;
  for (int i = 0; i < 400; ++i) text += "the cat sat on the mat. ";
  const std::string txt = d.file("text.txt", text), ck = d.path("ck.safetensors");
  const std::string args =
      std::string("train ") + kTiny + " --kv-heads 1 --text " + txt + " --context 32 --batch 4";
  const auto r = run(args + " --steps 30 --lr 1e-2 --log-every 10 --checkpoint " + ck);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2 heads (1 kv heads)"), std::string::npos) << r.out;
  const auto sf = ridge::model::SafetensorsFile::load(ck);
  EXPECT_EQ(sf.at("layers.0.attn.k_proj.weight").shape, (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(sf.at("layers.0.attn.v_proj.weight").shape, (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(nlohmann::json::parse(sf.metadata().at("config")).at("num_kv_heads"), 1);
  const auto resumed = run(args + " --steps 32 --json --resume " + ck);
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  const auto j = nlohmann::json::parse(resumed.out.substr(0, resumed.out.find('\n')));
  EXPECT_EQ(j.at("step").get<int>(), 31);
  EXPECT_LT(j.at("loss").get<double>(), 2.0);
  const auto refused = run(std::string("train ") + kTiny + " --text " + txt +
                           " --context 32 --batch 4 --steps 32 --resume " + ck);
  EXPECT_EQ(refused.code, 2);
  EXPECT_EQ(lines(refused.err), 1) << refused.err;
  EXPECT_NE(refused.err.find("--kv-heads: this model has 2 but checkpoint"), std::string::npos)
      << refused.err;
}

// A run resumed from its checkpoint picks up at the saved step.
TEST(CliTrain, ResumesFromACheckpoint) {
  Dir d;
  std::string text(3000, 'a');
  for (size_t i = 0; i < text.size(); i += 7) text[i] = 'b';
  const std::string txt = d.file("t.txt", text), ck = d.path("ck.safetensors");
  ASSERT_EQ(run(std::string("train ") + kTiny + " --text " + txt +
                " --context 16 --batch 2 --steps 4 --checkpoint " + ck)
                .code,
            0);
  const auto r = run(std::string("train ") + kTiny + " --text " + txt +
                     " --context 16 --batch 2 --steps 6 --json --resume " + ck);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out.substr(0, r.out.find('\n')));
  EXPECT_EQ(j.at("step").get<int>(), 5);
}

TEST(CliTrain, BadInputIsOneLineAndExitTwo) {
  Dir d;
  const std::string odd = d.file("odd.bin", std::string(7, '\x01'));            // 3.5 tokens: truncated
  const std::string short_data = d.file("short.bin", std::string(20, '\x01'));  // 10 tokens
  const std::string empty = d.file("empty.txt", "");
  const std::string text = d.file("ok.txt", std::string(200, 'x'));
  const std::string keep = d.file("keep.safetensors", "precious");
  struct Case {
    std::string args, expect;
  };
  const Case cases[] = {
      {"--data " + d.path("missing.bin"), "--data"},
      {"--data " + odd, "--data"},
      {"--data " + short_data + " --context 32", "--context"},
      {"--text " + empty, "--text"},
      {"--text " + d.p.string(), "--text"},
      {"--text " + text + " --data " + odd, "--data and --text"},
      {"--size huge", "--size"},
      {"--precision fp8", "precision"},
      {"--attention fast", "attention"},
      {"--steps 0", "--steps"},
      {"--batch 0", "--batch"},
      {"--heads 3", "--heads"},
      {"--kv-heads 3", "--kv-heads"},  // does not divide --heads 2
      {"--kv-heads 0", "--kv-heads"},
      {"--size 2.7B --context 1024 --batch 64", "needs about"},
      {"--text " + text + " --vocab 100", "--vocab"},
      {"--checkpoint " + d.path("no/such/dir/ck.safetensors"), "--checkpoint"},
      {"--resume " + keep, "--resume"},
      {"--lr -1", "lr"},
      {"--threads 0", "--threads"},
      {"--eot-id 3", "--eot-id"},  // without --doc-mask
      {"--text " + text + " --doc-mask --eot-id 256", "--eot-id"},
      {"--doc-mask --eot-id 1.5", "--eot-id"},
  };
  for (const Case& c : cases) {
    // The case's own value of a flag replaces the default (each flag is given once).
    std::string args = "train " + c.args;
    for (const std::string flag :
         {"--steps 1", "--heads 2", "--threads 1", "--d-model 32", "--layers 1", "--d-ff 48"})
      if (c.args.find("--size") == std::string::npos || flag == "--steps 1" || flag == "--threads 1")
        if (c.args.find(flag.substr(0, flag.find(' '))) == std::string::npos) args += " " + flag;
    const auto r = run(args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_EQ(lines(r.err), 1) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << "\n" << r.err;
  }
  EXPECT_EQ(read(keep), "precious");
}

// The MPI launcher's variables (read before MPI_Init to tell a rank of a data-parallel run from a lone
// process) are numbers: junk in one is one line naming it, exit 2, never atoi's 0 nor an MPI start.
TEST(CliTrain, ALauncherVariableThatIsNotANumberIsOneLine) {
  struct Case {
    std::string env, expect;
  };
  const Case cases[] = {
      {"OMPI_COMM_WORLD_SIZE=abc", "OMPI_COMM_WORLD_SIZE: 'abc' is not a decimal integer"},
      {"PMI_SIZE=2x", "PMI_SIZE: '2x' is not a decimal integer"},
      {"OMPI_COMM_WORLD_SIZE=1 OMPI_COMM_WORLD_RANK=-1", "OMPI_COMM_WORLD_RANK: '-1' is out of range"},
      {"PMI_SIZE=2 PMI_RANK=2", "PMI_RANK: rank 2 is not accepted"},
  };
  for (const Case& c : cases) {
    const auto r = run("train --steps 1 --heads 2 --threads 1 --d-model 32 --layers 1 --d-ff 48", c.env);
    EXPECT_EQ(r.code, 2) << c.env << "\n" << r.err;
    EXPECT_EQ(lines(r.err), 1) << c.env << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.env << "\n" << r.err;
  }
}

// --trace and --memory are checked before training: a folder that does not exist is one line, exit 2;
// a good --memory path gets a snapshot that `ridge memory show` reads, with AdamW's m and v tagged.
TEST(CliTrain, TraceAndMemoryPathsAreCheckedFirstAndTheSnapshotIsWritten) {
  for (const std::string flag : {"--trace", "--memory"}) {
    const auto r = run(std::string("train ") + kTiny + " --steps 1 --batch 1 --context 8 " + flag +
                       " /nonexistent-ridge-dir/x.json");
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_EQ(r.err.rfind("ridge: " + flag + ":", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.out.empty()) << "failed before training: " << r.out;
  }
  const auto path = (std::filesystem::temp_directory_path() / "ridge_cli_train_mem.json").string();
  const auto r = run(std::string("train ") + kTiny + " --steps 1 --batch 1 --context 8 --memory " + path);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto show = run("memory show " + path);
  EXPECT_EQ(show.code, 0) << show.err;
  EXPECT_NE(show.out.find("optimizer state/v (exp_avg_sq)"), std::string::npos) << show.out;
  std::filesystem::remove(path);
}
