// The real `ridge data encode` and `ridge data info`: output bytes and statistics checked against a tiny
// text whose answer is worked out here by hand; bad input exits 2 with one line and loses nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../common/tmpdir.hpp"
#include "run.hpp"
#include "core/json.hpp"

namespace {

using ridge::test::read_bytes;
using ridge::test::run;
using ridge::test::RunResult;
using ridge::test::TempDir;
using ridge::test::write_bytes;

void expect_one_line_error(const RunResult& r, const std::string& must_mention) {
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;  // exactly one line
  EXPECT_EQ(r.err.rfind("ridge: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(must_mention), std::string::npos) << r.err;
}

// "abracadabra": a 5, b 2, r 2, c 1, d 1 of 11 tokens.
double abracadabra_bits() {
  return -(5.0 / 11 * std::log2(5.0 / 11) + 2 * (2.0 / 11) * std::log2(2.0 / 11) +
           2 * (1.0 / 11) * std::log2(1.0 / 11));
}

TEST(CliData, EncodeWritesOneUint16PerByteAndInfoCountsThem) {
  TempDir dir;
  const std::string text = dir.file("t.txt"), tok = dir.file("t.u16");
  write_bytes(text, "abracadabra");
  const RunResult e = run("data encode " + text + " -o " + tok);
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("wrote 11 tokens"), std::string::npos) << e.out;
  std::string want;
  for (char c : std::string("abracadabra")) want += std::string{c, '\0'};  // little-endian uint16
  EXPECT_EQ(read_bytes(tok), want);

  const RunResult i = run("data info " + tok);
  ASSERT_EQ(i.code, 0) << i.err;
  EXPECT_NE(i.out.find("tokens    11\n"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("distinct  5 ids, largest 114"), std::string::npos) << i.out;  // 'r'
  char bits[64];
  std::snprintf(bits, sizeof bits, "%.4f bits/token", abracadabra_bits());
  EXPECT_NE(i.out.find(bits), std::string::npos) << i.out;

  const RunResult j = run("data info --json " + tok);
  ASSERT_EQ(j.code, 0) << j.err;
  const auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc.at("tokens"), 11);
  EXPECT_EQ(doc.at("bytes"), 22);
  EXPECT_EQ(doc.at("distinct"), 5);
  EXPECT_EQ(doc.at("max_token"), 114);
  EXPECT_NEAR(doc.at("entropy_bits").get<double>(), abracadabra_bits(), 1e-12);
  EXPECT_NEAR(doc.at("entropy_nats").get<double>(), abracadabra_bits() * std::log(2.0), 1e-12);
}

TEST(CliData, EncodeConcatenatesFilesAndReplacesOnlyWithForce) {
  TempDir dir;
  write_bytes(dir.file("a.txt"), "ab");
  write_bytes(dir.file("b.txt"), "\xFF\n");
  const std::string tok = dir.file("x.u16");
  write_bytes(tok, "keep");
  expect_one_line_error(run("data encode " + dir.file("a.txt") + " " + dir.file("b.txt") + " -o " + tok),
                        "exists; pass --force");
  EXPECT_EQ(read_bytes(tok), "keep");
  const RunResult r =
      run("data encode " + dir.file("a.txt") + " " + dir.file("b.txt") + " -o " + tok + " --force");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_bytes(tok), std::string("a\0b\0\xFF\0\n\0", 8));
}

TEST(CliData, BadInputIsOneLineAndLosesNothing) {
  TempDir dir;
  const std::string text = dir.file("t.txt");
  write_bytes(text, "hello");
  expect_one_line_error(run("data encode " + dir.file("absent.txt") + " -o " + dir.file("o.u16")),
                        "absent.txt");
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.u16")));
  expect_one_line_error(run("data encode " + text + " -o " + text + " --force"), "is read as TEXT");
  EXPECT_EQ(read_bytes(text), "hello");
  write_bytes(dir.file("empty.txt"), "");
  expect_one_line_error(run("data encode " + dir.file("empty.txt") + " -o " + dir.file("o.u16")), "empty");
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.u16")));
  expect_one_line_error(run("data encode " + dir.path().string() + " -o " + dir.file("o.u16")),
                        "not a regular file");
  expect_one_line_error(run("data encode " + text + " -o " + dir.file("no/dir/o.u16")), "no/dir/o.u16");
  expect_one_line_error(run("data encode " + text), "--output");

  write_bytes(dir.file("odd.u16"), std::string("\x01\x00\x02", 3));
  write_bytes(dir.file("zero.u16"), "");
  expect_one_line_error(run("data info " + dir.file("odd.u16")), "truncated: 3 bytes is not a whole number");
  expect_one_line_error(run("data info " + dir.file("zero.u16")), "empty");
  expect_one_line_error(run("data info " + dir.file("absent.u16")), "absent.u16");
  expect_one_line_error(run("data info " + dir.path().string()), "not a regular file");
  expect_one_line_error(run("data frobnicate"), "subcommand");  // as every command with subcommands
}

// A write that fails says why, from the call that failed: the reason had been read before the write
// ("cannot write 'out.bin': Success"). A device is written in place (/dev/full: ENOSPC); a regular file
// through a temporary, here past the shell's file-size limit (EFBIG, as a full disk gives ENOSPC), which
// leaves the old file as it was and no temporary.
TEST(CliData, AWriteThatFailsSaysWhy) {
  TempDir dir;
  const std::string text = dir.file("t.txt"), out = dir.file("o.u16");
  write_bytes(text, std::string(5000, 'a'));
  expect_one_line_error(
      run("data encode " + text + " -o /dev/full --force"),
      "-o/--output: write_tokens '/dev/full': cannot write '/dev/full': No space left on device");
  write_bytes(out, "keep");
  expect_one_line_error(ridge::test::run_shell("ulimit -f 1; trap '' XFSZ; " + std::string(RIDGE_BINARY) +
                                               " data encode " + text + " -o " + out + " --force"),
                        "cannot write '" + out + "': File too large");
  EXPECT_EQ(read_bytes(out), "keep");
  EXPECT_EQ(
      std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()),
      2)
      << "no temporary left";
}

}  // namespace
