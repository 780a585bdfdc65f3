// A fuzz test of the one-line error contract: random argument vectors built from ridge's real
// subcommands and flags with hostile values (negative, zero, huge, nan, empty, hexadecimal, 1e400,
// unicode, very long, FIFOs, directories, /dev/zero, missing files) and mutated chip, shapes,
// snapshot, results and grid files (byte flips, truncation, deep nesting, wrong types, huge numbers),
// and `ridge train` / `ridge data` on texts and token files, with outputs that may name an input.
// Every run must end with exit 0 or 2, never 1, a signal or a timeout; exit 2 must come with exactly
// one line on stderr; the input files must be unchanged. Bounded in count and wall time; seeded:
// RIDGE_FUZZ_SEED=N replays a run, RIDGE_FUZZ_RUNS=N sets the count (RIDGE_TEST_SMALL=1: fewer),
// RIDGE_FUZZ_BINARY=PATH fuzzes another ridge binary.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "spawn.hpp"
#include "ridge/build_paths.h"  // RIDGE_SOURCE_DIR, RIDGE_BINARY (generated)

namespace {

namespace fs = std::filesystem;

using ridge::test::env_or;
using ridge::test::Outcome;
using ridge::test::run_ridge;
using ridge::test::slurp;
using ridge::test::spit;

class Fuzzer {
 public:
  Fuzzer(uint64_t seed, fs::path dir) : rng_(seed), dir_(std::move(dir)) {}

  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  template <typename T>
  const T& one(const std::vector<T>& v) {
    return v[pick(v.size())];
  }

  // Values for any flag: the hostile list, sometimes a plausible one.
  std::string value(const std::vector<std::string>& plausible) {
    static const std::vector<std::string> hostile = {
        "-1",
        "0",
        "1",
        "99999999999999999999",
        "nan",
        "inf",
        "-inf",
        "",
        "0x10",
        "1e400",
        "1e-400",
        "-0",
        "\xc3\xbc\xc3\xb1\xc3\xaf\xc3\xa7\xc3\xb8\xc3\xb0\xc3\xa9",
        std::string(5000, '7'),
        " 4",
        "4k",
        "1,2",
        "=",
        "--json",
        "2^62",
        "5e-324",
        "1.5"};
    return chance(0.5) && !plausible.empty() ? one(plausible) : one(hostile);
  }

  // A path to an input: a valid or mutated file, or something that is not a file.
  std::string file(const std::string& kind) {
    const double r = std::uniform_real_distribution<double>(0, 1)(rng_);
    if (r < 0.25) return (dir_ / ("base." + kind)).string();
    if (r < 0.75) return mutated(kind);
    static const std::vector<std::string> odd = {"fifo", "a-dir",     "/dev/zero", "missing.json",
                                                 "",     "/dev/null", "/",         "deep.json"};
    return one(odd);
  }

  std::string out_path() { return (dir_ / "out" / ("o" + std::to_string(counter_++))).string(); }

  // A copy of base.KIND with one mutation, written under the temp folder.
  std::string mutated(const std::string& kind) {
    std::string s = slurp(dir_ / ("base." + kind));
    switch (pick(7)) {
      case 0:  // flip a byte
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1 << pick(8));
        break;
      case 1:  // truncate
        s.resize(pick(s.size() + 1));
        break;
      case 2: {  // nest the whole document deep
        const size_t d = chance(0.5) ? 300 : 20000;
        s = std::string(d, '[') + s + std::string(d, ']');
        break;
      }
      case 3:
      case 4:
      case 5: {  // replace one number or string with a hostile JSON value
        static const std::vector<std::string> vals = {"1e400",
                                                      "-1",
                                                      "0",
                                                      "5e-324",
                                                      "18446744073709551615",
                                                      "\"text\"",
                                                      "null",
                                                      "[]",
                                                      "{}",
                                                      "true",
                                                      "-9223372036854775808",
                                                      "1e300",
                                                      "4611686018427387904",
                                                      "\"\"",
                                                      "[[[[1]]]]"};
        std::vector<size_t> spots;
        for (size_t i = 0; i < s.size(); ++i) {
          const bool starts_number =
              (s[i] >= '0' && s[i] <= '9') &&
              (i == 0 || s[i - 1] == ' ' || s[i - 1] == ':' || s[i - 1] == '[' || s[i - 1] == ',');
          if (starts_number || (s[i] == '"' && i > 0 && (s[i - 1] == ' ' || s[i - 1] == ':')))
            spots.push_back(i);
        }
        if (spots.empty()) break;
        const size_t at = one(spots);
        size_t end = at + 1;
        if (s[at] == '"') {
          while (end < s.size() && s[end] != '"') ++end;
          ++end;
        } else {
          while (end < s.size() && (std::isdigit(static_cast<unsigned char>(s[end])) || s[end] == '.' ||
                                    s[end] == 'e' || s[end] == '-' || s[end] == '+'))
            ++end;
        }
        s = s.substr(0, at) + one(vals) + s.substr(std::min(end, s.size()));
        break;
      }
      default: {  // duplicate a line (results, snapshot events) or drop one
        std::vector<std::string> lines;
        std::stringstream ss(s);
        for (std::string l; std::getline(ss, l);) lines.push_back(l);
        if (lines.empty()) break;
        const size_t i = pick(lines.size());
        if (chance(0.5))
          lines.insert(lines.begin() + static_cast<long>(i), lines[i]);
        else
          lines.erase(lines.begin() + static_cast<long>(i));
        s.clear();
        for (const auto& l : lines) s += l + "\n";
      }
    }
    const fs::path p = dir_ / ("m" + std::to_string(counter_++) + "." + kind);
    spit(p, s);
    return p.string();
  }

  // One argument vector from the real subcommands and flags.
  std::vector<std::string> args() {
    using V = std::vector<std::string>;
    const V chips = {"h100", "a100", "tpu-v5e", "this", "bogus"};
    const V dtypes = {"bf16", "fp32", "fp8_e4m3", "int8", "fp16"};
    const V small = {"1", "7", "64", "128"};
    auto chip = [&] { return chance(0.5) ? one(chips) : file("chip.json"); };
    std::vector<std::string> a;
    switch (pick(14)) {
      case 0:
        a = {"hw", "show", chip()};
        if (chance(0.5)) a.push_back("--json");
        break;
      case 1:
        a = {"memory", "show", file("snapshot.json")};
        if (chance(0.5)) a.push_back("--json");
        if (chance(0.3)) a.insert(a.end(), {"--top", value({"3"})});
        break;
      case 2: {
        static const V ops = {"matmul", "per-example", "batched-matmul", "split-matmul", "critical-batch"};
        a = {"roofline", one(ops)};
        for (const char* f : {"--d", "--f", "--chips"})
          if (chance(0.4)) a.insert(a.end(), {f, value({"4096", "2"})});
        if (chance(0.4) && a[1] != "critical-batch") a.insert(a.end(), {"--b", value({"1", "4096"})});
        if (chance(0.4)) a.insert(a.end(), {"--dtype", value(dtypes)});
        if (chance(0.3)) a.insert(a.end(), {"--hw", chip()});
        if (chance(0.3)) a.insert(a.end(), {"--level", value({"hbm", "l2"})});
        if (chance(0.3)) a.insert(a.end(), {"--link", value({"intra_node", "inter_node"})});
        if (chance(0.5)) a.push_back("--json");
        break;
      }
      case 3: {
        static const V ops = {"allreduce", "allgather", "reducescatter", "send"};
        a = {"roofline", one(ops), "--bytes", value({"1GiB", "64KiB"}), "--chips", value({"8"})};
        if (chance(0.3)) a.insert(a.end(), {"--hw", chip()});
        break;
      }
      case 4:
        a = {"roofline",   "attention",   "--seq",  value({"1024"}),
             "--head-dim", value({"64"}), "--impl", value({"naive", "flash"})};
        if (chance(0.3)) a.insert(a.end(), {"--batch", value({"2"})});
        if (chance(0.3)) a.push_back("--causal");
        break;
      case 5:
        a = {"roofline", "fp8-gemm", "--m", value({"64"}), "--n", value({"128"}), "--k", value({"256"})};
        break;
      case 6:
        a = {"bench",   "stream",     "--quick",  "--no-progress", "--set", "n=" + value({"4k", "1024"}),
             "--iters", value({"1"}), "--warmup", value({"0"})};
        if (chance(0.3)) a.insert(a.end(), {"--threads", value({"1"})});
        if (chance(0.3)) a.insert(a.end(), {"--grid-file", file("grid.json")});
        if (chance(0.2)) a.insert(a.end(), {"--memory", out_path(), "--memory-entries", value({"100"})});
        if (chance(0.2)) a.insert(a.end(), {"--min-time", value({"0"}), "--max-time", value({"0.01"})});
        if (chance(0.3)) a.push_back("--json");
        break;
      case 7:
        a = {"bench",
             "gemm-dense",
             "--no-progress",
             "--iters",
             "1",
             "--warmup",
             "0",
             "--set",
             "m=" + one(small),
             "--set",
             "n=" + one(small),
             "--set",
             "k=" + value(small),
             "--set",
             "peer=" + value({"0", "false", "off"}),
             "--set",
             "dtype=" + value({"fp32", "bf16"})};
        break;
      case 8:
        a = {"bench",    "gemm",
             "--quick",  "--no-progress",
             "--iters",  "1",
             "--warmup", "0",
             "--shapes", file("shapes.json"),
             "--set",    "peer=0",
             "--dtype",  value({"fp32", "bf16", "fp8", "fp32,bf16"})};
        break;
      case 9:
        a = {"report",       "--this", chip(),  "--hw",    chance(0.5) ? one(chips) : file("chip.json"),
             "--no-measure", "--json", "--out", out_path()};
        if (chance(0.3)) a.insert(a.end(), {"--results", file("results.jsonl")});
        break;
      case 10:
        a = {"roofline",           "plot",  "--hw",     chance(0.5) ? one(chips) : file("chip.json"),
             "--no-shapes",        "--out", out_path(), "--results",
             file("results.jsonl")};
        break;
      case 12: {  // train: a tiny model, hostile numbers, outputs that may name an input
        a = {"train",           "--d-model", "32",        "--layers", "1",       "--heads", "2",
             "--d-ff",          "48",        "--context", "16",       "--batch", "2",       "--steps",
             value({"2", "3"}), "--threads", "1"};
        const bool data = chance(0.5);
        const std::string input =
            data ? file("tok") : (chance(0.8) ? (dir_ / "base.txt").string() : file("txt"));
        a.insert(a.end(), {data ? "--data" : "--text", input});
        static const V numbers = {"--d-model", "--d-ff",      "--layers", "--heads",        "--vocab",
                                  "--context", "--batch",     "--lr",     "--lr-min",       "--warmup",
                                  "--beta1",   "--beta2",     "--eps",    "--weight-decay", "--clip",
                                  "--seed",    "--log-every", "--threads"};
        for (int n = 0, k = static_cast<int>(pick(3)); n < k; ++n)
          a.insert(a.end(), {one(numbers), value({"1", "2", "16", "0.5", "1e-3"})});
        // An output: a fresh path, or the input itself (which must then stay byte-identical).
        static const V outputs = {"--checkpoint", "--trace", "--memory"};
        if (chance(0.6)) a.insert(a.end(), {one(outputs), chance(0.5) ? out_path() : input});
        if (chance(0.2)) a.insert(a.end(), {"--save-every", value({"1"})});
        if (chance(0.2)) a.insert(a.end(), {"--precision", value({"bf16", "fp16", "fp32"})});
        if (chance(0.3)) a.push_back("--json");
        break;
      }
      case 13:
        if (chance(0.5)) {
          a = {"data", "info", file("tok")};
          if (chance(0.5)) a.push_back("--json");
        } else {
          const std::string in = chance(0.7) ? (dir_ / "base.txt").string() : file("txt");
          a = {"data", "encode", in, "-o", chance(0.7) ? out_path() : in};
          if (chance(0.5)) a.push_back("--force");
        }
        break;
      default: {
        static const V words = {"bogus",  "bench", "roofline", "memory", "hw",  "probe",
                                "--help", "",      "-x",       "train",  "data"};
        a = {one(words), one(words)};
        if (chance(0.5)) a.push_back(value({}));
      }
    }
    return a;
  }

 private:
  std::mt19937_64 rng_;
  fs::path dir_;
  size_t counter_ = 0;
};

std::string show(const std::vector<std::string>& a) {
  std::string s = "ridge";
  for (const auto& x : a)
    s += " '" + (x.size() > 60 ? x.substr(0, 60) + "...(" + std::to_string(x.size()) + ")" : x) + "'";
  return s;
}

// The inputs a test leaves in the source tree that ridge reads: none may change.
std::map<std::string, std::string> tree_state() {
  std::map<std::string, std::string> m;
  for (const char* d : {"hardware", "bench/shapes", "tools"}) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fs::path(RIDGE_SOURCE_DIR) / d, ec))
      if (e.is_regular_file()) m[e.path().string()] = slurp(e.path());
  }
  return m;
}

TEST(CliFuzz, HostileArgumentsAndFilesKeepTheContract) {
  // A developer's run draws a new seed each time (and prints it), so the suite keeps finding new cases;
  // CI (CI set, as .ci/run runs) takes a fixed one, so whether a change lands never depends on luck.
  const std::string fallback = env_or("CI", "").empty() ? std::to_string(std::random_device{}()) : "20261122";
  const uint64_t seed = std::stoull(env_or("RIDGE_FUZZ_SEED", fallback));
  const bool small = env_or("RIDGE_TEST_SMALL", "") == "1";
  const int runs = std::stoi(env_or("RIDGE_FUZZ_RUNS", small ? "60" : "300"));
  const double budget_s = small ? 40 : 90;  // a bound on the test's time, never a pass criterion
  std::cout << "fuzz seed " << seed << " (replay: RIDGE_FUZZ_SEED=" << seed << "), " << runs << " runs\n";
  RecordProperty("seed", std::to_string(seed));

  const fs::path dir = fs::temp_directory_path() / ("ridge_fuzz_" + std::to_string(::getpid()));
  fs::create_directories(dir / "out");
  fs::create_directories(dir / "home");
  fs::create_directories(dir / "a-dir");
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  spit(dir / "base.chip.json", slurp(fs::path(RIDGE_SOURCE_DIR) / "hardware" / "h100.json"));
  spit(dir / "base.shapes.json",
       R"({"dense": [{"m": 8, "n": 16, "k": 32}], "decode": [{"m": 1, "n": 16, "k": 64}]})"
       "\n");
  spit(dir / "base.grid.json", R"({"n": ["4k", "8k"], "kernel": "copy"})"
                               "\n");
  spit(dir / "base.results.jsonl",
       R"({"benchmark": "gemm", "dtype": "bf16", "case": {"m": 64}, "gflops": 120.5, "intensity": 30.2})"
       "\n"
       R"({"benchmark": "stream", "case": {"n": "4k"}, "gbps": 20.1})"
       "\n"
       R"({"benchmark": "gemm", "dtype": "fp32", "gflops": 50, "flops": 1000000, "bytes": 4096})"
       "\n");
  spit(dir / "base.snapshot.json",
       R"({"format": "ridge-memory-snapshot", "version": 1, "duration_us": 120.5, "dropped": 0,)"
       R"( "peak_rss_bytes": 1048576, "tags": ["weights", "acts"],)"
       R"( "baseline": [{"t_us": 0, "action": "alloc", "address": "0x1000", "bytes": 64, "tag": "weights"}],)"
       R"( "events": [)"
       "\n"
       R"({"t_us": 1.5, "action": "alloc", "address": "0x2000", "bytes": 4096, "tag": "acts", "thread": 7},)"
       "\n"
       R"({"t_us": 2.5, "action": "alloc", "address": "0x3000", "bytes": 100, "tag": "weights"},)"
       "\n"
       R"({"t_us": 3.5, "action": "free", "address": "0x2000", "bytes": 4096, "tag": "acts"}]})"
       "\n");
  spit(dir / "deep.json", std::string(60000, '{') + std::string(60000, '}'));
  {
    std::string text;
    for (int i = 0; i < 30; ++i) text += "the quick brown fox jumps over the lazy dog. ";
    spit(dir / "base.txt", text);
    std::string tok;
    for (unsigned char c : text) tok += std::string{static_cast<char>(c), '\0'};
    spit(dir / "base.tok", tok);
  }

  Fuzzer fz(seed, dir);
  const auto before = tree_state();
  const auto t0 = std::chrono::steady_clock::now();
  int done = 0, failures = 0;
  std::map<int, int> codes;
  for (int i = 0; i < runs; ++i) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > budget_s) break;
    const auto a = fz.args();
    // Files the run is given as input: none may change.
    std::map<std::string, std::string> inputs;
    for (const auto& x : a)
      if (x.rfind(dir.string(), 0) == 0 && fs::is_regular_file(x)) inputs[x] = slurp(x);
    const Outcome o = run_ridge(a, dir, 20);
    ++done;
    ++codes[o.timed_out ? -2 : o.signal ? -100 - o.signal : o.code];
    std::string why;
    if (o.timed_out)
      why = "timed out after 20 s";
    else if (o.signal)
      why = "killed by signal " + std::to_string(o.signal);
    else if (o.code != 0 && o.code != 2)
      why = "exit " + std::to_string(o.code);
    else if (o.code == 2) {
      const auto nl = o.err.find('\n');
      if (o.err.empty() || nl != o.err.size() - 1)
        why = "exit 2 without exactly one line on stderr";
      else if (o.err.rfind("ridge: ", 0) != 0)
        why = "exit 2 with a line not starting 'ridge: '";
    }
    for (const auto& [p, content] : inputs)
      if (slurp(p) != content) why += (why.empty() ? "" : "; ") + std::string("changed its input ") + p;
    if (!why.empty()) {
      ++failures;
      ADD_FAILURE() << why << " (seed " << seed << ", run " << i << "):\n  " << show(a)
                    << "\n  stderr: " << o.err;
      if (failures >= 10) break;
    }
  }
  EXPECT_TRUE(tree_state() == before) << "a run changed a file in the source tree (seed " << seed << ")";
  std::cout << done << " runs:";
  for (const auto& [c, n] : codes) std::cout << " exit " << c << " x" << n;
  std::cout << "\n";
  EXPECT_GE(done, std::min(runs, 20)) << "the time budget ended the test before it ran enough cases";
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
