// Merging the ranks' Chrome traces into one (src/distributed/trace_merge.hpp).
#include <fmt/format.h>
#include <mpi.h>

#include <cstdint>
#include <optional>
#include <string>

#include "bench/json.hpp"
#include "ridge/bench/trace.hpp"
#include "core/check.hpp"
#include "core/json.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/files.hpp"
#include "ridge/distributed.hpp"
#include "distributed/trace_merge.hpp"

namespace ridge::distributed {

void sync_trace() {
  MPI_Barrier(MPI_COMM_WORLD);
  if (trace::recording()) trace::mark(kTraceSyncMarker, {"sync", trace::color::none, std::nullopt});
}

nlohmann::json merge_rank_traces(const std::vector<nlohmann::json>& docs) {
  using nlohmann::json;
  auto sync_ts = [](const json& doc) {
    double ts = -1;
    for (const auto& e : doc["traceEvents"])
      if (e.value("ph", "") == "i" && e.value("name", "") == kTraceSyncMarker) ts = e.value("ts", 0.0);
    return ts;
  };
  for (size_t r = 0; r < docs.size(); ++r)
    check(docs[r].is_object() && docs[r].contains("traceEvents") && docs[r]["traceEvents"].is_array(),
          "trace of rank {}: not a Chrome trace document (no traceEvents array)", r);
  const double base = docs.empty() ? -1 : sync_ts(docs[0]);
  json events = json::array();
  for (size_t r = 0; r < docs.size(); ++r) {
    const int pid = static_cast<int>(r);
    const double mine = sync_ts(docs[r]);
    const double shift = base >= 0 && mine >= 0 ? base - mine : 0.0;
    events.push_back({{"ph", "M"},
                      {"name", "process_name"},
                      {"pid", pid},
                      {"tid", 0},
                      {"args", {{"name", fmt::format("rank {}", r)}}}});
    events.push_back({{"ph", "M"},
                      {"name", "process_sort_index"},
                      {"pid", pid},
                      {"tid", 0},
                      {"args", {{"sort_index", pid}}}});
    for (json e : docs[r]["traceEvents"]) {
      if (e.value("ph", "") == "M" && e.value("name", "") == "process_name") continue;
      e["pid"] = pid;
      if (e.contains("ts") && e["ts"].is_number()) e["ts"] = e["ts"].get<double>() + shift;
      if (e.contains("id") && e["id"].is_string()) {
        // Async ranges pair by id across the whole file: keep each rank's apart.
        e["id"] = fmt::format("r{}.{}", r, e["id"].get<std::string>());
      }
      events.push_back(std::move(e));
    }
  }
  json other = {{"recorder", "ridge trace, merged over MPI ranks"}, {"ranks", docs.size()}};
  if (!docs.empty() && docs[0].contains("otherData")) other["rank0"] = docs[0]["otherData"];
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", other}};
}

nlohmann::json gather_trace() {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const std::string mine = trace::to_json().dump();
  // Checked with agree() so that a rank over the limit ends every rank instead of leaving them in MPI_Gather.
  agree(mine.size() < static_cast<size_t>(INT32_MAX)
            ? std::string()
            : fmt::format("trace: {} bytes on rank {} is beyond MPI's int counts", mine.size(), rank));
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<size_t>(world)), displs(static_cast<size_t>(world));
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int64_t total = 0;
  for (int r = 0; r < world && rank == 0; ++r) {
    displs[static_cast<size_t>(r)] = static_cast<int>(total);
    total += lens[static_cast<size_t>(r)];
  }
  agree(rank != 0 || total < INT32_MAX
            ? std::string()
            : fmt::format("trace: {} bytes over all ranks is beyond MPI's int displacements", total));
  std::string all(rank == 0 ? static_cast<size_t>(total) : 0, '\0');
  MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0,
              MPI_COMM_WORLD);
  // Rank 0 parses and merges; a failure there is agreed on too, so no rank is left waiting in a later
  // collective while rank 0 unwinds.
  nlohmann::json merged;
  std::string err;
  if (rank == 0) {
    try {
      std::vector<nlohmann::json> docs;
      for (int r = 0; r < world; ++r)
        docs.push_back(input::parse_json(all.substr(static_cast<size_t>(displs[static_cast<size_t>(r)]),
                                                    static_cast<size_t>(lens[static_cast<size_t>(r)])),
                                         fmt::format("rank {}'s trace", r)));
      merged = merge_rank_traces(docs);
    } catch (const std::exception& e) {
      err = fmt::format("trace: merging the ranks' events failed: {}", e.what());
    }
  }
  agree(err);
  return merged;
}

size_t write_merged_trace(const std::string& path) {
  sync_trace();
  const nlohmann::json doc = gather_trace();
  // Only rank 0 writes; agree() ends every rank if that failed (rank 0 throws ridge::Error with the
  // message, the others PeerFailed), so no rank exits 0 beside a failed one. Rank 0 throws the write's
  // own error, about the argument "trace" (as trace::write's), for a caller to name as it took the path.
  std::string err;
  std::optional<Error> write_error;
  size_t events = 0;
  if (!doc.is_null()) {
    try {
      files::write_text(path, doc.dump() + "\n", "trace");
      events = doc["traceEvents"].size();
    } catch (const Error& e) {
      err = e.what();
      write_error = e;
    } catch (const std::exception& e) {
      err = e.what();
    }
  }
  try {
    agree(err);
  } catch (const Error&) {
    if (write_error) throw *write_error;
    throw;
  }
  return events;
}

}  // namespace ridge::distributed
