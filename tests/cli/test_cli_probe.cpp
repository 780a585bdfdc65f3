// `ridge probe` through the real binary: bad flags are one-line errors with exit 2, and a tiny
// run writes a chip file and prints it as one JSON document.
#include <unistd.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "run.hpp"
#include "core/json.hpp"

namespace {

using ridge::test::RunResult;

// One RIDGE_HOME folder per test process: ctest runs tests in parallel, each as its own process.
std::filesystem::path ridge_home() {
  const auto dir = std::filesystem::temp_directory_path() / ("ridge_cli_probe." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

RunResult run_ridge(const std::string& args) {
  return ridge::test::run(args, "RIDGE_HOME=" + ridge_home().string());
}

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(CliProbe, BadFlagsAreOneLineErrors) {
  for (const char* args :
       {"--bogus", "--threads 0", "--threads two", "--threads 100000", "--trials 0", "--max-bytes -5",
        "--max-bytes lots", "--max-seconds 0", "-o /proc/ridge-no-such-dir/x.json", "-o /tmp"}) {
    SCOPED_TRACE(args);
    const RunResult r = run_ridge(std::string("probe ") + args);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_EQ(r.err.rfind("ridge: ", 0), 0u) << r.err;
    EXPECT_TRUE(r.out.empty());
  }
}

// The library's errors about the chip file name its argument `path`; the CLI names the flag it was given as.
TEST(CliProbe, OutputErrorsNameTheFlag) {
  const RunResult folder = run_ridge("probe -o /tmp");
  EXPECT_EQ(folder.code, 2);
  EXPECT_EQ(folder.err, "ridge: -o: '/tmp' is a folder (expected a file name)\n");
  const RunResult missing = run_ridge("probe -o /proc/ridge-no-such-dir/x.json");
  EXPECT_EQ(missing.code, 2);
  EXPECT_EQ(missing.err,
            "ridge: -o: cannot create folder '/proc/ridge-no-such-dir' for '/proc/ridge-no-such-dir/x.json': "
            "No such file or directory\n");
}

TEST(CliProbe, TinyRunWritesTheChipFileAndPrintsJson) {
  const auto path = (ridge_home() / "out" / "chip.json").string();
  std::filesystem::remove(path);
  const RunResult r =
      run_ridge("probe --quick --trials 1 --max-seconds 2 --max-bytes 512KiB --json -o " + path);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["id"], "this");
  EXPECT_EQ(j["kind"], "cpu");
  EXPECT_TRUE(j["peak_flops"].contains("fp32"));
  EXPECT_NE(r.err.find(path), std::string::npos);
  // Every dtype's peak is its fastest measured instruction (AMX's tiles where the CPU has them), and
  // its source names that instruction; measured.amx says whether the tiles were measured.
  const bool amx = j["measured"]["amx"].get<std::string>().rfind("measured: ", 0) == 0;
  if (!amx) {
    EXPECT_EQ(j["measured"]["amx"].get<std::string>().rfind("not on this machine: ", 0), 0u);
  }
  for (const auto& [dtype, peak] : j["peak_flops"].items()) {
    const nlohmann::json* fastest = nullptr;
    for (const auto& p : j["measured"]["peaks"]) {
      const bool faster = !fastest || p["all_threads"]["median"] > (*fastest)["all_threads"]["median"];
      if (p["dtype"] == dtype && faster) fastest = &p;
    }
    ASSERT_NE(fastest, nullptr) << dtype;
    EXPECT_EQ(peak["value"], (*fastest)["all_threads"]["median"]) << dtype;
    EXPECT_TRUE((*fastest)["roof"].get<bool>()) << dtype;
    const auto instruction = (*fastest)["instruction"].get<std::string>();
    EXPECT_NE(peak["source"].get<std::string>().find("(" + instruction + ", "), std::string::npos) << dtype;
  }
  int tiles = 0;
  for (const auto& p : j["measured"]["peaks"]) tiles += p["isa"] == "amx";
  EXPECT_EQ(tiles, amx ? 2 : 0);
  std::ifstream f(path);
  ASSERT_TRUE(f.good());
  EXPECT_EQ(nlohmann::json::parse(f), j);
}

TEST(CliProbe, TableSaysWhereItWrote) {
  const RunResult r = run_ridge("probe --quick --trials 1 --max-seconds 2 --max-bytes 256KiB --threads 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("fp32"), std::string::npos);
  EXPECT_NE(r.out.find("GFLOP/s"), std::string::npos);
  EXPECT_NE(r.out.find("wrote "), std::string::npos);
  EXPECT_NE(r.out.find("this.json"), std::string::npos);
  // The AMX line: its figures are in the table, or it says why there are none.
  const bool amx = r.out.find("amx        measured: ") != std::string::npos;
  if (amx) {
    EXPECT_NE(r.out.find("tdpbf16ps tmm"), std::string::npos);
    EXPECT_NE(r.out.find("tdpbssd tmm"), std::string::npos);
  } else {
    EXPECT_NE(r.out.find("amx        not on this machine: "), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("tdpbf16ps"), std::string::npos);
  }
}

}  // namespace
