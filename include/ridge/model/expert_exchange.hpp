// Expert parallelism (issue 40): the routed experts of every MoE layer sharded over `world` workers,
// worker w owning the contiguous block [w E / world, (w + 1) E / world) of each layer's E experts. The
// model routes its own tokens and reaches the experts it does not own through this exchange, and runs
// the experts it owns over every worker's rows that chose them:
//
//   forward   counts per (worker, expert) first (an all-to-all of E / world values per worker), then the
//             tokens' rows to the experts' owners (dispatch), the experts' outputs back (combine);
//   backward  the outputs' gradients to the owners (the combine's backward), the inputs' gradients back
//             (the dispatch's backward).
//
// A worker holds only its own experts: the model is built for its ExpertShard (TransformerLM's constructor,
// TrainConfig::experts), so its flat buffers hold [rank E / world, (rank + 1) E / world) of each stack, and
// its parameters, gradients and optimizer state for the experts are 1/world of the single process's.
//
// The model never includes MPI: the distributed module implements this over MPI
// (distributed::MpiExpertExchange); without an exchange set (TransformerLM::set_expert_exchange) every
// expert is local, the single-process model.
#pragma once

#include <cstdint>
#include <span>

namespace ridge::model {

// Which of each MoE layer's experts a model holds: the block [rank E / world, (rank + 1) E / world) of E
// (world 1: all of them, the default). E must be a multiple of world.
struct ExpertShard {
  int rank = 0;
  int world = 1;
  bool whole() const { return world == 1; }
  bool operator==(const ExpertShard&) const = default;
};

class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  virtual int rank() const = 0;   // this worker, in 0 .. world - 1
  virtual int world() const = 0;  // the workers the experts are sharded over

  // Collective: send holds world blocks of n values, block d for worker d; recv receives world blocks of
  // n, block s from worker s. Blocking.
  virtual void exchange_counts(std::span<const int64_t> send, std::span<int64_t> recv) = 0;

  // Collective: starts the exchange of rows of row_bytes bytes: send_rows[d] rows of `send` (worker
  // by worker, in order) go to worker d, and recv_rows[s] rows from worker s land in `recv` (in worker
  // order). Both spans hold world counts, copied before this returns; the buffers must stay untouched
  // until wait(ticket). Returns the ticket.
  virtual int start(const void* send, std::span<const int64_t> send_rows, void* recv,
                    std::span<const int64_t> recv_rows, int64_t row_bytes) = 0;
  // Lets started exchanges move on, between pieces of compute that overlap them (MPI progresses a
  // non-blocking collective only inside MPI calls).
  virtual void progress() {}
  // Returns once the exchange `ticket` is complete.
  virtual void wait(int ticket) = 0;
};

}  // namespace ridge::model
