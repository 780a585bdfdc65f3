// model::ExpertExchange over MPI (expert parallelism, docs/distributed.md): the counts by MPI_Alltoall, the
// rows by MPI_Ialltoallv, on a communicator of its own (a duplicate of MPI_COMM_WORLD), so its collectives
// never match the gradient reductions DataParallel has in flight at the same time.
#pragma once

#include <memory>

#include "ridge/model/expert_exchange.hpp"

namespace ridge::distributed {

class MpiExpertExchange final : public model::ExpertExchange {
 public:
  MpiExpertExchange();  // collective over MPI_COMM_WORLD
  ~MpiExpertExchange() override;
  MpiExpertExchange(const MpiExpertExchange&) = delete;
  MpiExpertExchange& operator=(const MpiExpertExchange&) = delete;

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  void exchange_counts(std::span<const int64_t> send, std::span<int64_t> recv) override;
  // Each exchange is an async trace range ("all-to-all N KB") from its start to the test or wait that
  // finds it complete, so its overlap with the shared experts shows.
  int start(const void* send, std::span<const int64_t> send_rows, void* recv,
            std::span<const int64_t> recv_rows, int64_t row_bytes) override;
  void progress() override;
  void wait(int ticket) override;

  // Bytes this rank sent to other ranks (its own rows stay) and exchanges started, since construction.
  int64_t bytes_sent() const { return bytes_sent_; }
  int64_t exchanges() const { return exchanges_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, world_ = 1;
  int64_t bytes_sent_ = 0, exchanges_ = 0;
};

}  // namespace ridge::distributed
