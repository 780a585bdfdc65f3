#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "ridge/bench/trace.hpp"
#include "bench/json.hpp"

namespace {

using nlohmann::json;
namespace trace = ridge::trace;

std::vector<json> events_of(const json& doc, const std::string& ph) {
  std::vector<json> out;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == ph) out.push_back(e);
  return out;
}

struct TraceTest : ::testing::Test {
  void SetUp() override { trace::start_recording(); }
  void TearDown() override {
    trace::stop_recording();
    trace::clear();
  }
};

TEST(TraceOff, RecordsNothingByDefault) {
  trace::clear();
  {
    RIDGE_RANGE("ignored");
    trace::mark("ignored");
    trace::end_range(trace::start_range("ignored"));
  }
  EXPECT_EQ(trace::event_count(), 0u);
}

TEST_F(TraceTest, PushPopRangesNestAsCompleteEvents) {
  {
    RIDGE_RANGE("outer");
    { RIDGE_RANGE(std::string("inner ") + "dynamic"); }
    trace::push("manual");
    trace::pop();
  }
  const json doc = trace::to_json();
  const auto xs = events_of(doc, "X");
  ASSERT_EQ(xs.size(), 3u);
  std::map<std::string, json> by;
  for (const auto& e : xs) {
    for (const char* k : {"name", "cat", "pid", "tid", "ts", "dur"}) EXPECT_TRUE(e.contains(k)) << k;
    by[e["name"]] = e;
  }
  ASSERT_TRUE(by.count("outer") && by.count("inner dynamic") && by.count("manual"));
  const double o0 = by["outer"]["ts"], o1 = o0 + by["outer"]["dur"].get<double>();
  for (const char* child : {"inner dynamic", "manual"}) {
    const double c0 = by[child]["ts"], c1 = c0 + by[child]["dur"].get<double>();
    EXPECT_GE(c0, o0);
    EXPECT_LE(c1, o1);
  }
  EXPECT_EQ(xs.front()["name"], "outer");  // parents are written before their children
}

TEST_F(TraceTest, StartEndRangesMayEndOnAnotherThread) {
  trace::Handle h = trace::start_range("async work", trace::color::green);
  std::thread t([&] { trace::end_range(h); });
  t.join();
  const json doc = trace::to_json();
  const auto b = events_of(doc, "b"), e = events_of(doc, "e");
  ASSERT_EQ(b.size(), 1u);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(b[0]["id"], e[0]["id"]);
  EXPECT_EQ(b[0]["name"], "async work");
  EXPECT_EQ(b[0]["cat"], e[0]["cat"]);
  EXPECT_NE(b[0]["tid"], e[0]["tid"]);
  EXPECT_LE(b[0]["ts"].get<double>(), e[0]["ts"].get<double>());
}

TEST_F(TraceTest, MarkersCarryCategoryColourAndPayload) {
  trace::mark("loss", {"step", trace::color::red, 2.5});
  trace::mark("plain");
  const auto is = events_of(trace::to_json(), "i");
  ASSERT_EQ(is.size(), 2u);
  EXPECT_EQ(is[0]["cat"], "step");
  EXPECT_EQ(is[0]["s"], "t");
  EXPECT_DOUBLE_EQ(is[0]["args"]["payload"].get<double>(), 2.5);
  EXPECT_EQ(is[0]["args"]["colour"], "#e53935");
  EXPECT_EQ(is[1]["cat"], "ridge");
}

TEST_F(TraceTest, ManyThreadsLoseNoEvent) {
  const int threads = 8;
  const int per = std::getenv("RIDGE_TEST_SMALL") ? 1000 : 5000;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([t, per] {
      trace::set_thread_name("worker " + std::to_string(t));
      for (int i = 0; i < per; ++i) {
        RIDGE_RANGE("outer");
        RIDGE_RANGE("inner");
        if (i % 100 == 0) trace::mark("tick");
      }
    });
  for (auto& th : pool) th.join();
  const json doc = trace::to_json();
  std::map<int, int> outer_per_tid, inner_per_tid;
  std::set<std::string> names;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X") (e["name"] == "outer" ? outer_per_tid : inner_per_tid)[e["tid"].get<int>()]++;
    if (e["ph"] == "M" && e["name"] == "thread_name") names.insert(e["args"]["name"].get<std::string>());
  }
  EXPECT_EQ(outer_per_tid.size(), static_cast<size_t>(threads));
  for (const auto& [tid, n] : outer_per_tid) EXPECT_EQ(n, per) << tid;
  for (const auto& [tid, n] : inner_per_tid) EXPECT_EQ(n, per) << tid;
  EXPECT_EQ(events_of(doc, "i").size(), static_cast<size_t>(threads * per / 100));
  for (int t = 0; t < threads; ++t) EXPECT_TRUE(names.count("worker " + std::to_string(t)));
  EXPECT_EQ(trace::dropped(), 0u);
}

TEST_F(TraceTest, CapCountsDroppedEvents) {
  trace::start_recording(10);
  for (int i = 0; i < 25; ++i) {
    RIDGE_RANGE("r");
  }
  EXPECT_EQ(trace::event_count(), 10u);
  EXPECT_EQ(trace::dropped(), 15u);
  EXPECT_EQ(trace::to_json()["otherData"]["dropped_events"], 15);
}

TEST_F(TraceTest, WritesAFileThatParses) {
  { RIDGE_RANGE("file"); }
  const std::string path = ::testing::TempDir() + "ridge_trace_test.json";
  trace::write(path);
  std::ifstream in(path);
  const json doc = json::parse(in);
  EXPECT_EQ(doc["displayTimeUnit"], "ms");
  EXPECT_EQ(events_of(doc, "X").size(), 1u);
  std::remove(path.c_str());
  EXPECT_THROW(trace::write("/nonexistent-dir/x.json"), std::exception);
}

// The public text form (ridge/bench/trace.hpp needs no JSON library) is the same document.
TEST_F(TraceTest, JsonTextIsTheSameDocument) {
  { RIDGE_RANGE("text"); }
  EXPECT_EQ(json::parse(trace::to_json_text()), trace::to_json());
}

TEST(TraceNvtx, CallsWorkWithForwardingOn) {
  // Without a tool injected NVTX calls are no-ops, so what can be checked is ridge's side: the
  // forwarding switch sets exactly the NVTX bit (only in builds with the headers), and with it on
  // every call still reaches the trace, balanced, in builds with and without NVTX.
  namespace hooks = ridge::memory::hooks;
  trace::start_recording();
  trace::set_nvtx(true);
  EXPECT_EQ((hooks::active.load() & hooks::kNvtx) != 0, trace::nvtx_compiled());
  {
    RIDGE_RANGE("nvtx range");
    EXPECT_STREQ(hooks::current_range_name(), "nvtx range");
    trace::mark("nvtx mark", {"cat", trace::color::blue, 1.0});
    trace::end_range(trace::start_range("nvtx async"));
    trace::set_thread_name("nvtx thread");
  }
  trace::set_nvtx(false);
  EXPECT_EQ(hooks::active.load() & hooks::kNvtx, 0u);
  EXPECT_EQ(hooks::current_range_name(), nullptr) << "the range was popped";
  const std::string doc = trace::to_json().dump();
  trace::stop_recording();
  for (const char* name : {"\"nvtx range\"", "\"nvtx mark\"", "\"nvtx async\"", "\"nvtx thread\""})
    EXPECT_NE(doc.find(name), std::string::npos) << name << " missing from the trace";
  EXPECT_FALSE(trace::recording());
}

}  // namespace
