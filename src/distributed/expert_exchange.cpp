#include "distributed/expert_exchange.hpp"

#include <mpi.h>

#include <climits>
#include <map>
#include <vector>

#include "core/check.hpp"
#include "ridge/bench/trace.hpp"
#include "ridge/core/format.hpp"

namespace ridge::distributed {

struct MpiExpertExchange::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  std::map<int64_t, MPI_Datatype> row_types;  // one contiguous type per row size
  struct Pending {
    MPI_Request req = MPI_REQUEST_NULL;
    std::vector<int> send_counts, send_displs, recv_counts, recv_displs;  // alive until it completes
    trace::Handle range;
    bool done = false;
  };
  std::map<int, Pending> pending;
  int next_ticket = 0;

  MPI_Datatype row_type(int64_t bytes) {
    auto it = row_types.find(bytes);
    if (it != row_types.end()) return it->second;
    MPI_Datatype t = MPI_DATATYPE_NULL;
    MPI_Type_contiguous(static_cast<int>(bytes), MPI_BYTE, &t);
    MPI_Type_commit(&t);
    return row_types[bytes] = t;
  }
};

MpiExpertExchange::MpiExpertExchange() : impl_(std::make_unique<Impl>()) {
  MPI_Comm_dup(MPI_COMM_WORLD, &impl_->comm);
  MPI_Comm_rank(impl_->comm, &rank_);
  MPI_Comm_size(impl_->comm, &world_);
}

MpiExpertExchange::~MpiExpertExchange() {
  for (auto& [ticket, p] : impl_->pending)
    if (!p.done) MPI_Wait(&p.req, MPI_STATUS_IGNORE);
  for (auto& [bytes, t] : impl_->row_types) MPI_Type_free(&t);
  MPI_Comm_free(&impl_->comm);
}

void MpiExpertExchange::exchange_counts(std::span<const int64_t> send, std::span<int64_t> recv) {
  const auto n = send.size() / static_cast<size_t>(world_);
  check(send.size() == n * static_cast<size_t>(world_) && recv.size() == send.size() && n < INT_MAX,
        "exchange_counts: {} values to send and {} to receive over {} ranks", send.size(), recv.size(),
        world_);
  MPI_Alltoall(send.data(), static_cast<int>(n), MPI_INT64_T, recv.data(), static_cast<int>(n), MPI_INT64_T,
               impl_->comm);
}

int MpiExpertExchange::start(const void* send, std::span<const int64_t> send_rows, void* recv,
                             std::span<const int64_t> recv_rows, int64_t row_bytes) {
  const auto w = static_cast<size_t>(world_);
  check(send_rows.size() == w && recv_rows.size() == w, "start: {} and {} counts for {} ranks",
        send_rows.size(), recv_rows.size(), world_);
  check(row_bytes >= 1 && row_bytes < INT_MAX, "start: rows of {} bytes", row_bytes);
  Impl::Pending p;
  // Counts and displacements in rows (a contiguous type of one row), so they stay ints for any row size.
  auto counts = [&](std::span<const int64_t> rows, std::vector<int>& c, std::vector<int>& d) {
    int64_t at = 0;
    for (const int64_t n : rows) {
      check(n >= 0 && at + n < INT_MAX, "start: {} rows from row {} are beyond MPI's int counts", n, at);
      c.push_back(static_cast<int>(n));
      d.push_back(static_cast<int>(at));
      at += n;
    }
  };
  counts(send_rows, p.send_counts, p.send_displs);
  counts(recv_rows, p.recv_counts, p.recv_displs);
  int64_t leaving = 0;
  for (size_t d = 0; d < w; ++d)
    if (static_cast<int>(d) != rank_) leaving += send_rows[d] * row_bytes;
  bytes_sent_ += leaving;
  ++exchanges_;
  if (trace::recording())
    p.range =
        trace::start_range(fmt::format("all-to-all ({} KB leaving)", leaving / 1000), trace::color::orange);
  const MPI_Datatype t = impl_->row_type(row_bytes);
  MPI_Ialltoallv(send, p.send_counts.data(), p.send_displs.data(), t, recv, p.recv_counts.data(),
                 p.recv_displs.data(), t, impl_->comm, &p.req);
  const int ticket = impl_->next_ticket++;
  impl_->pending.emplace(ticket, std::move(p));
  return ticket;
}

void MpiExpertExchange::progress() {
  for (auto& [ticket, p] : impl_->pending) {
    if (p.done) continue;
    int flag = 0;
    MPI_Test(&p.req, &flag, MPI_STATUS_IGNORE);
    if (flag) {
      p.done = true;
      trace::end_range(p.range);
    }
  }
}

void MpiExpertExchange::wait(int ticket) {
  auto it = impl_->pending.find(ticket);
  check(it != impl_->pending.end(), "wait: no exchange {} is in flight", ticket);
  Impl::Pending& p = it->second;
  if (!p.done) {
    MPI_Wait(&p.req, MPI_STATUS_IGNORE);
    trace::end_range(p.range);
  }
  impl_->pending.erase(it);
}

}  // namespace ridge::distributed
