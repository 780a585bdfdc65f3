// One Chrome trace of an MPI run: every rank records its own trace (ridge/bench/trace.hpp); rank 0
// gathers them and writes one file where each rank is its own process row (pid = rank, named
// "rank R"), on a common clock: each rank marks the end of a barrier ("ridge sync") and its events are
// shifted so those marks coincide.
// Private to ridge (nlohmann-json stays out of the installed headers); the public entry point is
// distributed::write_merged_trace in ridge/distributed.hpp.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ridge::distributed {

// The marker name sync_trace() records; merge_rank_traces() aligns the ranks on its last occurrence.
inline constexpr const char* kTraceSyncMarker = "ridge sync";

// Collective: a barrier, then a kTraceSyncMarker instant on this rank's trace (when recording).
void sync_trace();

// Pure: docs[r] is rank r's trace::to_json(). Returns one document: every event with pid r and its
// timestamps shifted by (rank 0's sync mark - rank r's), async ids made unique per rank, one
// process_name ("rank R") and process_sort_index metadata event per rank. ridge::Error naming the rank
// for a document without a traceEvents array.
nlohmann::json merge_rank_traces(const std::vector<nlohmann::json>& docs);

// Collective: gathers every rank's trace::to_json() on rank 0 and merges them. Rank 0 gets the merged
// document, the other ranks null. Every failure (a rank over MPI's int counts, a document that does not
// parse or merge) is agreed on: ridge::Error on rank 0, PeerFailed on the others.
nlohmann::json gather_trace();

// write_merged_trace(path) (ridge/distributed.hpp) is sync_trace() + gather_trace() + an atomic write
// on rank 0.

}  // namespace ridge::distributed
