// The merged trace of an MPI run (src/distributed/trace_merge.hpp): one process row per rank, timestamps
// shifted onto rank 0's clock at the sync marker, async ids kept apart; and the gather over the real ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <map>
#include <set>

#include "bench/json.hpp"
#include "distributed/trace_merge.hpp"
#include "ridge/bench/trace.hpp"
#include "ridge/core/error.hpp"
#include "ridge/distributed.hpp"

namespace rd = ridge::distributed;
using nlohmann::json;

namespace {

json rank_doc(double sync_ts, double range_ts) {
  json ev = json::array();
  ev.push_back(
      {{"ph", "M"}, {"name", "process_name"}, {"pid", 4242}, {"tid", 0}, {"args", {{"name", "ridge"}}}});
  ev.push_back(
      {{"ph", "M"}, {"name", "thread_name"}, {"pid", 4242}, {"tid", 7}, {"args", {{"name", "main"}}}});
  ev.push_back(
      {{"ph", "i"}, {"name", rd::kTraceSyncMarker}, {"pid", 4242}, {"tid", 7}, {"ts", sync_ts}, {"s", "t"}});
  ev.push_back(
      {{"ph", "X"}, {"name", "backward"}, {"pid", 4242}, {"tid", 7}, {"ts", range_ts}, {"dur", 5.0}});
  ev.push_back({{"ph", "b"},
                {"name", "allreduce bucket 0"},
                {"pid", 4242},
                {"tid", 7},
                {"ts", range_ts},
                {"id", "0x1"}});
  ev.push_back({{"ph", "e"},
                {"name", "allreduce bucket 0"},
                {"pid", 4242},
                {"tid", 7},
                {"ts", range_ts + 2},
                {"id", "0x1"}});
  return {{"traceEvents", ev}};
}

}  // namespace

TEST(DistTrace, MergeGivesEachRankItsRowOnOneClock) {
  // Rank 1 started recording 100 us later: its sync mark reads 900 where rank 0's reads 1000.
  const json m = rd::merge_rank_traces({rank_doc(1000, 1200), rank_doc(900, 1100)});
  std::set<int> pids;
  std::map<int, std::string> names;
  std::set<std::string> ids;
  for (const auto& e : m["traceEvents"]) {
    pids.insert(e["pid"].get<int>());
    if (e["ph"] == "M" && e["name"] == "process_name") names[e["pid"].get<int>()] = e["args"]["name"];
    if (e.contains("id")) ids.insert(e["id"].get<std::string>());
    if (e["ph"] == "X") {
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1200.0);  // 1100 + (1000 - 900) on rank 1
    }
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_EQ(names[0], "rank 0");
  EXPECT_EQ(names[1], "rank 1");
  EXPECT_EQ(ids.size(), 2u);  // "0x1" on each rank stays two ranges
  EXPECT_THROW(rd::merge_rank_traces({rank_doc(0, 0), json::object()}), ridge::Error);
}

// A write that fails is rank 0's ridge::Error about the argument "trace" (the CLI names it --trace), and
// PeerFailed on the other ranks: every rank stops, none waits.
TEST(DistTrace, AFailedWriteIsRankZerosErrorAboutTrace) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ridge::trace::start_recording();
  try {
    rd::write_merged_trace("/proc/ridge-no-such-dir/t.json");
    ADD_FAILURE() << "the write did not fail";
  } catch (const ridge::Error& e) {
    EXPECT_EQ(rank, 0);
    EXPECT_EQ(e.argument(), "trace");
    EXPECT_EQ(
        std::string(e.what()),
        "trace: folder '/proc/ridge-no-such-dir' does not exist (for '/proc/ridge-no-such-dir/t.json')");
  } catch (const rd::PeerFailed&) {
    EXPECT_NE(rank, 0);
  }
  ridge::trace::stop_recording();
}

TEST(DistTrace, GatherCollectsEveryRank) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  ridge::trace::start_recording();
  rd::sync_trace();
  { RIDGE_RANGE("work on this rank"); }
  const json doc = rd::gather_trace();
  ridge::trace::stop_recording();
  if (rank != 0) {
    EXPECT_TRUE(doc.is_null());
    return;
  }
  std::set<int> with_work;
  for (const auto& e : doc["traceEvents"])
    if (e.value("name", "") == "work on this rank") with_work.insert(e["pid"].get<int>());
  EXPECT_EQ(static_cast<int>(with_work.size()), world);
}
