// Resources checked before they are used, on the real binary (issue 37's crash and hang causes):
// `generate` refuses a context or a KV cache past memory before building RoPE's tables; `train-bpe` and
// `encode` refuse a pre-token (or a text) past memory before holding it; a tokenizer's JSON nested
// 300,000 deep is one line, not a SIGSEGV; a JIT compiler that fails or hangs is tried once per process,
// and one that leaves a child holding its output still serves.
//
// The memory cases run under `ulimit -v` (RLIMIT_AS, which ridge's memory check honours) with an input
// whose need is above the limit itself, so ridge refuses it on any machine, and the old code ran out of
// memory (exit 1) instead. AddressSanitizer reserves terabytes of shadow memory up front, so under it
// those cases are skipped.
#include <gtest/gtest.h>

#include <signal.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../common/tmpdir.hpp"
#include "ridge/core.hpp"
#include "ridge/jit.hpp"
#include "run.hpp"

namespace {

namespace fs = std::filesystem;
using ridge::test::read_bytes;
using ridge::test::ridge_lines;
using ridge::test::run;
using ridge::test::run_shell;
using ridge::test::RunResult;
using ridge::test::TempDir;
using ridge::test::write_bytes;

#if defined(__SANITIZE_ADDRESS__)
#define RIDGE_SKIP_UNDER_ASAN() GTEST_SKIP() << "AddressSanitizer reserves terabytes up front: no ulimit -v"
#else
#define RIDGE_SKIP_UNDER_ASAN() (void)0
#endif

// `ridge args` under an address-space limit of `kib` KiB, on one thread (so that the limit is not
// spent on thread stacks and arenas).
RunResult limited(long kib, const std::string& args) {
  return run_shell("ulimit -v " + std::to_string(kib) + "; OMP_NUM_THREADS=1 " + std::string(RIDGE_BINARY) +
                   " " + args);
}

std::string q(const std::string& s) {
  return "'" + s + "'";
}

// Exit 2 and one `ridge:` line on stderr starting with `start` and holding `part`.
void expect_refused(const RunResult& r, const std::string& start, const std::string& part = "") {
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("ridge: " + start, 0), 0u) << r.err;
  EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
}

std::string prompts(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += " --prompt " + std::string(1, static_cast<char>('a' + i));
  return s;
}

// `generate --context 100000000 --max-tokens 99000000` built 12.6 GB of RoPE tables (61 s) before its
// KV-cache check, then the OOM killer; under a 4 GB limit the old code ran out of memory (exit 1). The
// run's memory is now checked first, naming the flag behind the larger part.
TEST(CliResources, GenerateChecksItsMemoryBeforeTheRopeTablesAndTheCache) {
  RIDGE_SKIP_UNDER_ASAN();
  expect_refused(
      limited(4000000, "generate --size tiny --context 100000000 --max-tokens 99000000 --prompt a"),
      "--context: this run needs ", "RoPE's tables 11.9 GiB for a context of 100000000 tokens");
  // The tables fit; the cache for 8 prompts of a million tokens each does not (61 GiB). The old code
  // refused it too, but in the library's words, naming no flag.
  expect_refused(limited(4000000, "generate --size tiny --context 1000000 --max-tokens 999000" + prompts(8)),
                 "--max-tokens: this run needs ",
                 "the KV cache 61.0 GiB for 8 prompts + --max-tokens 999000");
  // What fits runs in the same limit.
  const RunResult ok = limited(4000000, "generate --size tiny --context 4096 --max-tokens 2 --prompt a");
  EXPECT_EQ(ok.code, 0) << ok.err;
}

// `train-bpe` on one 64 MiB pre-token (a run of "a") needs about 21 bytes per byte; under a 1.5 GB limit
// the old code ran out of memory (exit 1). The pre-token is refused before it is copied.
TEST(CliResources, TrainBpeRefusesAPreTokenLargerThanMemoryBeforeTraining) {
  RIDGE_SKIP_UNDER_ASAN();
  TempDir t;
  write_bytes(t.file("a.txt"), std::string(size_t{64} << 20, 'a'));
  expect_refused(
      limited(1500000, "data train-bpe " + q(t.file("a.txt")) + " --vocab-size 300 -o " + q(t.file("tok"))),
      "TEXT: '" + t.file("a.txt") + "': training on a pre-token of 64 MiB needs about 1.75 GiB",
      "break the run");
  EXPECT_FALSE(fs::exists(t.file("tok")));
  write_bytes(t.file("small.txt"), "the cat sat on the mat; the cat ate the rat\n");
  const RunResult ok = limited(
      1500000, "data train-bpe " + q(t.file("small.txt")) + " --vocab-size 260 -o " + q(t.file("tok")));
  EXPECT_EQ(ok.code, 0) << ok.err;
}

// `encode` with a tokenizer of the same 64 MiB pre-token (11 bytes per byte; the old code ran out of
// memory under 1 GB), and byte-level `encode` of a 160 MiB text (about 4 bytes per byte; out of memory
// under 500 MB): both refused before the text is held.
TEST(CliResources, EncodeRefusesWhatMemoryCannotHoldBeforeEncoding) {
  RIDGE_SKIP_UNDER_ASAN();
  TempDir t;
  write_bytes(t.file("small.txt"), "aaaa aaaa aa a aaa aaaaaaaa\n");
  ASSERT_EQ(run("data train-bpe " + q(t.file("small.txt")) + " --vocab-size 260 -o " + q(t.file("tok"))).code,
            0);
  write_bytes(t.file("a.txt"), std::string(size_t{64} << 20, 'a'));
  expect_refused(limited(1000000, "data encode " + q(t.file("a.txt")) + " --tokenizer " + q(t.file("tok")) +
                                      " -o " + q(t.file("a.u16"))),
                 "TEXT: '" + t.file("a.txt") + "': encoding a pre-token of 64 MiB needs about 1 GiB");
  EXPECT_FALSE(fs::exists(t.file("a.u16")));
  write_bytes(t.file("b.txt"), std::string(size_t{160} << 20, 'b'));
  expect_refused(limited(500000, "data encode " + q(t.file("b.txt")) + " -o " + q(t.file("b.u16"))),
                 "TEXT: encoding 160 MiB of text byte by byte needs about 640 MiB");
  EXPECT_FALSE(fs::exists(t.file("b.u16")));
  const RunResult ok = limited(500000, "data encode " + q(t.file("small.txt")) + " -o " + q(t.file("s.u16")));
  EXPECT_EQ(ok.code, 0) << ok.err;
}

// A tokenizer nested 300,000 deep (a token's id, vocab.json itself, special_tokens.json) was a SIGSEGV.
TEST(CliResources, DeeplyNestedTokenizerFilesAreOneLineNotASignal) {
  TempDir t;
  write_bytes(t.file("t.txt"), "hello world\n");
  const std::string deep = std::string(300000, '[') + std::string(300000, ']');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"a\": " + deep + "}", ""}, {deep, ""}, {"{\"a\": 0}", "[" + deep + "]"}};
  int n = 0;
  for (const auto& [vocab, specials] : cases) {
    const std::string dir = t.file("tok" + std::to_string(n++));
    fs::create_directory(dir);
    write_bytes(dir + "/vocab.json", vocab);
    write_bytes(dir + "/merges.txt", "#version: 0.2\n");
    if (!specials.empty()) write_bytes(dir + "/special_tokens.json", specials);
    expect_refused(
        run("data encode " + q(t.file("t.txt")) + " --tokenizer " + q(dir) + " -o " + q(t.file("o.u16"))),
        "--tokenizer: ", "nested deeper than 256 levels");
    expect_refused(run("generate --size tiny --max-tokens 1 --prompt a --tokenizer " + q(dir)),
                   "--tokenizer: ", "nested deeper than 256 levels");
  }
}

// ---------------------------------------------------------------- the JIT's compiler

bool jit_served_here() {
  ridge::jit::Settings s;
  s.compiler = "c++";
  return ridge::cpu::supported(ridge::cpu::Isa::avx2) && !ridge::jit::compiler_signature(s).empty();
}

// A `generate` whose 8 sequences decode through the JIT (RIDGE_ISA=avx2: m = 8 is served), with the
// compiler `cxx` and a cache of its own; `tiny` decodes two shapes (k = 512 and 1344), so two kernels.
RunResult generate_with_jit(const TempDir& t, const std::string& cxx, const std::string& wrap = "") {
  return run_shell(wrap + "env RIDGE_JIT=1 RIDGE_ISA=avx2 RIDGE_JIT_CXX=" + q(cxx) +
                   " RIDGE_JIT_CACHE_DIR=" + q(t.file("jit")) + " " + RIDGE_BINARY +
                   " generate --size tiny --max-tokens 3" + prompts(8));
}

void executable(const std::string& path, const std::string& text) {
  write_bytes(path, text);
  fs::permissions(path, fs::perms::owner_all);
}

// A compiler that answers --version and fails every compile: before, each kernel tried it again, and a
// hanging one cost 60 s per kernel while the notice said "JIT off for this process". Now the first failure
// turns the JIT off: one compile, one notice, the AOT kernels run. Counted through the file the script
// appends to. (A hanging compiler is the same path after its deadline: test_core's
// Jit.AHangingCompilerCostsOneDeadlineThenTheJitIsOff, with a 1 s deadline.)
TEST(CliResources, AFailingJitCompilerIsTriedOncePerRun) {
  if (!jit_served_here()) GTEST_SKIP() << "no AVX2 or no C++ compiler: the JIT serves nothing here";
  TempDir t;
  const std::string calls = t.file("calls");
  executable(t.file("fail-c++"),
             "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'fail 1.0'; exit 0; fi\necho compile >> " +
                 q(calls) + "\nexit 1\n");
  const RunResult r = generate_with_jit(t, t.file("fail-c++"));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_bytes(calls), "compile\n") << "one compile for the run, not one per kernel";
  const auto lines = ridge_lines(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0].rfind("ridge: JIT off for this process: compiling 'small_m_", 0), 0u) << r.err;
}

// A compiler driver that leaves a child holding its output (`sleep &`) and compiles: each compile
// succeeded, yet ridge read the pipe until the child closed it, so it ran into the 60 s deadline and was
// reported as a hang (two kernels: two minutes; `timeout 90` stops the old code). Now the kernels are
// built and served, with no notice.
TEST(CliResources, AJitCompilerThatLeavesAChildHoldingItsOutputStillServes) {
  if (!jit_served_here()) GTEST_SKIP() << "no AVX2 or no C++ compiler: the JIT serves nothing here";
  TempDir t;
  const std::string pids = t.file("pids");
  executable(t.file("fork-c++"),
             "#!/bin/sh\nif [ \"$1\" = --version ]; then exec c++ --version; fi\nsleep 300 &\necho $! >> " +
                 q(pids) + "\nexec c++ \"$@\"\n");
  const RunResult r = generate_with_jit(t, t.file("fork-c++"), "timeout 90 ");
  std::istringstream in(read_bytes(pids));
  int compiles = 0;
  for (int pid; in >> pid; ++compiles) ::kill(pid, SIGKILL);  // the script's own leftovers
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(ridge_lines(r.err).empty()) << r.err;
  EXPECT_EQ(compiles, 2);
  const RunResult l = run("jit list --json", "RIDGE_JIT_CXX=" + q(t.file("fork-c++")) +
                                                 " RIDGE_JIT_CACHE_DIR=" + q(t.file("jit")));
  ASSERT_EQ(l.code, 0) << l.err;
  const auto entries = nlohmann::json::parse(l.out).at("entries");
  ASSERT_EQ(entries.size(), 2u) << l.out;
  for (const auto& e : entries) EXPECT_EQ(e.at("valid"), true) << e.dump();
}

}  // namespace
