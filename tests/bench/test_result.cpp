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
  r.flops = 4e9;  // 2 TFLOP per s at 2 ms -> 2000 GFLOP/s
  r.bytes = 1e8;  // 50 GB/s at 2 ms
  r.add_peer("openblas", 3.0);
  r.extra["cv"] = 0.01;
  r.note = "a, \"quoted\" note";
  return r;
}

TEST(Row, JsonHasTheSharedSchema) {
  const auto j = sample_row().to_json();
  for (const char* k : {"benchmark", "case", "dtype", "threads", "isa", "median_ms", "min_ms", "gflops",
                        "gbps", "peers", "machine"})
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

// ---- The exact bytes of every printer ----
// Rows that between them set and leave unset every field. The expected texts below were printed by
// the implementation that listed Row's fields by hand in each printer (commit 49d17c5), before one
// field table drove them all: any change to a key, a column or a format shows here.

// Every field set: a bound above its roof, an unstable spread, cold operands, two peers, an extra
// that a field shadows ("dtype") and one that it does not, text that CSV must quote.
Row full_row() {
  Row r;
  r.benchmark = "gemm";
  r.case_ = {{"m", 512}, {"n", 256}, {"layout", "nt"}};
  r.dtype = "bf16";
  r.threads = 4;
  r.isa = "avx512bf16";
  r.machine = "Test CPU, 2 GHz";
  r.median_ms = 2.0;
  r.min_ms = 1.5;
  r.flops = 4e9;  // 2000 GFLOP/s at 2 ms
  r.bytes = 1e8;  // 50 GB/s at 2 ms
  r.bound_gflops = 1800;
  r.bound_gbps = 200;
  r.bound_level = "l3";
  r.pct_of_bound = 111.1;  // above its roof
  r.cache = "cold";
  r.spread_pct = 12.5;
  r.unstable = true;
  r.add_peer("openblas", 3.0);
  r.add_peer("onednn", 1.0);
  r.extra = {{"cv", 0.01}, {"dtype", "shadowed"}, {"tag", "x"}};
  r.note = "a, \"quoted\" note";
  return r;
}

// Nothing set but the benchmark and its time (the defaults a Sink would fill are left empty).
Row bare_row() {
  Row r;
  r.benchmark = "stream";
  r.median_ms = 0.25;
  return r;
}

// Bytes only, held against a bandwidth (the "bound GB/s" column), warm operands, a bound level with
// no bound (CSV writes it, JSON leaves it out), a peer of its own and an integer extra.
Row bandwidth_row() {
  Row r;
  r.benchmark = "stream";
  r.case_ = {{"kernel", "triad"}, {"n", "1M"}};
  r.dtype = "fp32";
  r.threads = 1;
  r.isa = "avx2";
  r.machine = "m";
  r.median_ms = 0.5;
  r.min_ms = 0.4;
  r.bytes = 1.2e7;
  r.bound_gbps = 30;
  r.bound_level = "dram";
  r.pct_of_bound = 80;
  r.cache = "warm";
  r.spread_pct = 0.5;
  r.add_peer("memcpy", 0.6);
  r.extra = {{"iters", 100}};
  return r;
}

// FLOPs only, below its roof, and an extra named like a field left empty ("note").
Row compute_row() {
  Row r;
  r.benchmark = "attention";
  r.case_ = {{"seq", 129}};
  r.dtype = "fp8_e4m3";
  r.threads = 2;
  r.isa = "scalar";
  r.median_ms = 10;
  r.min_ms = 9.5;
  r.flops = 1e9;
  r.bound_gflops = 400;
  r.pct_of_bound = 25;
  r.spread_pct = 3;
  r.extra = {{"note", "from extra"}};
  return r;
}

// A bound level with no bound, and a null case.
Row level_only_row() {
  Row r;
  r.benchmark = "gemm";
  r.case_ = nullptr;
  r.median_ms = 1;
  r.min_ms = 1;
  r.bound_level = "dram";
  return r;
}

std::vector<Row> all_rows() {
  return {full_row(), bare_row(), bandwidth_row(), compute_row(), level_only_row()};
}

// clang-format off
const std::string kJsonFull = R"~({"above_roof":true,"benchmark":"gemm","bound_gbps":200.0,"bound_gflops":1800.0,"bound_level":"l3","bytes":100000000.0,"cache":"cold","case":{"layout":"nt","m":512,"n":256},"cv":0.01,"dtype":"bf16","flops":4000000000.0,"gbps":50.0,"gflops":2000.0,"isa":"avx512bf16","machine":"Test CPU, 2 GHz","median_ms":2.0,"min_ms":1.5,"note":"a, \"quoted\" note","pct_of_bound":111.1,"peers":[{"median_ms":3.0,"name":"openblas","speedup":1.5},{"median_ms":1.0,"name":"onednn","speedup":0.5}],"spread_pct":12.5,"tag":"x","threads":4,"unstable":true})~";
const std::string kJsonBare = R"~({"benchmark":"stream","case":{},"dtype":"","isa":"","machine":"","median_ms":0.25,"min_ms":0.0,"peers":[],"spread_pct":0.0,"threads":0,"unstable":false})~";
const std::string kJsonBandwidth = R"~({"above_roof":false,"benchmark":"stream","bound_gbps":30.0,"bound_level":"dram","bytes":12000000.0,"cache":"warm","case":{"kernel":"triad","n":"1M"},"dtype":"fp32","gbps":24.0,"isa":"avx2","iters":100,"machine":"m","median_ms":0.5,"min_ms":0.4,"pct_of_bound":80.0,"peers":[{"median_ms":0.6,"name":"memcpy","speedup":1.2}],"spread_pct":0.5,"threads":1,"unstable":false})~";
const std::string kJsonCompute = R"~({"above_roof":false,"benchmark":"attention","bound_gflops":400.0,"bound_level":"","case":{"seq":129},"dtype":"fp8_e4m3","flops":1000000000.0,"gflops":100.0,"isa":"scalar","machine":"","median_ms":10.0,"min_ms":9.5,"note":"from extra","pct_of_bound":25.0,"peers":[],"spread_pct":3.0,"threads":2,"unstable":false})~";
const std::string kJsonLevelOnly = R"~({"benchmark":"gemm","case":{},"dtype":"","isa":"","machine":"","median_ms":1.0,"min_ms":1.0,"peers":[],"spread_pct":0.0,"threads":0,"unstable":false})~";
const std::string kTableFull = R"~(layout  m    n    dtype  thr  isa         median     min  spread  cache  GFLOP/s  GB/s  bound GFLOP/s  % bound  flags                openblas  vs openblas  onednn  vs onednn    cv     dtype  tag  note
nt      512  256  bf16     4  avx512bf16    2 ms  1.5 ms     12%  cold    2000.0  50.0         1800.0     111%  ABOVE-ROOF,UNSTABLE      3 ms        1.50x    1 ms      0.50x  0.01  shadowed    x  a, "quoted" note
ABOVE-ROOF: the point is above its roof: the roof is wrong or the working set came from a faster level than the one it is held against
UNSTABLE: the rounds' medians differ by more than 1.3x (the machine's speed changed during the run): rerun
cache cold: each call reads its operands from DRAM (rotating through copies >= 4x the last-level cache); warm: the same operands every call (--warm)
)~";
const std::string kTableBare = R"~(dtype  thr  isa   median   min
         0       0.25 ms  0 ms
)~";
const std::string kTableBandwidth = R"~(kernel  n   dtype  thr  isa   median     min  spread  cache  GB/s   bound GB/s  % bound  memcpy  vs memcpy  iters
triad   1M  fp32     1  avx2  0.5 ms  0.4 ms      0%  warm   24.0  30.0 (dram)      80%  0.6 ms      1.20x    100
)~";
const std::string kTableCompute = R"~(seq  dtype     thr  isa     median     min  spread  GFLOP/s  bound GFLOP/s  % bound        note
129  fp8_e4m3    2  scalar   10 ms  9.5 ms      3%    100.0          400.0      25%  from extra
)~";
const std::string kTableLevelOnly = R"~(dtype  thr  isa  median   min
         0         1 ms  1 ms
)~";
const std::string kTableAll = R"~(benchmark  layout  m    n    kernel  seq  dtype     thr  isa          median     min  spread  cache  GFLOP/s  GB/s  bound GFLOP/s   bound GB/s  % bound  flags                openblas  vs openblas  onednn  vs onednn  memcpy  vs memcpy    cv     dtype  tag  iters        note  note
gemm       nt      512  256               bf16        4  avx512bf16     2 ms  1.5 ms     12%  cold    2000.0  50.0         1800.0                  111%  ABOVE-ROOF,UNSTABLE      3 ms        1.50x    1 ms      0.50x                     0.01  shadowed    x                     a, "quoted" note
stream                                                0              0.25 ms    0 ms      0%
stream                  1M   triad        fp32        1  avx2         0.5 ms  0.4 ms      0%  warm            24.0                 30.0 (dram)      80%                                                                 0.6 ms      1.20x                         100
attention                            129  fp8_e4m3    2  scalar        10 ms  9.5 ms      3%           100.0                400.0                   25%                                                                                                                from extra
gemm                                                  0                 1 ms    1 ms      0%
ABOVE-ROOF: the point is above its roof: the roof is wrong or the working set came from a faster level than the one it is held against
UNSTABLE: the rounds' medians differ by more than 1.3x (the machine's speed changed during the run): rerun
cache cold: each call reads its operands from DRAM (rotating through copies >= 4x the last-level cache); warm: the same operands every call (--warm)
)~";
const std::string kTableStream = R"~(kernel  n   dtype  thr  isa    median     min  spread  cache  GB/s   bound GB/s  % bound  memcpy  vs memcpy  iters
                     0        0.25 ms    0 ms      0%
triad   1M  fp32     1  avx2   0.5 ms  0.4 ms      0%  warm   24.0  30.0 (dram)      80%  0.6 ms      1.20x    100
)~";
const std::string kCsvFull = R"~(benchmark,case.layout,case.m,case.n,dtype,threads,isa,machine,median_ms,min_ms,flops,gflops,bytes,gbps,bound_gflops,bound_gbps,bound_level,pct_of_bound,above_roof,cache,spread_pct,unstable,peer.openblas.median_ms,peer.openblas.speedup,peer.onednn.median_ms,peer.onednn.speedup,cv,dtype,tag,note
gemm,nt,512,256,bf16,4,avx512bf16,"Test CPU, 2 GHz",2,1.5,4e+09,2000,1e+08,50,1800,200,l3,111.1,true,cold,12.5,true,3,1.5,1,0.5,0.01,shadowed,x,"a, ""quoted"" note"
)~";
const std::string kCsvBare = R"~(benchmark,dtype,threads,isa,machine,median_ms,min_ms,flops,gflops,bytes,gbps,bound_gflops,bound_gbps,bound_level,pct_of_bound,above_roof,cache,spread_pct,unstable,note
stream,,0,,,0.25,0,,,,,,,,,,,0,false,
)~";
const std::string kCsvBandwidth = R"~(benchmark,case.kernel,case.n,dtype,threads,isa,machine,median_ms,min_ms,flops,gflops,bytes,gbps,bound_gflops,bound_gbps,bound_level,pct_of_bound,above_roof,cache,spread_pct,unstable,peer.memcpy.median_ms,peer.memcpy.speedup,iters,note
stream,triad,1M,fp32,1,avx2,m,0.5,0.4,,,1.2e+07,24,,30,dram,80,false,warm,0.5,false,0.6,1.2,100,
)~";
const std::string kCsvCompute = R"~(benchmark,case.seq,dtype,threads,isa,machine,median_ms,min_ms,flops,gflops,bytes,gbps,bound_gflops,bound_gbps,bound_level,pct_of_bound,above_roof,cache,spread_pct,unstable,note,note
attention,129,fp8_e4m3,2,scalar,,10,9.5,1e+09,100,,,400,,,25,false,,3,false,from extra,
)~";
const std::string kCsvLevelOnly = R"~(benchmark,dtype,threads,isa,machine,median_ms,min_ms,flops,gflops,bytes,gbps,bound_gflops,bound_gbps,bound_level,pct_of_bound,above_roof,cache,spread_pct,unstable,note
gemm,,0,,,1,1,,,,,,,dram,,,,0,false,
)~";
const std::string kCsvAll = R"~(benchmark,case.layout,case.m,case.n,case.kernel,case.seq,dtype,threads,isa,machine,median_ms,min_ms,flops,gflops,bytes,gbps,bound_gflops,bound_gbps,bound_level,pct_of_bound,above_roof,cache,spread_pct,unstable,peer.openblas.median_ms,peer.openblas.speedup,peer.onednn.median_ms,peer.onednn.speedup,peer.memcpy.median_ms,peer.memcpy.speedup,cv,dtype,tag,iters,note,note
gemm,nt,512,256,,,bf16,4,avx512bf16,"Test CPU, 2 GHz",2,1.5,4e+09,2000,1e+08,50,1800,200,l3,111.1,true,cold,12.5,true,3,1.5,1,0.5,,,0.01,shadowed,x,,,"a, ""quoted"" note"
stream,,,,,,,0,,,0.25,0,,,,,,,,,,,0,false,,,,,,,,,,,,
stream,,,1M,triad,,fp32,1,avx2,m,0.5,0.4,,,1.2e+07,24,,30,dram,80,false,warm,0.5,false,,,,,0.6,1.2,,,,100,,
attention,,,,,129,fp8_e4m3,2,scalar,,10,9.5,1e+09,100,,,400,,,25,false,,3,false,,,,,,,,,,,from extra,
gemm,,,,,,,0,,,1,1,,,,,,,dram,,,,0,false,,,,,,,,,,,,
)~";
const std::string kCsvNone = R"~(benchmark,dtype,threads,isa,machine,median_ms,min_ms,flops,gflops,bytes,gbps,bound_gflops,bound_gbps,bound_level,pct_of_bound,above_roof,cache,spread_pct,unstable,note
)~";
const std::string kCsvBackFull = R"~(benchmark,case.layout,case.m,case.n,dtype,threads,isa,machine,median_ms,min_ms,flops,gflops,bytes,gbps,bound_gflops,bound_gbps,bound_level,pct_of_bound,above_roof,cache,spread_pct,unstable,peer.openblas.median_ms,peer.openblas.speedup,peer.onednn.median_ms,peer.onednn.speedup,cv,tag,note
gemm,nt,512,256,bf16,4,avx512bf16,"Test CPU, 2 GHz",2,1.5,4e+09,2000,1e+08,50,1800,200,l3,111.1,true,cold,12.5,true,3,1.5,1,0.5,0.01,x,"a, ""quoted"" note"
)~";
const std::string kCsvBackCompute = R"~(benchmark,case.seq,dtype,threads,isa,machine,median_ms,min_ms,flops,gflops,bytes,gbps,bound_gflops,bound_gbps,bound_level,pct_of_bound,above_roof,cache,spread_pct,unstable,note
attention,129,fp8_e4m3,2,scalar,,10,9.5,1e+09,100,,,400,,,25,false,,3,false,from extra
)~";
const std::string kCsvBackLevelOnly = R"~(benchmark,dtype,threads,isa,machine,median_ms,min_ms,flops,gflops,bytes,gbps,bound_gflops,bound_gbps,bound_level,pct_of_bound,above_roof,cache,spread_pct,unstable,note
gemm,,0,,,1,1,,,,,,,,,,,0,false,
)~";
// clang-format on

TEST(RowBytes, JsonOfEachRow) {
  const std::vector<std::string> want = {kJsonFull, kJsonBare, kJsonBandwidth, kJsonCompute, kJsonLevelOnly};
  const auto rows = all_rows();
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i].to_json().dump(), want[i]) << i;
  EXPECT_EQ(to_json_lines(rows), kJsonFull + "\n" + kJsonBare + "\n" + kJsonBandwidth + "\n" + kJsonCompute +
                                     "\n" + kJsonLevelOnly + "\n");
}

TEST(RowBytes, TableOfEachRowAndOfSeveral) {
  const std::vector<std::string> want = {kTableFull, kTableBare, kTableBandwidth, kTableCompute,
                                         kTableLevelOnly};
  const auto rows = all_rows();
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(to_table({rows[i]}), want[i]) << i;
  EXPECT_EQ(to_table(rows), kTableAll);
  EXPECT_EQ(to_table({bare_row(), bandwidth_row()}), kTableStream);
  EXPECT_EQ(to_table({}), "(no results)\n");
}

TEST(RowBytes, CsvOfEachRowAndOfSeveral) {
  const std::vector<std::string> want = {kCsvFull, kCsvBare, kCsvBandwidth, kCsvCompute, kCsvLevelOnly};
  const auto rows = all_rows();
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(to_csv({rows[i]}), want[i]) << i;
  EXPECT_EQ(to_csv(rows), kCsvAll);
  EXPECT_EQ(to_csv({}), kCsvNone);
}

TEST(RowBytes, FromJsonReadsBackEveryField) {
  const std::vector<std::string> json = {kJsonFull, kJsonBare, kJsonBandwidth, kJsonCompute, kJsonLevelOnly};
  // What JSON leaves out does not come back: the extra a field shadows ("dtype"), a bound level with
  // no bound; an extra named like an empty field ("note") comes back as that field.
  const std::vector<std::string> csv = {kCsvBackFull, kCsvBare, kCsvBandwidth, kCsvBackCompute,
                                        kCsvBackLevelOnly};
  const auto rows = all_rows();
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row back = Row::from_json(rows[i].to_json());
    EXPECT_EQ(back.to_json().dump(), json[i]) << i;
    EXPECT_EQ(to_csv({back}), csv[i]) << i;
  }
  const Row full = Row::from_json(nlohmann::json::parse(kJsonFull));
  EXPECT_EQ(full.threads, 4);
  EXPECT_EQ(full.bound_level, "l3");
  EXPECT_TRUE(full.unstable);
  EXPECT_DOUBLE_EQ(full.spread_pct, 12.5);
  ASSERT_EQ(full.peers.size(), 2u);
  EXPECT_EQ(full.peers[1].name, "onednn");
  EXPECT_DOUBLE_EQ(full.peers[1].speedup, 0.5);
  // gflops, gbps and above_roof are computed from other fields: read past, not kept as extras.
  EXPECT_EQ(full.extra, (nlohmann::json{{"cv", 0.01}, {"tag", "x"}}));
}

TEST(RowBytes, FromJsonDefaultsAndErrors) {
  auto read = [](const char* text) { return Row::from_json(nlohmann::json::parse(text)).to_json().dump(); };
  auto error = [](const char* text) {
    try {
      Row::from_json(nlohmann::json::parse(text));
    } catch (const ridge::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(read(R"({"case": null, "gflops": 3, "above_roof": true, "x": [1]})"),
            R"({"benchmark":"","case":{},"dtype":"","isa":"","machine":"","median_ms":0.0,"min_ms":0.0,)"
            R"("peers":[],"spread_pct":0.0,"threads":0,"unstable":false,"x":[1]})");
  EXPECT_EQ(read(R"({"threads": 3.7, "note": "n"})"),
            R"({"benchmark":"","case":{},"dtype":"","isa":"","machine":"","median_ms":0.0,"min_ms":0.0,)"
            R"("note":"n","peers":[],"spread_pct":0.0,"threads":3,"unstable":false})");
  EXPECT_EQ(error(R"({"threads": "4"})"), "result row: type must be number, but is string");
  EXPECT_EQ(error(R"({"unstable": 1})"), "result row: type must be boolean, but is number");
  EXPECT_EQ(error(R"({"peers": 5})"), "result row: cannot use at() with number");
  EXPECT_EQ(error(R"({"peers": [{"name": "a"}]})"), "result row: key 'median_ms' not found");
  EXPECT_EQ(error("[1]"), "result row: expected a JSON object, got array");
}

TEST(Grid, ParsesCommandLineAxes) {
  const Grid g = Grid::parse({"n=1M,4k,100", "kernel=copy,triad", "n=2M,010"});
  ASSERT_EQ(g.axes().size(), 2u);
  EXPECT_EQ(g.counts("n"), (std::vector<int64_t>{2 << 20, 10}));  // a repeated key replaces; 010 is ten
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
  // A count is an integer (numbers::kCount) and a number a finite decimal, as every number a user types.
  EXPECT_THROW(Grid::parse({"n=1e3"}).counts("n"), ridge::Error);
  EXPECT_THROW(Grid::parse({"x=0x1p3"}).numbers("x"), ridge::Error);
  EXPECT_THROW(Grid::parse({"x=inf"}).numbers("x"), ridge::Error);
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
