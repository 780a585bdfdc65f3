#include "ridge/distributed.hpp"
#include "ridge/core/hash.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>

#include "bench/json.hpp"
#include "core/check.hpp"
#include "distributed/expert_exchange.hpp"
#include "ridge/bench/trace.hpp"
#include "ridge/core/env.hpp"
#include "ridge/core/error.hpp"
#include "ridge/core/files.hpp"
#include "ridge/model/optim.hpp"

namespace ridge::distributed {

namespace {

double now() {
  return MPI_Wtime();
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// MPI counts are int: longer ranges go in pieces of at most 2^30 elements.
constexpr int64_t kMaxCount = int64_t{1} << 30;

// The elements [begin, begin + n) in pieces of at most kMaxCount: piece(offset, count) for each, in order.
template <typename F>
void for_each_piece(int64_t begin, int64_t n, F&& piece) {
  for (int64_t o = 0; o < n; o += kMaxCount) piece(begin + o, static_cast<int>(std::min(kMaxCount, n - o)));
}

// The counts and displacements of a v-collective (Allgatherv, Gatherv) over contiguous shards in rank
// order, in units of `unit` elements (a shard that ends on a partial unit counts it whole; every shard
// begins on a multiple of `unit`).
struct CountsDispls {
  std::vector<int> counts, displs;
};
CountsDispls counts_displs(const std::vector<std::pair<int64_t, int64_t>>& shards, int64_t unit = 1) {
  CountsDispls c;
  for (const auto& [b, e] : shards) {
    c.displs.push_back(static_cast<int>(b / unit));
    c.counts.push_back(static_cast<int>((e - b + unit - 1) / unit));
  }
  return c;
}

}  // namespace

Session::Session() {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    // Only the main thread calls MPI (OpenMP workers never do).
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      fail("MPI_Init_thread failed: is this process started by mpirun?");
    owns_ = true;
  }
  rank_ = world_rank();
  size_ = world_size();
}

Session::~Session() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_ && !finalized) MPI_Finalize();
}

void abort_all(const std::string& message, int code) {
  std::fprintf(stderr, "ridge: rank %d: %s\n", world_rank(), message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void agree(const std::string& error) {
  const int rank = world_rank();
  int mine = error.empty() ? INT_MAX : rank, first = INT_MAX;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == INT_MAX) return;
  int len = rank == first ? static_cast<int>(error.size()) : 0;
  MPI_Bcast(&len, 1, MPI_INT, first, MPI_COMM_WORLD);
  std::string msg = rank == first ? error : std::string(static_cast<size_t>(len), ' ');
  MPI_Bcast(msg.data(), len, MPI_CHAR, first, MPI_COMM_WORLD);
  if (rank == 0) throw Error(first == 0 ? msg : fmt::format("rank {}: {}", first, msg));
  throw PeerFailed{};
}

namespace {

constexpr const char* kNotGiven = "not given";

// A string from `root` to every rank (its length first).
std::string bcast_string(const std::string& s, int root) {
  int len = world_rank() == root ? static_cast<int>(s.size()) : 0;
  MPI_Bcast(&len, 1, MPI_INT, root, MPI_COMM_WORLD);
  std::string out = world_rank() == root ? s : std::string(static_cast<size_t>(len), '\0');
  MPI_Bcast(out.data(), len, MPI_CHAR, root, MPI_COMM_WORLD);
  return out;
}

std::string flat(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// The entries that count: "not given" is the same as absent; sorted by name, so that the hash does not
// depend on the order (--set a=1 --set b=2 is the grid --set b=2 --set a=1 is).
Fingerprint canonical(const Fingerprint& fp) {
  Fingerprint out;
  for (const auto& e : fp)
    if (e.second != kNotGiven) out.push_back(e);
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

// name NUL value NUL ..., for the hash and for the broadcast (argv and our own values hold no NUL).
std::string serialize(const Fingerprint& fp) {
  std::string s;
  for (const auto& [name, value] : fp) {
    s += name;
    s += '\0';
    s += value;
    s += '\0';
  }
  return s;
}

Fingerprint deserialize(const std::string& s) {
  Fingerprint fp;
  size_t i = 0;
  while (i < s.size()) {
    const size_t a = s.find('\0', i);
    const size_t b = a == std::string::npos ? std::string::npos : s.find('\0', a + 1);
    if (b == std::string::npos) break;
    fp.emplace_back(s.substr(i, a - i), s.substr(a + 1, b - a - 1));
    i = b + 1;
  }
  return fp;
}

std::string value_of(const Fingerprint& fp, const std::string& name) {
  for (const auto& [n, v] : fp)
    if (n == name) return v;
  return kNotGiven;
}

// This rank's first entry (in its own order, then rank 0's extra ones) whose value differs from rank 0's.
std::string first_difference(const Fingerprint& mine, const Fingerprint& theirs) {
  auto line = [](const std::string& name, const std::string& here, const std::string& there) {
    return fmt::format(
        "{}: {} here but {} on rank 0 (every MPI rank must be given the same command line and data)", name,
        here, there);
  };
  for (const auto& [name, value] : mine)
    if (value != kNotGiven && value != value_of(theirs, name))
      return line(name, value, value_of(theirs, name));
  for (const auto& [name, value] : theirs)
    if (value != kNotGiven && value != value_of(mine, name)) return line(name, value_of(mine, name), value);
  return {};
}

}  // namespace

void agree_to_start(const std::string& error, const Fingerprint& fingerprint) {
  const int rank = world_rank(), n = world_size();
  const Fingerprint mine = canonical(fingerprint);
  const std::string ser = serialize(mine);
  const uint64_t local[2] = {error.empty() ? 0u : 1u, fnv1a(ser.data(), ser.size())};
  std::vector<uint64_t> all(2 * static_cast<size_t>(n));
  MPI_Allgather(local, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, MPI_COMM_WORLD);
  bool failed = false, differ = false;
  for (int r = 0; r < n; ++r) {
    failed = failed || all[2 * static_cast<size_t>(r)] != 0;
    differ = differ || all[2 * static_cast<size_t>(r) + 1] != all[1];
  }
  if (!failed && !differ) return;
  std::string problem = flat(error);
  if (!failed) {
    // Rank 0's entries to every rank; each rank that differs names its first difference in its own order
    // ("the command line differs" if none is found by name: the same entries given twice, say).
    const Fingerprint theirs = deserialize(bcast_string(rank == 0 ? ser : std::string(), 0));
    problem.clear();
    if (all[2 * static_cast<size_t>(rank) + 1] != all[1]) {
      problem = flat(first_difference(fingerprint, theirs));
      if (problem.empty())
        problem =
            "the command line differs from rank 0's (every MPI rank must be given the same command line and "
            "data)";
    }
  }
  std::string line;
  try {
    agree(problem);
  } catch (const Error& e) {
    line = e.what();  // rank 0: the lowest rank's problem, prefixed "rank R: " when R is not 0
  } catch (const PeerFailed&) {
  }
  if (rank == 0) {
    const std::string out = "ridge: " + line + "\n";
    std::fflush(stderr);
    std::fwrite(out.data(), 1, out.size(), stderr);
    std::fflush(stderr);
  }
  // No rank leaves (and exits, which mpirun answers by ending the others) before the line is written.
  MPI_Barrier(MPI_COMM_WORLD);
  throw PeerFailed{};
}

bool mpi_started() {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  return inited || finalized;
}

Joined join_to_finish(const std::string& error, const Fingerprint& fingerprint) {
  Joined j;
  if (mpi_started()) return j;
  std::optional<Session> session;
  try {
    session.emplace();
  } catch (const Error&) {
    return j;
  }
  j.joined = true;
  j.rank = session->rank();
  try {
    agree_to_start(error, fingerprint);
    j.agreed = true;
  } catch (const PeerFailed&) {
  }
  return j;
}

void check_same(uint64_t value, const std::string& what) {
  const int n = world_size();
  std::vector<uint64_t> all(static_cast<size_t>(n));
  MPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  for (int r = 1; r < n; ++r) {
    if (all[static_cast<size_t>(r)] == all[0]) continue;
    if (world_rank() == 0)
      fail("rank {} has a different {} from rank 0's (every rank must get the same arguments and data)", r,
           what);
    throw PeerFailed{};
  }
}

double mean(double x) {
  double s = 0;
  MPI_Allreduce(&x, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return s / world_size();
}

void DataParallel::sum_expert_counts(std::span<int64_t> counts) {
  // Every worker routes its own tokens; the load and the router biases move from the global counts.
  if (world_ > 1 && !counts.empty())
    MPI_Allreduce(MPI_IN_PLACE, counts.data(), static_cast<int>(counts.size()), MPI_INT64_T, MPI_SUM,
                  MPI_COMM_WORLD);
}

double max(double x) {
  double m = 0;
  MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

DdpMode parse_ddp_mode(const std::string& name) {
  if (name == "naive") return DdpMode::naive;
  if (name == "flat") return DdpMode::flat;
  if (name == "overlap") return DdpMode::overlap;
  if (name == "bucketed") return DdpMode::bucketed;
  fail("mode: '{}' is not a data-parallel mode (accepted: naive, flat, overlap, bucketed)", name);
}
const char* ddp_mode_name(DdpMode m) {
  switch (m) {
    case DdpMode::naive:
      return "naive";
    case DdpMode::flat:
      return "flat";
    case DdpMode::overlap:
      return "overlap";
    case DdpMode::bucketed:
      return "bucketed";
  }
  return "?";
}
Sharding parse_sharding(const std::string& name) {
  if (name == "none") return Sharding::none;
  if (name == "cs336") return Sharding::cs336;
  if (name == "zero1") return Sharding::zero1;
  fail("sharding: '{}' is not an optimizer sharding scheme (accepted: none, cs336, zero1)", name);
}
const char* sharding_name(Sharding s) {
  switch (s) {
    case Sharding::none:
      return "none";
    case Sharding::cs336:
      return "cs336";
    case Sharding::zero1:
      return "zero1";
  }
  return "?";
}

void DdpConfig::validate() const {
  check(std::isfinite(bucket_mb) && bucket_mb > 0, "bucket_mb: must be finite and > 0, got {}", bucket_mb);
  check_arg(!expert_parallel || sharding == Sharding::none, "expert_parallel",
            "optimizer sharding ({}) does not combine with expert parallelism: each rank already steps only "
            "its own experts, and a shard would cut across other ranks' (run without the sharding)",
            sharding_name(sharding));
}

std::vector<Bucket> plan_buckets(const std::vector<model::TensorInfo>& tensors,
                                 const std::vector<bool>& frozen, double bucket_mb) {
  check(frozen.size() == tensors.size(), "frozen: {} flags for {} tensors", frozen.size(), tensors.size());
  check(bucket_mb >= 0, "bucket_mb: must be >= 0, got {}", bucket_mb);
  const double limit = bucket_mb * 1e6 / sizeof(float);  // elements
  std::vector<Bucket> out;
  bool open = false;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    if (frozen[i]) {
      open = false;
      continue;
    }
    if (open && static_cast<double>(out.back().numel + t.numel) <= limit) {
      Bucket& b = out.back();
      b.last = static_cast<int>(i);
      b.numel += t.numel;
      b.ready_group = std::max(b.ready_group, t.group);
      continue;
    }
    out.push_back({static_cast<int>(i), static_cast<int>(i), t.offset, t.numel, t.group});
    open = true;
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> shard_by_tensor(const std::vector<model::TensorInfo>& tensors,
                                                         const std::vector<bool>& frozen, int world) {
  check(world >= 1, "world: must be >= 1, got {}", world);
  check(frozen.size() == tensors.size(), "frozen: {} flags for {} tensors", frozen.size(), tensors.size());
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!frozen[i]) total += tensors[i].numel;
  // Rank r takes tensors until its cumulative share passes (r + 1) / world of the total, so the
  // ranges are contiguous and each within one tensor of an even split.
  std::vector<std::pair<int64_t, int64_t>> out;
  const int64_t end_all = tensors.empty() ? 0 : tensors.back().offset + tensors.back().numel;
  size_t i = 0;
  int64_t done = 0, begin = 0;
  for (int r = 0; r < world; ++r) {
    const double target = static_cast<double>(total) * (r + 1) / world;
    while (i < tensors.size() &&
           (r == world - 1 ||
            static_cast<double>(done) + (frozen[i] ? 0.0 : 0.5 * static_cast<double>(tensors[i].numel)) <=
                target)) {
      if (!frozen[i]) done += tensors[i].numel;
      ++i;
    }
    const int64_t end = r == world - 1 ? end_all : (i < tensors.size() ? tensors[i].offset : end_all);
    out.emplace_back(begin, end);
    begin = end;
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> shard_flat(int64_t n, int world, int64_t align) {
  check(world >= 1, "world: must be >= 1, got {}", world);
  check(align >= 1, "align: must be >= 1, got {}", align);
  const int64_t units = (n + align - 1) / align;
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int r = 0; r < world; ++r) {
    const int64_t b = std::min(n, units * r / world * align),
                  e = std::min(n, units * (r + 1) / world * align);
    out.emplace_back(b, e);
  }
  return out;
}

std::pair<int64_t, int64_t> initial_optimizer_range(Sharding sharding, int64_t param_count, int world,
                                                    int rank) {
  check(rank >= 0 && rank < world, "rank: {} is not a rank of a {}-rank run", rank, world);
  switch (sharding) {
    case Sharding::zero1:
      return shard_flat(param_count, world, model::kNormChunk)[static_cast<size_t>(rank)];
    case Sharding::cs336:
      return {0, 0};
    case Sharding::none:
      break;
  }
  return {0, -1};
}

// ------------------------------------------------------------------------------------------------

struct DataParallel::Impl {
  struct Pending {
    MPI_Request req = MPI_REQUEST_NULL;
    size_t bucket = 0;
    std::vector<int> counts;  // a reduce-scatter's receive counts (alive until it completes)
    trace::Handle range;
    bool done = false;
  };
  std::vector<Pending> pending;
  size_t next_bucket = 0;
  float* grads = nullptr;
  double first_start = -1, last_done = -1;
  // Time backward's thread spent inside MPI calls (posting and testing requests): communication that
  // delays the backward pass, so it counts as exposed, not hidden.
  double in_calls = 0;
  // zero1: this rank's shard of the summed gradient, filled by the reduce-scatters.
  Buffer<float> shard_buf;
  // RIDGE_TEST_DIE_AT_STEP on the rank RIDGE_TEST_DIE_RANK names, 0 elsewhere (test only).
  int64_t die_at_step = 0;
  // Expert parallelism: the exchange the model's MoE layers call, the flat ranges of this rank's expert
  // stacks (its block of each), and the exchange's byte count at the end of the last step.
  std::unique_ptr<MpiExpertExchange> exchange;
  std::vector<std::pair<int64_t, int64_t>> own;
  int64_t expert_bytes_before = 0, expert_exchanges_before = 0;

  // The test-only fault injection: this rank ends abruptly, as a crash would, with no MPI_Finalize,
  // while the others are inside the same step's collectives. `step` is the step being run (1-based).
  void maybe_die(int rank, int64_t step) const {
    if (die_at_step == 0 || step != die_at_step) return;
    std::fprintf(
        stderr,
        "ridge: rank %d: RIDGE_TEST_DIE_AT_STEP=%lld: exiting with status 3 in the backward pass of step "
        "%lld%s (test-only fault injection)\n",
        rank, static_cast<long long>(die_at_step), static_cast<long long>(die_at_step),
        pending.empty() ? "" : ", a non-blocking gradient reduction outstanding");
    std::fflush(stderr);
    std::_Exit(3);
  }
};

// One bucket's reduction, blocking or not: an all-reduce, or under zero1 a reduce-scatter whose
// receive counts are the bucket's overlaps with each rank's shard (the shards are contiguous and in
// rank order, so the bucket's pieces are exactly the overlaps, in order). Pieces of at most kMaxCount
// elements keep every count an int.
void DataParallel::launch(size_t bucket, bool blocking) {
  Impl& s = *impl_;
  const Bucket& bk = buckets_[bucket];
  float* g = s.grads;
  for_each_piece(bk.offset, bk.numel, [&](int64_t pb, int count) {
    const int64_t pe = pb + count;
    Impl::Pending q;
    q.bucket = bucket;
    if (cfg_.sharding == Sharding::zero1) {
      const auto [mb, me] = shards_[static_cast<size_t>(rank_)];
      for (const auto& [sb, se] : shards_)
        q.counts.push_back(static_cast<int>(std::max<int64_t>(0, std::min(se, pe) - std::max(sb, pb))));
      float* recv = s.shard_buf.data() + std::clamp<int64_t>(pb - mb, 0, me - mb);
      if (blocking)
        MPI_Reduce_scatter(g + pb, recv, q.counts.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else
        MPI_Ireduce_scatter(g + pb, recv, q.counts.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &q.req);
    } else if (blocking) {
      MPI_Allreduce(MPI_IN_PLACE, g + pb, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else {
      MPI_Iallreduce(MPI_IN_PLACE, g + pb, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &q.req);
    }
    if (!blocking) s.pending.push_back(std::move(q));
  });
  stats_.bytes += bk.numel * 4;
  ++stats_.collectives;
}

DataParallel::DataParallel(model::Trainer& trainer, const DdpConfig& config)
    : trainer_(trainer), cfg_(config), impl_(std::make_unique<Impl>()) {
  config.validate();
  rank_ = world_rank();
  world_ = world_size();
  if (const auto& k = env::knobs(); k.test_die_at_step > 0) {
    check(k.test_die_rank < world_,
          "RIDGE_TEST_DIE_RANK: {} is not a rank of this {}-rank run (expected 0 .. {})", k.test_die_rank,
          world_, world_ - 1);
    if (k.test_die_rank == rank_) impl_->die_at_step = k.test_die_at_step;
  }
  auto& m = trainer_.model();
  const auto& tensors = m.tensors();
  // Expert parallelism: each expert's gradient is whole at its owner, so the stacked experts join no
  // bucket, as frozen tensors do.
  std::vector<bool> frozen = trainer_.frozen_flags();
  if (cfg_.expert_parallel) {
    check_arg(m.config().is_moe(), "expert_parallel", "needs an MoE model (this one is dense)");
    const int64_t E = m.config().num_experts;
    check_arg(E % world_ == 0, "expert_parallel",
              "{} ranks do not share out {} experts evenly (the experts must be a multiple of the ranks)",
              world_, E);
    const model::ExpertShard& h = m.expert_shard();
    check_arg(h == model::ExpertShard{rank_, world_}, "expert_parallel",
              "rank {} of {} holds the experts of worker {} of {}: build its trainer with "
              "TrainConfig::experts = {{{}, {}}}",
              rank_, world_, h.rank, h.world, rank_, world_);
    for (size_t i = 0; i < tensors.size(); ++i)
      if (tensors[i].expert_stack()) {
        impl_->own.emplace_back(tensors[i].offset, tensors[i].offset + tensors[i].numel);
        frozen[i] = true;
      }
  }
  switch (cfg_.mode) {
    case DdpMode::naive:
    case DdpMode::overlap:
      buckets_ = plan_buckets(tensors, frozen, 0);
      break;  // one tensor each
    case DdpMode::flat:
      buckets_ = plan_buckets(tensors, frozen, std::numeric_limits<double>::infinity());
      break;
    case DdpMode::bucketed:
      buckets_ = plan_buckets(tensors, frozen, cfg_.bucket_mb);
      break;
  }
  const auto n = static_cast<int64_t>(m.params().size());
  if (cfg_.sharding == Sharding::cs336) shards_ = shard_by_tensor(tensors, frozen, world_);
  if (cfg_.sharding == Sharding::zero1) {
    shards_ = shard_flat(n, world_, model::kNormChunk);
    for (const auto& [b, e] : shards_)
      check(e - b < INT_MAX, "sharding: a zero1 shard of {} elements is beyond MPI's int counts", e - b);
  }
  if (cfg_.sharding == Sharding::zero1) {
    const auto [b, e] = shards_[static_cast<size_t>(rank_)];
    impl_->shard_buf = Buffer<float>(static_cast<size_t>(e - b), "communication/reduce-scatter");
  }
  if (!shards_.empty())
    trainer_.shard_optimizer(shards_[static_cast<size_t>(rank_)].first,
                             shards_[static_cast<size_t>(rank_)].second);
  broadcast_parameters();
  if (cfg_.expert_parallel) {
    impl_->exchange = std::make_unique<MpiExpertExchange>();
    m.set_expert_exchange(impl_->exchange.get());
  }
  trainer_.set_hooks(this);
}

DataParallel::~DataParallel() {
  trainer_.set_hooks(nullptr);
  if (impl_->exchange) trainer_.model().set_expert_exchange(nullptr);
  for (auto& q : impl_->pending)
    if (q.req != MPI_REQUEST_NULL) MPI_Wait(&q.req, MPI_STATUS_IGNORE);
}

std::pair<int64_t, int64_t> DataParallel::shard() const {
  return {trainer_.optimizer_begin(), trainer_.optimizer_end()};
}

void DataParallel::broadcast_parameters() {
  auto p = trainer_.model().params();
  auto bcast = [&](int64_t b, int64_t e) {
    for_each_piece(b, e - b, [&](int64_t o, int count) {
      MPI_Bcast(p.data() + o, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
    });
  };
  // Everything rank 0 holds that the others hold too: under expert parallelism the runs between the
  // expert stacks (each rank's block of a stack is its own, initialised or loaded for it).
  int64_t from = 0;
  for (const auto& [b, e] : impl_->own) {
    bcast(from, b);
    from = e;
  }
  bcast(from, static_cast<int64_t>(p.size()));
}

void DataParallel::group_final(int group) {
  if (cfg_.mode != DdpMode::overlap && cfg_.mode != DdpMode::bucketed) {
    impl_->maybe_die(rank_, trainer_.steps() + 1);
    return;
  }
  Impl& s = *impl_;
  if (s.next_bucket == 0 && s.pending.empty()) {
    s.grads = trainer_.model().grads().data();
    stats_ = {};
    s.first_start = -1;
    s.in_calls = 0;
  }
  const double call_start = now();
  while (s.next_bucket < buckets_.size() && buckets_[s.next_bucket].ready_group <= group) {
    const Bucket& b = buckets_[s.next_bucket];
    const size_t first = s.pending.size();
    if (s.first_start < 0) s.first_start = now();
    // The range opens before the post: posting a large non-blocking collective can take a while (the
    // first round may run inside it), and that time belongs to the communication.
    trace::Handle range;
    if (trace::recording())
      range =
          trace::start_range(fmt::format("{} bucket {} ({} KB)",
                                         cfg_.sharding == Sharding::zero1 ? "reduce-scatter" : "allreduce",
                                         s.next_bucket, b.numel * 4 / 1000),
                             trace::color::orange);
    launch(s.next_bucket, false);
    // A bucket larger than MPI's int counts is several requests; the range ends with the first one's.
    if (s.pending.size() > first) s.pending[first].range = range;
    ++s.next_bucket;
  }
  if (!s.pending.empty()) s.maybe_die(rank_, trainer_.steps() + 1);
  // Progress: OpenMPI's non-blocking collectives advance only inside MPI calls, so test every
  // outstanding request here, between layers of the backward pass.
  RIDGE_RANGE("mpi progress");
  for (auto& q : s.pending) {
    if (q.done) continue;
    int flag = 0;
    MPI_Test(&q.req, &flag, MPI_STATUS_IGNORE);
    if (flag) {
      q.done = true;
      s.last_done = now();
      trace::end_range(q.range);
    }
  }
  s.in_calls += now() - call_start;
}

void DataParallel::reduce_gradients(std::span<float> grads) {
  Impl& s = *impl_;
  const double t0 = now();
  const float inv = static_cast<float>(world_);
  if (cfg_.mode == DdpMode::naive || cfg_.mode == DdpMode::flat) {
    stats_ = {};
    s.grads = grads.data();
    for (size_t i = 0; i < buckets_.size(); ++i) {
      RIDGE_RANGE(cfg_.sharding == Sharding::zero1 ? "reduce-scatter" : "allreduce");
      launch(i, true);
    }
    stats_.comm_s = stats_.exposed_s = now() - t0;
  } else {
    // Buckets no group made ready (none, unless backward ran without the observer) start now.
    if (s.next_bucket == 0 && s.pending.empty()) {
      stats_ = {};
      s.grads = grads.data();
      s.first_start = -1;
    }
    if (s.next_bucket < buckets_.size()) group_final(std::numeric_limits<int>::max());
    const bool all_done =
        std::all_of(s.pending.begin(), s.pending.end(), [](const Impl::Pending& q) { return q.done; });
    const double done_before = s.last_done;
    {
      RIDGE_RANGE("wait gradients");
      for (auto& q : s.pending) {
        if (q.done) continue;
        MPI_Wait(&q.req, MPI_STATUS_IGNORE);
        q.done = true;
        s.last_done = now();
        trace::end_range(q.range);
      }
    }
    // Hidden: communication in flight while backward computed, from the first request to the end of
    // backward (or to the last completion, if everything finished before it).
    // Minus the time backward's thread itself spent posting and testing: that delayed backward, so it
    // is exposed.
    const double in_flight = s.first_start < 0 ? 0.0 : (all_done ? done_before : t0) - s.first_start;
    stats_.hidden_s = std::max(0.0, in_flight - s.in_calls);
    stats_.exposed_s = now() - t0 + std::min(in_flight, s.in_calls);
    stats_.comm_s = stats_.hidden_s + stats_.exposed_s;
    s.pending.clear();
    s.next_bucket = 0;
  }
  if (cfg_.sharding == Sharding::zero1) {
    // Only this rank's shard holds the average; the rest of grads keeps the local sums, which nothing
    // reads (the norm and AdamW take the shard). Frozen tensors are in no bucket: their zeros stay.
    const auto [mb, me] = shards_[static_cast<size_t>(rank_)];
    for (const Bucket& bk : buckets_)
      for (int64_t i = std::max(mb, bk.offset); i < std::min(me, bk.offset + bk.numel); ++i)
        grads[static_cast<size_t>(i)] = s.shard_buf[static_cast<size_t>(i - mb)] / inv;
    return;
  }
  for (const Bucket& bk : buckets_)
    for (int64_t i = bk.offset; i < bk.offset + bk.numel; ++i) grads[static_cast<size_t>(i)] /= inv;
  if (!s.exchange) return;
  // This rank's experts hold the sum over every rank's rows of each rank's loss gradient: the average
  // is that over N, as the dense tensors' all-reduce gives.
  for (const auto& [b, e] : s.own)
    for (int64_t i = b; i < e; ++i) grads[static_cast<size_t>(i)] /= inv;
  stats_.expert_bytes = s.exchange->bytes_sent() - s.expert_bytes_before;
  stats_.expert_exchanges = static_cast<int>(s.exchange->exchanges() - s.expert_exchanges_before);
  s.expert_bytes_before = s.exchange->bytes_sent();
  s.expert_exchanges_before = s.exchange->exchanges();
}

double DataParallel::grad_norm(std::span<const float> grads) {
  if (impl_->exchange) {
    // The dense part is the same averaged gradient on every rank; each expert block's is its owner's.
    auto sq = [&](int64_t b, int64_t e) {
      double s = 0;
      for (int64_t i = b; i < e; ++i)
        s += static_cast<double>(grads[static_cast<size_t>(i)]) * grads[static_cast<size_t>(i)];
      return s;
    };
    double dense = 0, experts = 0, all_experts = 0;
    for (const auto& t : trainer_.model().tensors())
      if (!t.expert_stack()) dense += sq(t.offset, t.offset + t.numel);
    for (const auto& [b, e] : impl_->own) experts += sq(b, e);
    MPI_Allreduce(&experts, &all_experts, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return std::sqrt(dense + all_experts);
  }
  if (cfg_.sharding != Sharding::zero1) return model::grad_norm<float>(grads);
  // The shard boundaries are multiples of kNormChunk: each rank sums its chunks, the chunk sums are
  // gathered and added in order, the same bits as grad_norm over the whole averaged gradient.
  const auto [b, e] = shards_[static_cast<size_t>(rank_)];
  const int64_t chunks_all = (static_cast<int64_t>(grads.size()) + model::kNormChunk - 1) / model::kNormChunk;
  const CountsDispls c = counts_displs(shards_, model::kNormChunk);
  std::vector<double> all(static_cast<size_t>(chunks_all));
  std::vector<double> mine(static_cast<size_t>(c.counts[static_cast<size_t>(rank_)]));
  model::grad_sq_chunks<float>(grads.subspan(static_cast<size_t>(b), static_cast<size_t>(e - b)), mine);
  MPI_Allgatherv(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), c.counts.data(),
                 c.displs.data(), MPI_DOUBLE, MPI_COMM_WORLD);
  return model::norm_from_chunks(all);
}

void DataParallel::after_update(std::span<float> params) {
  const double t0 = now();
  if (cfg_.sharding == Sharding::zero1) {
    const CountsDispls c = counts_displs(shards_);
    check(params.size() < static_cast<size_t>(INT_MAX),
          "params: {} values are beyond MPI's int displacements", params.size());
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, params.data(), c.counts.data(), c.displs.data(), MPI_FLOAT,
                   MPI_COMM_WORLD);
  } else if (cfg_.sharding == Sharding::cs336) {
    // Each rank broadcasts the unfrozen tensors it stepped.
    const auto& tensors = trainer_.model().tensors();
    for (int r = 0; r < world_; ++r) {
      const auto [b, e] = shards_[static_cast<size_t>(r)];
      for (size_t i = 0; i < tensors.size(); ++i) {
        const auto& t = tensors[i];
        if (trainer_.frozen(i) || t.offset + t.numel <= b || t.offset >= e) continue;
        for_each_piece(t.offset, t.numel, [&](int64_t o, int count) {
          MPI_Bcast(params.data() + o, count, MPI_FLOAT, r, MPI_COMM_WORLD);
        });
      }
    }
  }
  stats_.comm_s += now() - t0;
  stats_.exposed_s += now() - t0;
}

void DataParallel::save(const std::string& path) {
  if (impl_->exchange && world_ > 1) {
    // Rank 0 writes the single process's file: each expert stack (weights, AdamW's m and v) gathered
    // from every rank's block as the writer reaches it (the blocks are in rank order), one at a time, so
    // no rank ever holds more than one whole stack. The others send theirs in the same order.
    auto params = trainer_.model().params();
    auto m = trainer_.optimizer().m(), v = trainer_.optimizer().v();
    const std::span<float> parts[3] = {params, m, v};
    auto gather = [&](const model::TensorInfo& t, int part, float* whole) {
      check(t.numel < INT_MAX, "save: an expert block of {} values is beyond MPI's int counts", t.numel);
      MPI_Gather(parts[part].data() + t.offset, static_cast<int>(t.numel), MPI_FLOAT, whole,
                 static_cast<int>(t.numel), MPI_FLOAT, 0, MPI_COMM_WORLD);
    };
    if (rank_ == 0) {
      trainer_.save(path, [&](const model::TensorInfo& t, int part, std::span<float> dst) {
        gather(t, part, dst.data());
      });
      return;
    }
    for (const auto& t : trainer_.model().tensors())
      if (t.expert_stack())
        for (int part = 0; part < 3; ++part) gather(t, part, nullptr);
    return;
  }
  if (cfg_.sharding == Sharding::none) {
    if (rank_ == 0) trainer_.save(path);
    return;
  }
  const auto n = trainer_.model().params().size();
  const CountsDispls c = counts_displs(shards_);
  // Rank 0's whole-model copies of m and v, for the checkpoint only (freed when it is written).
  Buffer<float> m(rank_ == 0 ? n : 0, "communication/checkpoint gather"),
      v(rank_ == 0 ? n : 0, "communication/checkpoint gather");
  auto mine_m = trainer_.optimizer().m();
  auto mine_v = trainer_.optimizer().v();
  MPI_Gatherv(mine_m.data(), static_cast<int>(mine_m.size()), MPI_FLOAT, m.data(), c.counts.data(),
              c.displs.data(), MPI_FLOAT, 0, MPI_COMM_WORLD);
  MPI_Gatherv(mine_v.data(), static_cast<int>(mine_v.size()), MPI_FLOAT, v.data(), c.counts.data(),
              c.displs.data(), MPI_FLOAT, 0, MPI_COMM_WORLD);
  if (rank_ == 0) trainer_.save(path, m.span(), v.span());
}

void DataParallel::save_checkpoint(const model::Trainer& trainer, const std::string& path) {
  check(&trainer == &trainer_, "trainer: DataParallel saves the trainer it was built on, not another");
  save(path);
}

}  // namespace ridge::distributed
