// `ridge train` and `ridge data` under hostile input (issue 20): an output that names an input (in any
// spelling of the same file) is refused before any work and the input stays byte-identical; every
// number is decimal and in range or refused naming the flag; a token file truncated while training
// runs is an error naming it, not SIGBUS; an interrupted checkpoint write leaves no temporary; a name
// the file system cannot hold is refused before training.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "run.hpp"

namespace fs = std::filesystem;
using ridge::test::run;
using ridge::test::RunResult;

namespace {

const std::string kTiny = "--d-model 32 --layers 1 --heads 2 --d-ff 48 --threads 1 --context 16 --batch 2";

struct Dir {
  fs::path p = fs::temp_directory_path() / ("ridge_cli_tc_" + std::to_string(::getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
  Dir() {
    fs::remove_all(p);
    fs::create_directories(p);
  }
  ~Dir() { fs::remove_all(p); }
  std::string file(const std::string& name, const std::string& content) const {
    const fs::path f = p / name;
    std::ofstream(f, std::ios::binary) << content;
    return f.string();
  }
  std::string path(const std::string& name) const { return (p / name).string(); }
};

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::string text_of(int repeats) {
  std::string t;
  for (int i = 0; i < repeats; ++i) t += "the quick brown fox jumps over the lazy dog. ";
  return t;
}

// Exit 2, one stderr line starting "ridge: " and containing every part.
void expect_refused(const RunResult& r, const std::vector<std::string>& parts, const std::string& what) {
  EXPECT_EQ(r.code, 2) << what << "\n" << r.err << r.out;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << "\n" << r.err;
  EXPECT_EQ(r.err.rfind("ridge: ", 0), 0u) << what << "\n" << r.err;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << what << "\n" << r.err;
  for (const auto& p : parts)
    EXPECT_NE(r.err.find(p), std::string::npos) << what << ": '" << p << "' in\n" << r.err;
}

}  // namespace

// Case 1: every output flag against every input flag, in every spelling of the same file; the input
// is byte-identical afterwards and nothing was trained (no stdout).
TEST(CliTrainContract, AnOutputThatNamesAnInputIsRefusedInEverySpelling) {
  Dir d;
  const std::string text = text_of(20);
  const std::string txt = d.file("a.txt", text);
  fs::create_directories(d.p / "sub");
  fs::create_symlink(txt, d.path("link.txt"));
  fs::create_hard_link(txt, d.path("hard.txt"));
  // Spellings of a.txt, the command run from the folder (cd) so that relative ones are relative to it.
  const std::vector<std::string> spellings = {"a.txt", "./a.txt",  "sub/../a.txt",
                                              txt,     "link.txt", "hard.txt"};
  for (const char* out : {"--checkpoint", "--trace", "--memory"}) {
    for (const auto& s : spellings) {
      const auto r = ridge::test::run_shell("cd " + d.p.string() + " && " + RIDGE_BINARY + " train " + kTiny +
                                            " --steps 2 --text a.txt " + out + " " + s);
      expect_refused(r, {out, "--text"}, std::string(out) + " " + s);
      EXPECT_TRUE(r.out.empty()) << r.out;
      ASSERT_EQ(read(txt), text) << out << " " << s;
    }
  }
}

TEST(CliTrainContract, OutputsAgainstDataResumeAndEachOther) {
  Dir d;
  const std::string txt = d.file("a.txt", text_of(20)), ck = d.path("ck.safetensors");
  ASSERT_EQ(run("train " + kTiny + " --steps 2 --text " + txt + " --checkpoint " + ck).code, 0);
  ASSERT_EQ(run("data encode " + txt + " -o " + d.path("t.bin")).code, 0);
  const std::string tok = d.path("t.bin"), ck_bytes = read(ck), tok_bytes = read(tok);
  // A token file as the checkpoint, the trace or the memory snapshot.
  for (const char* out : {"--checkpoint", "--trace", "--memory"}) {
    expect_refused(run("train " + kTiny + " --steps 2 --data " + tok + " " + out + " " + tok),
                   {out, "--data"}, out);
    EXPECT_EQ(read(tok), tok_bytes);
  }
  // The resumed checkpoint as the trace or the memory snapshot (as the checkpoint it is fine: below).
  for (const char* out : {"--trace", "--memory"}) {
    expect_refused(
        run("train " + kTiny + " --steps 3 --text " + txt + " --resume " + ck + " " + out + " " + ck),
        {out, "--resume"}, out);
    EXPECT_EQ(read(ck), ck_bytes);
  }
  // Two outputs on one file.
  expect_refused(run("train " + kTiny + " --steps 2 --text " + txt + " --trace " + d.path("x.json") +
                     " --memory " + d.path("x.json")),
                 {"--memory", "--trace"}, "trace = memory");
  expect_refused(run("train " + kTiny + " --steps 2 --text " + txt + " --checkpoint " + d.path("x.json") +
                     " --trace " + d.path("./x.json")),
                 {"--trace", "--checkpoint"}, "checkpoint = trace");
  EXPECT_FALSE(fs::exists(d.path("x.json")));
  // Resuming from and saving to one checkpoint is the usual way to continue a run.
  const auto r =
      run("train " + kTiny + " --steps 3 --text " + txt + " --resume " + ck + " --checkpoint " + ck);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(read(ck), ck_bytes);
}

// Case 5: numbers are plain decimals in range, or refused naming the flag and the range.
TEST(CliTrainContract, NumbersAreDecimalInRangeOrRefused) {
  Dir d;
  const std::string txt = d.file("a.txt", text_of(20));
  const std::string base = "train " + kTiny + " --text " + txt + " ";
  struct Bad {
    std::string args, flag, part;
  };
  const std::vector<Bad> bad = {
      {"--steps 99999999999999999999", "--steps", "out of range"},
      {"--steps 0", "--steps", "out of range"},
      {"--steps 0x10", "--steps", "not a decimal integer"},
      {"--steps 1e3", "--steps", "not a decimal integer"},
      {"--steps 4x", "--steps", "not a decimal integer"},
      {"--warmup -1", "--warmup", "out of range"},
      {"--warmup ''", "--warmup", "not a decimal integer"},
      {"--save-every 0 --checkpoint " + d.path("c.st"), "--save-every", "out of range"},
      {"--seed -1", "--seed", "out of range"},
      {"--seed 18446744073709551616", "--seed", "out of range"},
      {"--lr-min nan", "--lr-min", "not a finite decimal number"},
      {"--lr inf", "--lr", "not a finite decimal number"},
      {"--lr 1e400", "--lr", "out of range"},
      {"--lr 0x1p-3", "--lr", "not a finite decimal number"},
      {"--lr -1e-3", "--lr", "out of range"},
      {"--lr-min 0.1 --lr 0.01", "--lr-min", "above --lr"},
      {"--threads 0", "--threads", "out of range"},
      {"--threads 99999", "--threads", "out of range"},
      {"--beta1 1", "--beta1", "out of range"},
      {"--beta2 -0.5", "--beta2", "out of range"},
      {"--eps 0", "--eps", "out of range"},
      {"--clip -1", "--clip", "out of range"},
      {"--weight-decay nan", "--weight-decay", "not a finite"},
      {"--d-model 0", "--d-model", "out of range"},
      {"--layers 0", "--layers", "out of range"},
      {"--heads -2", "--heads", "out of range"},
      {"--context ''", "--context", "not a decimal integer"},
      {"--batch 2097152", "--batch", "out of range"},
      {"--log-every 0", "--log-every", "out of range"},
      {"--vocab 0", "--vocab", "out of range"},
  };
  for (const auto& b : bad) {
    const auto r = run(base + b.args);
    expect_refused(r, {b.flag, b.part}, b.args);
    EXPECT_TRUE(r.out.empty()) << b.args << "\n" << r.out;
  }
  EXPECT_FALSE(fs::exists(d.path("c.st")));
  // "010" is ten steps, not eight (CLI11 alone reads a leading 0 as octal); "+3" is three.
  auto steps_run = [&](const std::string& v) {
    const auto r = run(base + "--steps " + v + " --log-every 1 --json");
    EXPECT_EQ(r.code, 0) << v << "\n" << r.err;
    return std::count(r.out.begin(), r.out.end(), '\n');
  };
  EXPECT_EQ(steps_run("010"), 10);
  EXPECT_EQ(steps_run("+3"), 3);
}

// Messages name the flag the user typed, not the library's field (max_grad_norm, lr_max, beta1...).
TEST(CliTrainContract, MessagesNameFlagsNotFields) {
  Dir d;
  const std::string txt = d.file("a.txt", text_of(20));
  for (const char* args : {"--clip nan", "--lr -1", "--beta1 2", "--eps -1", "--lr-min 5"}) {
    const auto r = run("train " + kTiny + " --text " + txt + " " + args);
    expect_refused(r, {std::string(args).substr(0, std::string(args).find(' '))}, args);
    for (const char* field : {"max_grad_norm", "lr_max", "lr_min", "warmup_steps", "weight_decay", "adamw"})
      EXPECT_EQ(r.err.find(field), std::string::npos) << args << ": " << r.err;
  }
}

// Case 10: a token file truncated while training reads it: a clear error naming the file, exit 2, no
// signal (it was SIGBUS, exit 135, while the file was mapped).
TEST(CliTrainContract, DataTruncatedWhileTrainingIsAnErrorNotASignal) {
  Dir d;
  const std::string txt = d.file("a.txt", text_of(400));
  const std::string tok = d.path("t.bin");
  ASSERT_EQ(run("data encode " + txt + " -o " + tok).code, 0);
  // A background shell truncates the file once training has printed its first step.
  const std::string err = d.path("err.txt");
  const std::string cmd = std::string(RIDGE_BINARY) + " train " + kTiny + " --data " + tok +
                          " --steps 1000000 --log-every 1 2>" + err + " | (read first; truncate -s 64 " +
                          tok + "; cat >/dev/null); exit ${PIPESTATUS[0]}";
  const auto r = ridge::test::run_shell("bash -c '" + cmd + "'");
  EXPECT_EQ(r.code, 2) << read(err);
  const std::string e = read(err);
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 1) << e;
  EXPECT_NE(e.find("token file '" + tok + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("changed while ridge read it"), std::string::npos) << e;
}

// Case 12: SIGINT or SIGTERM during `--save-every 1` leaves no NAME.tmp.PID.N beside the checkpoint,
// and a stale temporary of a dead process is removed by the next write to the same path.
TEST(CliTrainContract, InterruptedCheckpointWritesLeaveNoTemporary) {
  Dir d;
  const std::string txt = d.file("a.txt", text_of(40));
  const std::string ck = d.path("ck.safetensors");
  auto temporaries = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator(d.p))
      n += e.path().filename().string().rfind("ck.safetensors.tmp.", 0) == 0;
    return n;
  };
  // A bigger model, so a checkpoint write takes long enough to be interrupted often.
  const std::string args =
      "train --d-model 256 --layers 4 --heads 4 --d-ff 768 --threads 1 --context 8 --batch 1 "
      "--steps 100000 --save-every 1 --log-every 1000 --text " +
      txt + " --checkpoint " + ck;
  // The checkpoint (42 MB with its AdamW state) is rewritten after every step, and a temporary exists
  // about half of the time, so most of these signals land inside a write: the binary before the fix
  // left one NAME.tmp.PID.N almost every time.
  int round = 0;
  for (int sig : {SIGINT, SIGTERM, SIGINT, SIGTERM, SIGINT, SIGTERM}) {
    ++round;
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c",
              ("exec " + std::string(RIDGE_BINARY) + " " + args + " >/dev/null 2>&1").c_str(), nullptr);
      ::_exit(127);
    }
    // Wait until checkpoints are being written, then interrupt at a moment unrelated to the writes.
    for (int i = 0; i < 1000 && !fs::exists(ck); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(300 + 97 * round));
    ::kill(pid, sig);
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << status;
    EXPECT_EQ(temporaries(), 0) << "after signal " << sig;
  }
  // A temporary left by a process killed outright (SIGKILL cannot be caught): the next write removes
  // it. Its pid is a child that has exited and been reaped, so it names no process.
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string stale = ck + ".tmp." + std::to_string(dead) + ".0";
  std::ofstream(stale) << "partial";
  // One of a live process (this test) stays: it may still be writing.
  const std::string live = ck + ".tmp." + std::to_string(::getppid()) + ".0";
  std::ofstream(live) << "partial";
  const auto r = run("train " + kTiny + " --steps 1 --text " + txt + " --checkpoint " + ck);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
}

// Case 12: an output name longer than the file system holds is refused before training, naming the flag.
TEST(CliTrainContract, ANameTooLongIsRefusedBeforeTraining) {
  Dir d;
  const std::string txt = d.file("a.txt", text_of(20));
  for (const char* flag : {"--checkpoint", "--trace", "--memory"}) {
    const auto r = run("train " + kTiny + " --steps 100000 --text " + txt + " " + flag + " " +
                       d.path(std::string(250, 'n')));
    expect_refused(r, {flag, "bytes"}, flag);
    EXPECT_TRUE(r.out.empty());
  }
}

// `ridge data encode`: the output as one of its inputs in any spelling, even with --force.
TEST(CliTrainContract, DataEncodeNeverOverwritesItsInput) {
  Dir d;
  const std::string text = text_of(5);
  const std::string txt = d.file("a.txt", text);
  fs::create_symlink(txt, d.path("link.txt"));
  fs::create_hard_link(txt, d.path("hard.txt"));
  for (const std::string& out : std::vector<std::string>{"a.txt", "./a.txt", "link.txt", "hard.txt", txt}) {
    const auto r = ridge::test::run_shell("cd " + d.p.string() + " && " + RIDGE_BINARY +
                                          " data encode a.txt -o " + out + " --force");
    expect_refused(r, {"-o"}, out);
    ASSERT_EQ(read(txt), text) << out;
  }
}

// A checkpoint or token file named by a device or a FIFO is written into it, never replaced by a
// regular file: before, the rename of the temporary replaced it (as root, `--checkpoint /dev/null`
// replaced the machine's /dev/null). The device is made here (mknod needs root; skipped otherwise).
TEST(CliTrainContract, ADeviceOrFifoOutputIsWrittenInPlaceNeverReplaced) {
  Dir d;
  const std::string txt = d.file("a.txt", text_of(20));
  const std::string dev = d.path("null");
  if (::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) GTEST_SKIP() << "mknod needs root";
  for (const std::string& args : {"train " + kTiny + " --steps 1 --text " + txt + " --checkpoint " + dev,
                                  "data encode " + txt + " -o " + dev + " --force"}) {
    const auto r = run(args);
    EXPECT_EQ(r.code, 0) << args << "\n" << r.err;
    struct stat st {};
    ASSERT_EQ(::stat(dev.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << args << ": the device was replaced";
  }
  // A FIFO nobody reads: one line naming the flag (not a hang, not a replaced FIFO).
  const std::string fifo = d.path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0666), 0);
  const auto r = run("train " + kTiny + " --steps 1 --text " + txt + " --checkpoint " + fifo);
  expect_refused(r, {"--checkpoint", "no process reads"}, "fifo");
  struct stat st {};
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

// A checkpoint already at or past --steps would train nothing and exit 0 as if it had: refused, naming
// --steps and the checkpoint's step; the checkpoint is untouched.
TEST(CliTrainContract, ResumingPastTheLastStepIsRefused) {
  Dir d;
  const std::string txt = d.file("a.txt", text_of(20)), ck = d.path("ck.safetensors");
  ASSERT_EQ(run("train " + kTiny + " --steps 3 --text " + txt + " --checkpoint " + ck).code, 0);
  const std::string before = read(ck);
  for (const char* steps : {"3", "2"}) {
    const auto r = run("train " + kTiny + " --steps " + steps + " --text " + txt + " --resume " + ck +
                       " --checkpoint " + ck);
    expect_refused(r, {"--steps", "at step 3 already"}, steps);
    EXPECT_EQ(read(ck), before);
  }
  EXPECT_EQ(run("train " + kTiny + " --steps 4 --text " + txt + " --resume " + ck).code, 0);
}
