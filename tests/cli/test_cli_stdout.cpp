// Standard output is an output like any file: a command whose stdout cannot be written (/dev/full, a
// full disk) says so in one line, "ridge: stdout: cannot write: REASON", and exits 2, where it had
// exited 0 with its output lost (or, past fmt's buffer, 1 with an "internal error").
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../common/tmpdir.hpp"
#include "run.hpp"

namespace {

using ridge::test::ridge_lines;
using ridge::test::run_shell;
using ridge::test::RunResult;
using ridge::test::TempDir;
using ridge::test::write_bytes;

// `ridge args` with its standard output sent to `to`.
RunResult run_to(const std::string& args, const std::string& to) {
  return run_shell(std::string(RIDGE_BINARY) + " " + args + " >" + to);
}

const char* kTiny = "--d-model 32 --layers 1 --heads 2 --d-ff 48 --threads 1 --context 16 --batch 2";

TEST(CliStdout, OutputThatCannotBeWrittenIsOneLineAndExitTwo) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 400; ++i) text += "the cat sat on the mat. the dog sat on the log.\n";
  write_bytes(dir.file("t.txt"), text);
  const std::string tok = dir.file("tok"), ids = dir.file("t.u16");
  ASSERT_EQ(
      ridge::test::run("data train-bpe " + dir.file("t.txt") + " --vocab-size 270 --threads 1 -o " + tok)
          .code,
      0);
  ASSERT_EQ(ridge::test::run("data encode " + dir.file("t.txt") + " --tokenizer " + tok + " -o " + ids).code,
            0);
  const std::vector<std::string> commands = {
      "data decode " + ids + " --tokenizer " + tok,  // 20 KB of text: the write itself fails
      "data info --json " + ids,
      "data info " + ids + " --tokenizer " + tok,
      "info",
      "info --json",
      "jit list --json",
      "roofline model",  // past fmt's buffer: fmt::print throws
      "--help",
      "generate --size tiny --vocab 256 --context 64 --prompt hi --max-tokens 3 --threads 1",
      "generate --size tiny --vocab 256 --context 64 --prompt hi --prompt ho --max-tokens 3 --threads 1",
      "generate --size tiny --vocab 256 --context 64 --prompt hi --max-tokens 3 --threads 1 --json",
      std::string("train ") + kTiny + " --steps 2",
      std::string("train ") + kTiny + " --steps 2 --json",
  };
  for (const auto& c : commands) {
    SCOPED_TRACE(c);
    const RunResult ok = run_to(c, "/dev/null");
    EXPECT_EQ(ok.code, 0) << ok.err;
    const RunResult full = run_to(c, "/dev/full");
    EXPECT_EQ(full.code, 2) << full.err;
    const auto lines = ridge_lines(full.err);
    EXPECT_EQ(lines, std::vector<std::string>{"ridge: stdout: cannot write: No space left on device"})
        << full.err;
  }
}

}  // namespace
