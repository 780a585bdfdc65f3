// The analyzer's model of data-parallel training: how long gradient communication takes in each DDP
// design (naive, flat, overlap, bucketed, and the sharded optimizers cs336 and zero1), how much of it
// hides behind the backward pass, and which bucket size is best. Arithmetic only (docs/distributed.md has the
// model with worked numbers):
//
//   a ring collective over N ranks of S bytes on a link of bandwidth B (bytes/s one way) costs
//     all-reduce:                 base + 2(N-1) hop + 2(N-1)/N S / B
//     all-gather, reduce-scatter: base +  (N-1) hop +  (N-1)/N S / B
//     broadcast (pipelined chain): base + (N-1) hop + S / B
//   (the byte factors are roofline::all_reduce/all_gather/reduce_scatter's link bytes);
//   time 0 is the start of the backward pass; group g's gradients are final at the sum of the backward
//   times of groups 0..g; a collective starts when its last gradient is final and the link is free (one
//   collective at a time); hidden = the part of the collectives' spans before backward ends; exposed =
//   the rest plus everything issued after backward (naive, flat, the sharded schemes' steps);
//   step = forward + backward + optimizer (1/N of it when sharded) + other + exposed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ridge/roofline.hpp"

namespace ridge::roofline {

// One rank's link to the others in the ring.
struct DdpLink {
  std::string name;           // "NVLink 4", "InfiniBand NDR", "custom"
  double bandwidth = 0;       // bytes/s one way, per rank
  double hop_latency_s = 0;   // per ring step (a message to the next rank)
  double base_latency_s = 0;  // per collective (launch, synchronisation)
  int64_t ranks = 2;
  std::string source;  // where the figures come from
  // ridge::Error naming the field: bandwidth finite > 0, latencies finite >= 0, ranks in 1..2^20.
  void validate() const;
};

// Presets: "nvlink" (H100's NVLink 4) and "ib" (InfiniBand NDR, one 400 Gb/s port per GPU); the
// bandwidth from the h100 chip file, the latencies from NCCL's tuning model (see docs/distributed.md).
DdpLink ddp_link_preset(const std::string& name, int64_t ranks);
std::vector<std::string> ddp_link_presets();

// Ring collective times on a link (0 for one rank or 0 bytes).
double ring_all_reduce_s(double bytes, const DdpLink& link);
double ring_all_gather_s(double bytes, const DdpLink& link);
double ring_reduce_scatter_s(double bytes, const DdpLink& link);
double ring_broadcast_s(double bytes, const DdpLink& link);

// An all-to-all among link.ranks ranks, each holding `bytes` split evenly among them (its own share stays):
// N - 1 pairwise steps, (N-1)/N of the bytes leaving each rank over its link:
//   base + (N-1) hop + (N-1)/N S / B
double all_to_all_s(double bytes, const DdpLink& link);

// Expert parallelism (issue 40), as distributed::DataParallel runs it: an MoE model's routed experts sharded
// over `expert_ranks` ranks (num_experts a multiple of them), each rank's tokens sent to the ranks of the
// experts they chose and the outputs sent back. Per MoE layer and step four all-to-alls of the rank's
// tokens x top_k rows of d_model values: the dispatch (the tokens, in the operand dtype) and the combine
// (the outputs, fp32: ridge sums them in the state type), and in backward the dispatch of the outputs'
// gradients (operand dtype) and the combine of the inputs' gradients (fp32). Uniform routing keeps 1/N
// of the rows on the rank; (N-1)/N leave it, each all-to-all costing
//   base + (N-1) hop + (N-1)/N S / B   (all_to_all_s).
// With shared experts each dispatch is in flight while they compute (forward, and backward's), so per MoE
// layer min(dispatch, shared forward) + min(dispatch, shared backward) is hidden; the rest is exposed.
// The routed experts' gradients are whole at their owner: they join no data-parallel reduction; when the
// ranks hold several replicas of each shard (ranks / expert_ranks > 1) each rank all-reduces its shard's
// among them after backward (a ring over ranks / expert_ranks), exposed.
struct ExpertParallel {
  int64_t ranks = 1, experts_per_rank = 0, moe_layers = 0;
  int64_t all_to_alls = 0;               // per step: 4 per MoE layer
  double tokens = 0;                     // per rank and step: batch x seq
  double dispatch_bytes = 0;             // one dispatch on a rank: tokens x top_k x d_model x operand bytes
  double combine_bytes = 0;              // one combine: tokens x top_k x d_model x 4
  double leaving = 0;                    // the share of each that leaves the rank, (N-1)/N
  double dispatch_s = 0, combine_s = 0;  // one each
  double shared_forward_s = 0, shared_backward_s = 0;  // per MoE layer (from DdpInput)
  double step_s = 0;                                   // every all-to-all of a step
  double hidden_s = 0;                                 // the dispatches' part behind the shared experts
  double exposed_s = 0;                                // step_s - hidden_s
  double expert_grad_bytes = 0;  // fp32 gradients of every routed expert (each rank reduces 1/N of them)
  int64_t replicas = 1;          // ranks / expert_ranks
  double replica_reduce_s = 0;   // all-reduce of this rank's 1/N among its replicas (0 for one replica)
};

struct GradTensor {
  std::string name;
  double bytes = 0;  // gradient bytes (fp32: 4 per parameter)
  int group = 0;     // the backward group after which it is final (non-decreasing along the list)
};

// What the prediction starts from: the gradients in the order backward finishes them and the time of
// each phase (from the roofline of the model, or measured).
struct DdpInput {
  std::vector<GradTensor> grads;
  std::vector<double> backward_group_s;  // backward time of group 0, 1, ... (in the order they run)
  double forward_s = 0;
  double optimizer_s = 0;  // the part optimizer sharding divides by N (AdamW)
  double other_s = 0;      // the rest of the step (zero_grad, gradient norm)
  // MoE: one MoE layer's shared experts, forward and backward (what an expert-parallel dispatch overlaps);
  // 0 without shared experts, and for measured inputs that do not give them.
  double shared_forward_s = 0, shared_backward_s = 0;
  double total_bytes() const;
  double backward_s() const;
  // ridge::Error naming the field: sizes and times finite >= 0, groups in range and non-decreasing.
  void validate() const;
};

// A DDP design: mode naive | flat | overlap | bucketed (bucket_mb, 1 MB = 1e6 bytes), sharding none |
// cs336 (the gradients reduced by `mode`, each rank steps its tensors and broadcasts them) | zero1
// (each of `mode`'s collectives a reduce-scatter instead of an all-reduce, AdamW on 1/N, then the
// parameters all-gathered), as distributed::DataParallel runs them.
struct DdpSetting {
  std::string mode = "flat";
  double bucket_mb = 25;
  std::string sharding = "none";
  std::string label() const;  // "bucketed 25 MB", "cs336 (flat)", "zero1", "zero1 (overlap)"
  void validate() const;
};

struct DdpSpan {
  std::string what;  // "all-reduce bucket 3", "reduce-scatter", "broadcast ...", ...
  double bytes = 0;
  double start_s = 0, end_s = 0;  // from the start of backward
};

struct DdpPrediction {
  DdpSetting setting;
  int collectives = 0;
  double bytes = 0;  // payload this rank hands to collectives per step
  double comm_s = 0, hidden_s = 0, exposed_s = 0;
  double compute_s = 0;  // forward + backward + optimizer (sharded: / N) + other
  double step_s = 0;     // compute_s + exposed_s
  std::vector<DdpSpan> spans;
};

DdpPrediction predict_ddp(const DdpInput& in, const DdpLink& link, const DdpSetting& setting);

// Expert parallelism over groups of `expert_ranks` of link.ranks ranks. per_rank: one rank's step (its
// batch); in: its phases (ddp_input), whose shared-expert times the dispatches overlap. ridge::Error naming
// the argument for a dense shape ("shape"), expert_ranks outside 1 .. 2^20, not dividing num_experts or
// not dividing link.ranks ("expert_ranks").
ExpertParallel expert_parallel(const ModelShape& per_rank, const DdpInput& in, const DdpLink& link,
                               int64_t expert_ranks);
// The data-parallel part of an expert-parallel step: `in` with the routed experts' gradients left out of
// the list (no DDP mode reduces them), and AdamW's time for the dense parameters and this rank's 1/N of
// the experts (each rank steps only its own).
DdpInput expert_parallel_ddp_input(const DdpInput& in, const ExpertParallel& ep);
// A DDP design's prediction with the expert exchange added: comm grows by every all-to-all and the replica
// reduction, exposed and step by their exposed part.
DdpPrediction add_expert_parallel(DdpPrediction p, const ExpertParallel& ep);

// The bucket sizes tried by best_bucket: 1, 2, 5, 10, 25, 50, 100, 250, 1000 MB.
std::vector<double> default_bucket_candidates();
// The bucketed prediction of each candidate, and the index of the best: the shortest step, ties (within
// 1e-12 s) to the smaller bucket. ridge::Error on an empty or non-positive candidate.
struct BucketSweep {
  std::vector<DdpPrediction> tried;
  size_t best = 0;
};
BucketSweep best_bucket(const DdpInput& in, const DdpLink& link,
                        const std::vector<double>& candidates = default_bucket_candidates());

// The CS336 Transformer LM's gradients (fp32, flat order: lm_head, ln_final, layers L-1..0 as w2, w1,
// w3, ln2, output_proj, q, k, v, ln1, then token_embeddings; one backward group each for lm_head,
// ln_final, every layer and the embedding) and its phase times from the roofline of `shape` on `chip`
// (each op at its bound; the block's ops split evenly over the layers).
DdpInput ddp_input(const ModelShape& shape, const Chip& chip, const std::string& level = "");

// Per-rank memory of the training state with and without optimizer sharding over `ranks`: parameters
// in the operand dtype, fp32 master copies (mixed precision only; fp32 parameters are their own
// master), fp32 gradients and AdamW's m and v. Sharding keeps 1/N of the master copies and AdamW state.
struct DdpMemory {
  double params = 0, master = 0, grads = 0, optimizer = 0;  // bytes per rank, unsharded
  double sharded_master = 0, sharded_optimizer = 0;         // bytes per rank, sharded
  double total() const { return params + master + grads + optimizer; }
  double sharded_total() const { return params + sharded_master + grads + sharded_optimizer; }
};
DdpMemory ddp_memory(double param_count, DType operand, int64_t ranks);

}  // namespace ridge::roofline
