// The real `ridge` binary: `ridge info` (table and JSON), RIDGE_ISA, and the one-line error contract
// (exit 2, exactly one line on stderr) for bad flags, subcommands and environment.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <algorithm>
#include <string>
#include <vector>

#include "ridge/core.hpp"
#include "run.hpp"
#include "core/json.hpp"

namespace {

using namespace ridge;
using test::run;
using test::RunResult;

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string l; std::getline(ss, l);) out.push_back(l);
  return out;
}

// The error contract: exit 2, nothing on stdout, one line on stderr that starts with "ridge: ".
void expect_one_line_error(const RunResult& r, const std::string& must_mention) {
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  const auto l = lines(r.err);
  ASSERT_EQ(l.size(), 1u) << r.err;
  EXPECT_EQ(l[0].rfind("ridge: ", 0), 0u) << l[0];
  EXPECT_NE(l[0].find(must_mention), std::string::npos) << l[0];
}

TEST(CliCore, InfoPrintsEveryLine) {
  const RunResult r = run("info");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  const auto l = lines(r.out);
  const std::vector<std::string> starts = {"cpu ",      "cpus ",      "caches ", "has ",   "lacks ",
                                           "os saves ", "isa paths ", "amx ",    "active "};
  for (const auto& s : starts) {
    bool found = false;
    for (const auto& line : l) found = found || line.rfind(s, 0) == 0;
    EXPECT_TRUE(found) << "no line starting with '" << s << "' in:\n" << r.out;
  }
  std::string paths;
  for (cpu::Isa i : cpu::supported_isas()) paths += std::string(" ") + cpu::isa_name(i);
  EXPECT_NE(r.out.find(paths), std::string::npos) << r.out;
}

TEST(CliCore, InfoJsonAgreesWithCpuInfo) {
  const RunResult r = run("info --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);  // throws (test fails) unless exactly one JSON document
  const auto& in = cpu::info();
  EXPECT_EQ(j.at("vendor"), in.vendor);
  EXPECT_EQ(j.at("brand"), in.brand);
  EXPECT_EQ(j.at("family"), in.family);
  EXPECT_EQ(j.at("model"), in.model);
  EXPECT_EQ(j.at("logical_cpus"), in.logical_cpus);
  EXPECT_EQ(j.at("caches").at("l1d_bytes"), in.caches.l1d);
  EXPECT_EQ(j.at("caches").at("l2_bytes"), in.caches.l2);
  EXPECT_EQ(j.at("caches").at("l3_bytes"), in.caches.l3);
  const auto& f = in.features;
  const auto& jf = j.at("features");
  EXPECT_EQ(jf.at("avx2"), f.avx2);
  EXPECT_EQ(jf.at("fma"), f.fma);
  EXPECT_EQ(jf.at("avx512f"), f.avx512f);
  EXPECT_EQ(jf.at("avx512bw"), f.avx512bw);
  EXPECT_EQ(jf.at("avx512_bf16"), f.avx512_bf16);
  EXPECT_EQ(jf.at("avx512_vnni"), f.avx512_vnni);
  EXPECT_EQ(jf.at("amx_tile"), f.amx_tile);
  std::vector<std::string> paths;
  for (cpu::Isa i : cpu::supported_isas()) paths.push_back(cpu::isa_name(i));
  EXPECT_EQ(j.at("isa_paths").get<std::vector<std::string>>(), paths);
  // Every path is either here or named as missing; the amx line says on, or off and why.
  const auto missing = j.at("isa_paths_missing").get<std::vector<std::string>>();
  EXPECT_EQ(paths.size() + missing.size(), 5u);
  const bool amx = cpu::supported(cpu::Isa::amx);
  EXPECT_EQ(std::find(missing.begin(), missing.end(), "amx") == missing.end(), amx);
  EXPECT_EQ(j.at("amx").get<std::string>().rfind(amx ? "on" : "off: ", 0), 0u) << j.at("amx");
  EXPECT_EQ(j.at("best_isa"), cpu::isa_name(cpu::best_isa()));
  EXPECT_EQ(j.at("active_isa"), cpu::isa_name(cpu::active_isa()));  // same environment as this process
}

TEST(CliCore, RidgeIsaForcesALowerPath) {
  for (cpu::Isa i : cpu::supported_isas()) {
    const RunResult r = run("info --json", std::string("RIDGE_ISA=") + cpu::isa_name(i));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out).at("active_isa"), cpu::isa_name(i));
  }
  const RunResult r = run("info", "RIDGE_ISA=scalar");
  EXPECT_NE(r.out.find("active     scalar"), std::string::npos) << r.out;
}

// RIDGE_ISA below amx keeps the process off the tiles: no grant asked, no tile instruction, no notice,
// and `ridge info` says why amx is off. Where the amx path runs, that is the whole check; elsewhere the
// one thing that holds is the quiet stderr.
TEST(CliCore, RidgeIsaBelowAmxKeepsTheProcessOffTheTiles) {
  if (!cpu::supported(cpu::Isa::avx512bf16)) GTEST_SKIP() << "no avx512bf16 path here to ask for";
  const RunResult r = run("info --json", "RIDGE_ISA=avx512bf16");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const auto j = nlohmann::json::parse(r.out);
  for (const auto& p : j.at("isa_paths")) EXPECT_NE(p, "amx");
  if (cpu::supported(cpu::Isa::amx)) {
    EXPECT_EQ(j.at("amx").get<std::string>(),
              "off: the CPU has AMX, but RIDGE_ISA=avx512bf16 keeps this process off the tiles (Linux is not "
              "asked for the tile data and no tile instruction runs)");
  }
}

TEST(CliCore, BadRidgeIsaIsOneLineNamingTheVariable) {
  expect_one_line_error(run("info", "RIDGE_ISA=bogus"), "RIDGE_ISA");
  expect_one_line_error(run("info", "RIDGE_ISA=AVX2"), "RIDGE_ISA");
  for (cpu::Isa i : {cpu::Isa::avx2, cpu::Isa::avx512, cpu::Isa::avx512bf16, cpu::Isa::amx})
    if (!cpu::supported(i))
      expect_one_line_error(run("info", std::string("RIDGE_ISA=") + cpu::isa_name(i)), "RIDGE_ISA");
}

TEST(CliCore, BadAmxEmulateIsOneLineNamingTheVariable) {
  expect_one_line_error(run("info", "RIDGE_AMX_EMULATE=yes"), "RIDGE_AMX_EMULATE");
}

TEST(CliCore, BadFlagIsOneLine) {
  expect_one_line_error(run("info --bogus"), "--bogus");
}

// An unknown subcommand is named, with the accepted ones; no subcommand at all says one is wanted.
TEST(CliCore, UnknownSubcommandIsOneLine) {
  expect_one_line_error(run("frobnicate"), "'frobnicate' is not a ridge subcommand");
  // Every registered command is listed; checked one by one so that adding a command breaks nothing here.
  for (const char* name : {"accepted: bench, ", " data,", " hw,", " info,", " roofline"})
    expect_one_line_error(run("frobnicate"), name);
  expect_one_line_error(run(""), "subcommand");
}

TEST(CliCore, HelpAndVersionExitZero) {
  for (const char* args : {"--help", "info --help", "--version"}) {
    const RunResult r = run(args);
    EXPECT_EQ(r.code, 0) << args << ": " << r.err;
    EXPECT_FALSE(r.out.empty()) << args;
  }
}

}  // namespace
