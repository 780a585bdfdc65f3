// Data-parallel training over MPI: every rank holds the whole model, trains on its slice of the
// global batch, and the gradients are averaged across ranks before each optimizer step.
//
//   naive     one blocking all-reduce per parameter tensor after the backward pass
//   flat      one all-reduce of the flat gradient buffer (one per contiguous run of unfrozen tensors)
//   overlap   a non-blocking all-reduce per tensor, started from the backward observer as soon as the
//             tensor's group is final; the observer tests the outstanding requests, which is what makes
//             OpenMPI's non-blocking collectives progress while the next layer's backward runs
//   bucketed  the same per bucket: tensors in flat order (= reverse parameter order, the order
//             backward finishes them) packed into contiguous buckets of at most bucket_mb MB
//
// Optimizer-state sharding, with every mode above: `cs336` assigns whole tensors to ranks
// (contiguous, balanced by size); the gradients are all-reduced as the mode says, each rank steps its
// tensors and broadcasts them. `zero1` cuts the flat buffer into one contiguous shard per rank
// (aligned to the norm's chunks, so the global norm is grad_norm's exact bits) and replaces each of
// the mode's all-reduces by a reduce-scatter of the same bucket whose receive counts are the bucket's
// overlaps with the shards: naive one per tensor after backward, flat one per contiguous run of
// unfrozen tensors, overlap and bucketed non-blocking ones started from the backward observer (the
// ZeRO-with-overlap / FSDP pattern). Each rank then steps its shard and the shards are all-gathered.
// Either way a rank holds AdamW state for its range only.
//
// Averaging is sum / world size. Frozen tensors are never reduced (they are in no bucket); zero1's
// all-gather of the parameters covers the whole flat buffer (frozen values are equal on every rank).
//
// Expert parallelism (expert_parallel, an MoE model, with every mode above and no optimizer sharding):
// rank r holds and owns the block [r E / N, (r + 1) E / N) of every MoE layer's experts: its trainer is
// built with TrainConfig::experts = {r, N}, so its weights, gradients and AdamW state for the experts are
// 1/N of the single process's. Each MoE layer sends its tokens' rows to the experts' owners and the
// outputs back (model::ExpertExchange over MPI all-to-alls), so an expert's gradient is whole at its
// owner: the stacked expert tensors are in no bucket and not broadcast, the owner divides its block by N
// (the average, as the all-reduce gives the dense tensors) and steps it. save() writes the single
// process's file from rank 0, each stack gathered from every rank's block as the writer reaches it (one
// whole stack at a time); a resume loads each rank's block.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ridge/model/model.hpp"
#include "ridge/model/train.hpp"

namespace ridge::distributed {

// MPI for this process: initialised by the first Session, finalised when it is destroyed.
class Session {
 public:
  Session();
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  int rank_ = 0, size_ = 1;
  bool owns_ = false;
};

// Prints "ridge: rank R: message" on stderr and ends every rank (MPI_Abort with `code`).
[[noreturn]] void abort_all(const std::string& message, int code = 2);

// Thrown on the ranks that did not fail when agree() finds that another one did (that rank, or rank
// 0, prints the line); the caller exits with status 2 without printing.
struct PeerFailed {};

// What the ranks of one MPI job must agree on before their first collective: (name, value) pairs,
// each named as the user gave it ("command", "--set size", "--trace", "--data (contents)") with its
// value as a message shows it ("'4M'", "given", "1000 tokens, fnv1a 0123abcd..."). An entry left out
// is "not given"; an entry whose value is "not given" is the same as one left out. Order is the order
// a difference is looked for in; it does not change the agreement.
using Fingerprint = std::vector<std::pair<std::string, std::string>>;

// The first collective of every MPI command (ridge train under mpirun, ridge bench allreduce and ddp),
// called by every rank right after its Session starts: `error` is what this rank found wrong so far
// ("" when nothing), `fingerprint` everything that must be equal on every rank (the command line as
// given, the data's length and content hash: whatever decides which collectives run, with what counts).
// One all-gather of (failed, hash of the fingerprint); only when they differ, rank 0's fingerprint goes
// to every rank and each names its first entry that differs from rank 0's. Returns when every rank
// agrees. Otherwise rank 0 prints one line on stderr for the job, "ridge: MESSAGE" for its own error
// or "ridge: rank R: MESSAGE" for the lowest rank R that failed or differs (an error before a
// difference), every rank waits until that line is written, and every rank throws PeerFailed: the
// caller exits with status 2 without printing. Never a hang, a truncated message or a signal.
void agree_to_start(const std::string& error, const Fingerprint& fingerprint);

// For a process of a job of several ranks that ends without having started MPI (its command failed
// before its agreement, asked for help, or is not an MPI command): starts MPI, takes part in
// agree_to_start(error, fingerprint) so that the job prints one line and no rank waits forever for
// this one, and ends MPI. joined is false when MPI had started already or cannot start (then print
// the error yourself); agreed is true when every rank agreed (error was ""), false when the job
// stopped and its line is printed (exit with status 2).
struct Joined {
  bool joined = false, agreed = false;
  int rank = 0;
};
Joined join_to_finish(const std::string& error, const Fingerprint& fingerprint);

// True once this process has called MPI_Init (even if MPI has ended since): it can take part in no
// more agreements.
bool mpi_started();

// A collective check after a phase every rank runs (setup): error is this rank's message ("" when it
// succeeded). If any rank failed, rank 0 throws ridge::Error("rank R: message") for the lowest
// failing rank R and every other rank throws PeerFailed.
void agree(const std::string& error);

// All ranks must pass equal values (a hash of the configuration and the data): otherwise ridge::Error
// on rank 0 naming the first rank that differs and `what`, PeerFailed on the others.
void check_same(uint64_t value, const std::string& what);

// The ranks compare hashes by ridge::fnv1a (ridge/core/hash.hpp), the one hash in ridge.

// Mean of x over the ranks (the loss for printing, a time).
double mean(double x);
double max(double x);

// Collective (every rank calls it with the same path, while trace recording is on): a barrier and a
// sync marker on every rank, then rank 0 gathers every rank's trace events and writes one Chrome trace
// with one process row per rank (pid = rank, process_name "rank R"), each rank's clock shifted so the
// sync markers coincide, async range ids prefixed with the rank (src/distributed/trace_merge.*).
// Returns the events written on rank 0, 0 elsewhere. Any failure is ridge::Error on rank 0 (a failed
// write's is about the argument "trace", as trace::write's) and PeerFailed on the others (agree()),
// never a hang.
size_t write_merged_trace(const std::string& path);

enum class DdpMode { naive, flat, overlap, bucketed };
DdpMode parse_ddp_mode(const std::string& name);  // ridge::Error listing the modes otherwise
const char* ddp_mode_name(DdpMode m);
enum class Sharding { none, cs336, zero1 };
Sharding parse_sharding(const std::string& name);  // "none", "cs336", "zero1"
const char* sharding_name(Sharding s);

struct DdpConfig {
  DdpMode mode = DdpMode::flat;
  double bucket_mb = 25;  // bucketed only: MB = 1e6 bytes
  Sharding sharding = Sharding::none;
  bool expert_parallel = false;  // an MoE model's experts sharded over the ranks (see the top)
  void validate() const;         // ridge::Error naming bucket_mb, or expert_parallel with sharding
};

// A run of tensors [first, last] contiguous in the flat buffer, reduced as one.
struct Bucket {
  int first = 0, last = 0;  // tensor indices, inclusive
  int64_t offset = 0, numel = 0;
  int ready_group = 0;  // the backward group after which all its gradients are final
};
// Buckets of at most bucket_mb MB of fp32 gradients over the unfrozen tensors in flat order; a frozen
// tensor ends a bucket (a bucket is one slice), a tensor larger than the limit gets a bucket alone.
std::vector<Bucket> plan_buckets(const std::vector<model::TensorInfo>& tensors,
                                 const std::vector<bool>& frozen, double bucket_mb);
// cs336: contiguous tensor ranges per rank, balanced by unfrozen elements; [begin, end) offsets.
std::vector<std::pair<int64_t, int64_t>> shard_by_tensor(const std::vector<model::TensorInfo>& tensors,
                                                         const std::vector<bool>& frozen, int world);
// zero1: the flat range cut into `world` pieces on multiples of `align` elements.
std::vector<std::pair<int64_t, int64_t>> shard_flat(int64_t n, int world, int64_t align);
// The optimizer range a rank builds its Trainer with (TrainConfig::optimizer_begin / optimizer_end),
// so that no rank ever holds more AdamW state than its own shard: zero1's shard, which depends only on
// the parameter count; for cs336, whose shard depends on the tensor layout and the frozen flags (known
// once the trainer exists), the empty range [0, 0), and DataParallel allocates the shard alone;
// none: the whole range [0, -1).
std::pair<int64_t, int64_t> initial_optimizer_range(Sharding sharding, int64_t param_count, int world,
                                                    int rank);

// Communication time of the last step (seconds): all of it, and the part that ran while backward was
// still computing (overlap and bucketed: from a request's start to the end of backward).
struct CommStats {
  double comm_s = 0;  // wall time inside MPI calls and waits after backward, plus overlapped spans
  double exposed_s =
      0;  // time after backward spent finishing gradient communication, plus the time the
          // backward thread spent inside MPI calls posting/testing requests (it delayed backward)
  double hidden_s = 0;  // communication in flight while backward computed, less that time inside MPI calls
  int64_t bytes = 0;    // gradient bytes this rank sent into collectives
  int collectives = 0;
  // Expert parallelism: bytes this rank's all-to-alls sent to other ranks, and the all-to-alls, in the
  // last step (forward and backward).
  int64_t expert_bytes = 0;
  int expert_exchanges = 0;
};

// Plugs data parallelism into a Trainer: broadcasts rank 0's parameters, shards the optimizer, and
// reduces gradients in the configured way at every step. The trainer's batch is this rank's slice;
// model::train on the trainer draws the global batch, steps on this rank's slice, reports the mean
// loss over the ranks and saves through save() below.
class DataParallel : public model::StepHooks {
 public:
  DataParallel(model::Trainer& trainer, const DdpConfig& config);
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  const DdpConfig& config() const { return cfg_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  std::pair<int64_t, int64_t> shard() const;  // this rank's optimizer range
  const CommStats& last_stats() const { return stats_; }

  // Rank 0's parameters to every rank (also done by the constructor).
  void broadcast_parameters();
  // Writes the checkpoint on rank 0 (gathering the sharded optimizer state first); collective.
  void save(const std::string& path);

  void group_final(int group) override;
  void reduce_gradients(std::span<float> grads) override;
  double grad_norm(std::span<const float> grads) override;
  void after_update(std::span<float> params) override;
  double mean_loss(double loss) override { return distributed::mean(loss); }
  void sum_expert_counts(std::span<int64_t> counts) override;
  void save_checkpoint(const model::Trainer& trainer, const std::string& path) override;

 private:
  struct Impl;  // MPI requests and buffers, and the test-only fault injection (distributed.cpp)
  // One bucket's all-reduce, or zero1's reduce-scatter of it; non-blocking ones join impl_->pending.
  void launch(size_t bucket, bool blocking);
  model::Trainer& trainer_;
  DdpConfig cfg_;
  int rank_ = 0, world_ = 1;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<int64_t, int64_t>> shards_;
  CommStats stats_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ridge::distributed
