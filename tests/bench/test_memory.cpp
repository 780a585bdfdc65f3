#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <thread>

#include "ridge/bench/memory.hpp"
#include "ridge/bench/trace.hpp"
#include "ridge/core/error.hpp"
#include "bench/json.hpp"

namespace {

namespace memory = ridge::memory;

struct Recording {
  explicit Recording(size_t n = 1'000'000) { memory::record_history(n); }
  ~Recording() { memory::stop_recording(); }
};

TEST(Memory, AccountsEveryByteAndTag) {
  const int64_t before = memory::current_bytes();
  {
    ridge::Buffer<float> a(1000, "test.a");
    ridge::Buffer<double> b(10, "test.b");
    EXPECT_EQ(memory::current_bytes(), before + 4000 + 80);
    const auto u = memory::usage();
    EXPECT_EQ(u.live_by_tag.at("test.a"), 4000);
    EXPECT_EQ(u.live_by_tag.at("test.b"), 80);
    EXPECT_GE(u.peak_bytes, before + 4080);
    EXPECT_GT(u.peak_rss_bytes, 0);
  }
  EXPECT_EQ(memory::current_bytes(), before);
  EXPECT_EQ(memory::usage().live_by_tag.count("test.a"), 0u);
}

TEST(Memory, ExactUnderConcurrentAllocAndFree) {
  const int threads = 6;
  const int ops = std::getenv("RIDGE_TEST_SMALL") ? 1000 : 5000;
  const int64_t before = memory::current_bytes();
  memory::reset_peak();
  Recording rec;
  std::vector<int64_t> kept(threads, 0);
  std::vector<std::vector<void*>> keep(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) + 1);
      std::vector<std::pair<void*, int64_t>> live;
      const std::string tag = "thread" + std::to_string(t);
      for (int i = 0; i < ops; ++i) {
        if (live.empty() || rng() % 3 != 0) {
          const int64_t n = 1 + static_cast<int64_t>(rng() % 5000);
          live.emplace_back(memory::allocate(static_cast<size_t>(n), tag.c_str()), n);
        } else {
          const size_t k = rng() % live.size();
          memory::deallocate(live[k].first);
          live[k] = live.back();
          live.pop_back();
        }
      }
      for (const auto& [p, n] : live) {
        kept[static_cast<size_t>(t)] += n;
        keep[static_cast<size_t>(t)].push_back(p);
      }
    });
  for (auto& th : pool) th.join();
  int64_t expected = 0;
  for (auto k : kept) expected += k;
  const auto u = memory::usage();
  EXPECT_EQ(u.current_bytes, before + expected);
  for (int t = 0; t < threads; ++t)
    EXPECT_EQ(u.live_by_tag.at("thread" + std::to_string(t)), kept[static_cast<size_t>(t)]);

  // The history replays to the same live bytes and the same high-water mark the counters saw.
  const auto tl = memory::replay(memory::history());
  EXPECT_EQ(tl.start_bytes, before);
  EXPECT_EQ(tl.end_bytes, before + expected);
  EXPECT_EQ(tl.peak_bytes, memory::peak_bytes());
  for (int t = 0; t < threads; ++t)
    EXPECT_EQ(tl.live_at_end.at("thread" + std::to_string(t)), kept[static_cast<size_t>(t)]);

  for (auto& v : keep)
    for (void* p : v) memory::deallocate(p);
  EXPECT_EQ(memory::current_bytes(), before);
}

TEST(Memory, UntaggedAllocationsTakeTheInnermostRange) {
  Recording rec;
  {
    RIDGE_RANGE("outer");
    ridge::Buffer<char> a(100);
    {
      RIDGE_RANGE("inner");
      ridge::Buffer<char> b(200);
      ridge::Buffer<char> c(300, "explicit");
      const auto u = memory::usage();
      EXPECT_EQ(u.live_by_tag.at("outer"), 100);
      EXPECT_EQ(u.live_by_tag.at("inner"), 200);
      EXPECT_EQ(u.live_by_tag.at("explicit"), 300);
    }
  }
  ridge::Buffer<char> d(5);
  EXPECT_GE(memory::usage().live_by_tag.at("untagged"), 5);
}

TEST(Memory, SnapshotRoundTripsThroughAFile) {
  ridge::Buffer<char> before_recording(1234, "old");
  Recording rec;
  {
    ridge::Buffer<char> a(1 << 20, "big");
    ridge::Buffer<char> b(1 << 10, "small");
  }
  ridge::Buffer<char> c(4096, "after");
  const std::string path = ::testing::TempDir() + "ridge_memory_snapshot.json";
  memory::dump_snapshot(path);
  const auto original = memory::history();
  const auto loaded = memory::load_snapshot(path);
  ASSERT_EQ(loaded.events.size(), original.events.size());
  for (size_t i = 0; i < loaded.events.size(); ++i) {
    EXPECT_EQ(loaded.events[i].address, original.events[i].address);
    EXPECT_EQ(loaded.events[i].bytes, original.events[i].bytes);
    EXPECT_EQ(loaded.events[i].alloc, original.events[i].alloc);
    EXPECT_EQ(loaded.tags[static_cast<size_t>(loaded.events[i].tag)],
              original.tags[static_cast<size_t>(original.events[i].tag)]);
    EXPECT_NEAR(static_cast<double>(loaded.events[i].t_ns - loaded.t0_ns),
                static_cast<double>(original.events[i].t_ns - original.t0_ns), 1.0);
  }
  // Same JSON again from the loaded history (times within rounding).
  const auto a = memory::snapshot_json(original), b = memory::snapshot_json(loaded);
  EXPECT_EQ(a["events"].size(), b["events"].size());
  EXPECT_EQ(a["baseline"], b["baseline"]);
  EXPECT_EQ(a["summary"]["peak_bytes"], b["summary"]["peak_bytes"]);
  // The public text form (ridge/bench/memory.hpp needs no JSON library) is the same document, and back.
  const std::string text = memory::snapshot_json_text(original);
  EXPECT_EQ(nlohmann::json::parse(text), a);
  const auto from_text = memory::history_from_json_text(text, "text");
  const auto via_doc = memory::snapshot_json(memory::history_from_json(a, "doc")),
             via_text = memory::snapshot_json(from_text);
  EXPECT_EQ(via_text["events"], via_doc["events"]);
  EXPECT_EQ(via_text["summary"], via_doc["summary"]);
  EXPECT_THROW(memory::history_from_json_text("[]", "text"), ridge::Error);
  const auto tl = memory::replay(loaded);
  EXPECT_EQ(tl.peak_bytes - tl.start_bytes, (1 << 20) + (1 << 10));
  EXPECT_EQ(tl.live_at_peak.at("big"), 1 << 20);
  EXPECT_EQ(tl.live_at_peak.at("old"), 1234);
  EXPECT_EQ(tl.live_at_end.at("after"), 4096);
  EXPECT_EQ(tl.live_at_end.count("big"), 0u);
  std::remove(path.c_str());
}

TEST(Memory, KeepsTheNewestEntriesAndStaysExact) {
  const int64_t before = memory::current_bytes();
  Recording rec(4);
  std::vector<ridge::Buffer<char>> v;
  for (int i = 0; i < 10; ++i) v.emplace_back(100, "many");
  v.resize(7);  // three frees
  const auto h = memory::history();
  EXPECT_EQ(h.events.size(), 4u);
  EXPECT_EQ(h.dropped, 9u);
  const auto tl = memory::replay(h);
  EXPECT_EQ(tl.end_bytes, before + 700);
}

TEST(Memory, BadInputIsAnError) {
  EXPECT_THROW(memory::record_history(0), ridge::Error);
  EXPECT_THROW(memory::dump_snapshot("/tmp/never.json"), ridge::Error);  // not recording
  EXPECT_THROW(memory::load_snapshot("/nonexistent/snap.json"), ridge::Error);
  EXPECT_THROW(memory::history_from_json(nlohmann::json::object(), "x"), ridge::Error);
  EXPECT_THROW(memory::allocate(16, nullptr, 3), ridge::Error);
  auto doc = nlohmann::json::parse(
      R"({"format":"ridge-memory-snapshot","version":1,"tags":[],"events":[{"t_us":1,"action":"grow","address":"0x1","bytes":1,"tag":"a"}]})");
  EXPECT_THROW(memory::history_from_json(doc, "x"), ridge::Error);
}

}  // namespace
