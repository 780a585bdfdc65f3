// Benchmark rows read back as measured points: from a results file (errors about the argument
// `path`, naming the file and line) and from rows in memory, with the same labels and intensities.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "bench/result.hpp"
#include "ridge/core/error.hpp"
#include "report/report.hpp"

namespace {

namespace fs = std::filesystem;
namespace rp = ridge::report;

std::string write_file(const std::string& name, const std::string& text) {
  const auto dir = fs::temp_directory_path() / ("ridge_test_report_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto p = dir / name;
  std::ofstream(p) << text;
  return p.string();
}

ridge::bench::Row gemm_row() {
  ridge::bench::Row r;
  r.benchmark = "gemm";
  r.case_ = {{"m", 64}, {"n", 128}};
  r.dtype = "bf16";
  r.flops = 2e6;
  r.bytes = 1e5;
  r.median_ms = 0.5;
  return r;
}

TEST(MeasuredPoints, RowsInMemoryAndTheirJsonLinesGiveTheSamePoints) {
  ridge::bench::Row bandwidth_only;
  bandwidth_only.benchmark = "stream";
  bandwidth_only.bytes = 1e6;
  bandwidth_only.median_ms = 1;
  const std::vector<ridge::bench::Row> rows = {gemm_row(), bandwidth_only};
  const auto live = rp::measured_points(rows);
  const auto file = rp::read_measured(write_file("rows.jsonl", ridge::bench::to_json_lines(rows)));
  ASSERT_EQ(live.size(), 1u);  // the bandwidth row has no place on a FLOP/s axis
  ASSERT_EQ(file.size(), 1u);
  EXPECT_EQ(live[0].label, "gemm m=64 n=128");
  EXPECT_EQ(live[0].label, file[0].label);
  EXPECT_DOUBLE_EQ(live[0].intensity, 20.0);  // 2e6 FLOPs / 1e5 bytes
  EXPECT_DOUBLE_EQ(live[0].gflops, 4.0);      // 2e6 FLOPs in 0.5 ms
  EXPECT_DOUBLE_EQ(file[0].intensity, live[0].intensity);
  EXPECT_DOUBLE_EQ(file[0].gflops, live[0].gflops);
  EXPECT_DOUBLE_EQ(file[0].working_set, 1e5);
}

TEST(MeasuredPoints, ErrorsAreAboutThePathArgumentAndNameTheLine) {
  auto error_of = [](const std::string& path) -> ridge::Error {
    try {
      rp::read_measured(path);
    } catch (const ridge::Error& e) {
      return e;
    }
    return ridge::Error("(no error)");
  };
  const auto bad_type = error_of(write_file("type.jsonl", "\n{\"gflops\": \"fast\"}\n"));
  EXPECT_EQ(bad_type.argument(), "path");
  EXPECT_NE(std::string(bad_type.what()).find("type.jsonl line 2"), std::string::npos) << bad_type.what();
  EXPECT_NE(std::string(bad_type.what()).find("'gflops'"), std::string::npos) << bad_type.what();
  const auto not_json = error_of(write_file("bad.jsonl", "{\"gflops\": 1, \"intensity\": 2}\nnope\n"));
  EXPECT_EQ(not_json.argument(), "path");
  EXPECT_NE(std::string(not_json.what()).find("bad.jsonl line 2"), std::string::npos) << not_json.what();
  const auto no_intensity = error_of(write_file("flat.jsonl", "{\"gflops\": 3}\n"));
  EXPECT_EQ(no_intensity.argument(), "path");
  EXPECT_NE(std::string(no_intensity.what()).find("intensity"), std::string::npos);
  EXPECT_EQ(error_of(write_file("empty.jsonl", "\n\n")).argument(), "path");
  EXPECT_EQ(error_of("/nonexistent/rows.jsonl").argument(), "path");
  // The CLI's flag in place of the argument: the rest of the message is the library's.
  EXPECT_EQ(std::string(bad_type.renamed("--results").what()).rfind("--results: ", 0), 0u);
}

TEST(MeasuredPoints, PlotOutputErrorsAreAboutTheOutArgument) {
  try {
    rp::check_plot_outputs("x", {"x.png"});
    FAIL() << "no error";
  } catch (const ridge::Error& e) {
    EXPECT_EQ(e.argument(), "out");
  }
  try {
    rp::plot_outputs("");
    FAIL() << "no error";
  } catch (const ridge::Error& e) {
    EXPECT_EQ(e.argument(), "out");
  }
  EXPECT_EQ(rp::plot_outputs("a/b.png"), (std::vector<std::string>{"a/b.png", "a/b.svg", "a/b.json"}));
}

}  // namespace
