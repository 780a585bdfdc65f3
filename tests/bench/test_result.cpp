#include <gtest/gtest.h>

#include "bench/registry.hpp"
#include "bench/result.hpp"
#include "ridge/core/error.hpp"
#include "core/json.hpp"

namespace {

using namespace ridge::bench;

Row sample_row() {
  Row r;
  r.benchmark = "gemm";
  r.case_ = {{"m", 512}, {"n", 256}};
  r.dtype = "fp32";
  r.threads = 2;
  r.isa = "avx512";
  r.machine = "test cpu";
  r.median_ms = 2.0;
  r.min_ms = 1.5;
  r.flops = 4e9;   // 2 TFLOP per s at 2 ms -> 2000 GFLOP/s
  r.bytes = 1e8;   // 50 GB/s at 2 ms
  r.add_peer("openblas", 3.0);
  r.extra["cv"] = 0.01;
  r.note = "a, \"quoted\" note";
  return r;
}

TEST(Row, JsonHasTheSharedSchema) {
  const auto j = sample_row().to_json();
  for (const char* k : {"benchmark", "case", "dtype", "threads", "isa", "median_ms", "min_ms", "gflops", "gbps",
                        "peers", "machine"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_DOUBLE_EQ(j["gflops"].get<double>(), 2000.0);
  EXPECT_DOUBLE_EQ(j["gbps"].get<double>(), 50.0);
  EXPECT_EQ(j["peers"][0]["name"], "openblas");
  EXPECT_DOUBLE_EQ(j["peers"][0]["speedup"].get<double>(), 1.5);  // peer 3 ms / ridge 2 ms
  EXPECT_EQ(j["case"]["m"], 512);
  EXPECT_DOUBLE_EQ(j["cv"].get<double>(), 0.01);  // extras are top-level fields
  EXPECT_FALSE(j.contains("bound_gflops"));       // no bound was filled in
}

TEST(Row, UndefinedFlopsAndBytesAreLeftOut) {
  Row r;
  r.median_ms = 1;
  const auto j = r.to_json();
  EXPECT_FALSE(j.contains("gflops"));
  EXPECT_FALSE(j.contains("gbps"));
}

TEST(Row, JsonRoundTrips) {
  const Row a = sample_row();
  const Row b = Row::from_json(a.to_json());
  EXPECT_EQ(b.to_json(), a.to_json());
  EXPECT_THROW(Row::from_json(nlohmann::json::array()), ridge::Error);
}

TEST(Printers, CsvQuotesAndFlattens) {
  const std::string csv = to_csv({sample_row()});
  const auto nl = csv.find('\n');
  const std::string header = csv.substr(0, nl);
  EXPECT_NE(header.find("case.m"), std::string::npos);
  EXPECT_NE(header.find("peer.openblas.speedup"), std::string::npos);
  EXPECT_NE(csv.find("\"a, \"\"quoted\"\" note\""), std::string::npos);
  // Header and row have the same number of fields (quoted commas excluded).
  auto fields = [](const std::string& line) {
    int n = 1;
    bool q = false;
    for (char c : line) {
      if (c == '"') q = !q;
      if (c == ',' && !q) ++n;
    }
    return n;
  };
  const std::string row = csv.substr(nl + 1, csv.find('\n', nl + 1) - nl - 1);
  EXPECT_EQ(fields(header), fields(row));
}

TEST(Printers, TableShowsUnitsAndPeers) {
  const std::string t = to_table({sample_row()});
  EXPECT_NE(t.find("2 ms"), std::string::npos);
  EXPECT_NE(t.find("GFLOP/s"), std::string::npos);
  EXPECT_NE(t.find("vs openblas"), std::string::npos);
  EXPECT_NE(t.find("1.50x"), std::string::npos);
  const std::string jl = to_json_lines({sample_row(), sample_row()});
  EXPECT_EQ(std::count(jl.begin(), jl.end(), '\n'), 2);
}

TEST(Grid, ParsesCommandLineAxes) {
  const Grid g = Grid::parse({"n=1M,4k,100", "kernel=copy,triad", "n=2M,1e3"});
  ASSERT_EQ(g.axes().size(), 2u);
  EXPECT_EQ(g.counts("n"), (std::vector<int64_t>{2 << 20, 1000}));  // a repeated key replaces
  EXPECT_EQ(g.values("kernel"), (std::vector<std::string>{"copy", "triad"}));
  EXPECT_EQ(g.counts("missing", {7}), (std::vector<int64_t>{7}));
  const auto cases = g.cases();
  ASSERT_EQ(cases.size(), 4u);
  EXPECT_EQ(cases[0]["n"], "2M");
  EXPECT_EQ(cases[1]["kernel"], "triad");  // the last axis varies fastest
  EXPECT_EQ(Grid::parse({"size=64KiB"}).bytes("size"), (std::vector<int64_t>{65536}));
  EXPECT_EQ(Grid::parse({"x=0.5,2"}).numbers("x"), (std::vector<double>{0.5, 2}));
}

TEST(Grid, RejectsBadInput) {
  EXPECT_THROW(Grid::parse({"n"}), ridge::Error);
  EXPECT_THROW(Grid::parse({"=3"}), ridge::Error);
  EXPECT_THROW(Grid::parse({"n=1,,2"}), ridge::Error);
  EXPECT_THROW(Grid::parse({"n=abc"}).counts("n"), ridge::Error);
  EXPECT_THROW(Grid::parse({"x=1y"}).numbers("x"), ridge::Error);
  try {
    Grid::parse({"nn=1"}).check_keys({"n", "kernel"}, "stream");
    FAIL();
  } catch (const ridge::Error& e) {
    EXPECT_NE(std::string(e.what()).find("nn"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("n, kernel"), std::string::npos);
  }
}

TEST(Grid, ReadsJson) {
  const Grid g = Grid::from_json(nlohmann::json::parse(R"({"n": ["1k", 2048], "kernel": "copy"})"), "test");
  EXPECT_EQ(g.counts("n"), (std::vector<int64_t>{1024, 2048}));
  EXPECT_EQ(g.values("kernel"), (std::vector<std::string>{"copy"}));
  EXPECT_THROW(Grid::from_json(nlohmann::json::array(), "test"), ridge::Error);
  EXPECT_THROW(Grid::from_json(nlohmann::json::parse(R"({"n": []})"), "test"), ridge::Error);
  EXPECT_THROW(Grid::from_file("/nonexistent/grid.json"), ridge::Error);
}

void registry_probe_run(Context& ctx) {
  Row r;
  r.median_ms = 1;
  ctx.emit(r);
}
RIDGE_BENCHMARK(registry_probe, "test-registry-probe", "registered by the test", registry_probe_run);

TEST(Registry, FindsRegisteredBenchmarksAndRunsThem) {
  const auto& b = find_benchmark("test-registry-probe");
  EXPECT_EQ(b.description, "registered by the test");
  std::FILE* devnull = std::fopen("/dev/null", "w");
  Sink sink(Format::json, devnull);
  Progress progress(false);
  Context ctx(b.name, sink, progress);
  ctx.threads = 3;
  b.run(ctx);
  ASSERT_EQ(sink.rows().size(), 1u);
  EXPECT_EQ(sink.rows()[0].benchmark, "test-registry-probe");
  EXPECT_EQ(sink.rows()[0].threads, 3);
  EXPECT_FALSE(sink.rows()[0].isa.empty());
  sink.finish();
  std::fclose(devnull);
  EXPECT_THROW(find_benchmark("no-such-benchmark"), ridge::Error);
}

}  // namespace
