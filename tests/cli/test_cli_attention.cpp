// `ridge bench attention` through the real binary: the row schema in JSON lines, the math-path
// peer, the PyTorch peer's absence (or presence) said in the row, one-line errors with exit 2.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "run.hpp"
#include "core/json.hpp"

namespace {

using ridge::test::run;
using ridge::test::RunResult;

TEST(CliAttention, RowsCarryCaseFlopsPeersAndMemory) {
  const RunResult r =
      run("bench attention --json --no-progress --iters 1 --warmup 0 --set seq=64,33 --set head_dim=16 "
          "--set causal=true --set pass=forward,backward,forward+backward --set heads=2 --set kv_heads=1 "
          "--no-torch");
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    ++rows;
    EXPECT_EQ(j.at("benchmark"), "attention");
    const auto& c = j.at("case");
    for (const char* key : {"batch", "heads", "kv_heads", "seq", "head_dim", "causal", "pass"})
      EXPECT_TRUE(c.contains(key)) << key;
    EXPECT_EQ(c.at("heads"), 2);
    EXPECT_EQ(c.at("kv_heads"), 1);
    EXPECT_EQ(j.at("dtype"), "fp32");
    EXPECT_GT(j.at("median_ms").get<double>(), 0.0);
    // Forward 4 n^2 d per head, halved when causal; backward 2.5x.
    const double n = c.at("seq").get<double>();
    const double fwd = 4.0 * 2 * n * n * 16 / 2;
    const std::string pass = c.at("pass");
    const double want = pass == "forward" ? fwd : pass == "backward" ? 2.5 * fwd : 3.5 * fwd;
    EXPECT_DOUBLE_EQ(j.at("flops").get<double>(), want);
    EXPECT_GE(j.at("peak_extra_bytes").get<double>(), 0.0);
    ASSERT_TRUE(j.contains("peers"));
    bool math = false;
    for (const auto& peer : j.at("peers"))
      if (peer.at("name").get<std::string>().rfind("math path", 0) == 0) math = true;
    EXPECT_TRUE(math);
    const std::string note = j.at("note");
    // Either PyTorch was measured (a peer) or the note says why not.
    bool torch_peer = false;
    for (const auto& peer : j.at("peers"))
      if (peer.at("name") == "pytorch sdpa") torch_peer = true;
    EXPECT_TRUE(torch_peer || note.find("PyTorch") != std::string::npos) << note;
  }
  EXPECT_EQ(rows, 6);
}

TEST(CliAttention, BadInputIsOneLineExit2) {
  for (const char* args :
       {"bench attention --set dtype=fp8 --no-torch", "bench attention --set causal=maybe --no-torch",
        "bench attention --set pass=sideways --no-torch", "bench attention --sweep nope --no-torch",
        "bench attention --set heads=3 --set kv_heads=2 --set seq=16 --set head_dim=16 --no-torch",
        "bench attention --set head_dim=8 --set seq=16 --no-torch --no-math"}) {
    SCOPED_TRACE(args);
    const RunResult r = run(args);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err.rfind("ridge: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
