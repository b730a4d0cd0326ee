// The communicator: the one interface every technique and every collective algorithm is
// written against. Backends (MPI, NCCL) implement point-to-point and the native collectives;
// validation, hang detection and traffic counting live here, once.
//
// Memory spaces: memory_space() is where the communicator's scratch lives and where the
// reference algorithms' buffers must be. A backend may accept other spaces too (accepts()):
// MPI takes device buffers (staged through pinned host memory unless the MPI is CUDA-aware),
// NCCL takes host buffers in its native collectives (staged through device memory), so host
// bookkeeping (all_gather_strings, split_by_host) works on every communicator.
//
// What each collective takes and computes (counts per rank, in-place layout, root, per-peer
// counts) is its descriptor's, in reference/comm/collectives/ (collectives.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "reference/core/buffer.hpp"
#include "reference/comm/collectives.hpp"
#include "reference/comm/watchdog.hpp"

namespace parity {

// A pending point-to-point operation.
class Request {
 public:
  virtual ~Request() = default;
  virtual bool test() = 0;  // true once complete; drives the backend's progress
  int peer = -1;
  bool is_send = false;
  std::size_t bytes = 0;
  int tag = 0;
};
using RequestPtr = std::unique_ptr<Request>;

// Counted by the communicator itself, so technique tests can assert exact volumes.
struct TrafficCounters {
  std::uint64_t bytes_sent = 0;
  std::uint64_t messages_sent = 0;
};

// Where a communicator's buffers may live, fixed when the backend creates it: its own space,
// and whether host buffers are also taken by its native collectives and by its point-to-point
// calls (there are two spaces, so "the other one" is always host).
struct MemorySpaces {
  MemorySpace own = MemorySpace::host;
  bool native_takes_host = false;
  bool point_to_point_takes_host = false;
};

class Communicator {
 public:
  Communicator(std::shared_ptr<Watchdog> watchdog, MemorySpaces spaces);
  virtual ~Communicator() = default;

  // Fixed when the backend creates the communicator; plain reads, since every call checks them.
  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string_view backend() const = 0;
  MemorySpace memory_space() const { return spaces_.own; }
  // Whether buffers in `space` may be given to point-to-point calls or to native collectives.
  bool accepts(MemorySpace space, bool point_to_point) const {
    return space == spaces_.own ||
           (space == MemorySpace::host && (point_to_point ? spaces_.point_to_point_takes_host : spaces_.native_takes_host));
  }
  // Ranks with the same color form a new communicator, ordered by key then rank.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  virtual void barrier() = 0;

  // Point-to-point, non-blocking. The buffer must stay valid until the request completes.
  RequestPtr isend(BufferView buffer, int peer, int tag);
  RequestPtr irecv(BufferView buffer, int peer, int tag);
  void wait(RequestPtr& request);
  void wait_all(std::span<RequestPtr> requests);
  // Sends one buffer and receives another at once (a step of a ring or a pairwise exchange).
  void send_recv(BufferView send, int to, BufferView recv, int from, int tag);

  // The backend's own collective (the descriptor's MPI or NCCL call), after checking the call
  // against its collective's rules (validate_collective) under a watchdog scope.
  void native(const CollectiveCall& call);
  // The same for each collective by name, as techniques write them.
  void all_reduce(const BufferView& send, const BufferView& recv, ReduceOp op) {
    native({Collective::all_reduce, send, recv, op});
  }
  void reduce(const BufferView& send, const BufferView& recv, ReduceOp op, int root) {
    native({Collective::reduce, send, recv, op, root});
  }
  void broadcast(const BufferView& send, const BufferView& recv, int root) {
    native({Collective::broadcast, send, recv, ReduceOp::sum, root});
  }
  void all_gather(const BufferView& send, const BufferView& recv) { native({Collective::all_gather, send, recv}); }
  void reduce_scatter(const BufferView& send, const BufferView& recv, ReduceOp op) {
    native({Collective::reduce_scatter, send, recv, op});
  }
  void all_to_all(const BufferView& send, const BufferView& recv) { native({Collective::all_to_all, send, recv}); }
  void all_to_all_v(const BufferView& send, std::span<const std::size_t> send_counts, const BufferView& recv,
                    std::span<const std::size_t> recv_counts) {
    native({Collective::all_to_all_v, send, recv, ReduceOp::sum, 0, send_counts, recv_counts});
  }

  // Sums `buffer` (device memory) over the ranks in place, queued on the CUDA stream `cuda_stream`
  // behind the work already there, and returns without waiting: how a sum overlaps computation
  // on another stream (the fast path's data parallelism). Only a backend that queues its
  // collectives on streams does it (NCCL); the others return false and do nothing.
  virtual bool all_reduce_on_stream(const BufferView& buffer, void* cuda_stream) {
    (void)buffer;
    (void)cuda_stream;
    return false;
  }

  // Ranks on the same host as this one (split by host name), e.g. to share host memory.
  std::unique_ptr<Communicator> split_by_host();
  // This communicator's ranks in two levels, for hierarchical algorithms: the ranks on this
  // rank's host, and the ranks of the other hosts it works with. Made on the first call and kept
  // (so the first call is collective: every rank makes it at once, as a collective algorithm
  // does). Bytes sent on the two count as this communicator's too (traffic()). Hosts are told
  // apart by name; with PARITY_RANKS_PER_HOST=k in the environment, k consecutive ranks make a
  // host instead (the last one may hold fewer), so that one machine can test several hosts.
  struct Hierarchy {
    std::unique_ptr<Communicator> host;  // this rank's host, ordered by rank
    // uniform: the ranks with this rank's place on its host, one per host, ordered by host;
    // otherwise the hosts' first ranks (on the others, a group that does no work).
    std::unique_ptr<Communicator> across;
    int hosts = 1;
    bool uniform = true;  // every host holds the same number of ranks
  };
  const Hierarchy& hierarchy();
  // Every rank's string, indexed by rank (host names, error messages).
  std::vector<std::string> all_gather_strings(const std::string& mine);

  // Work space in this communicator's memory space, kept and grown between calls, so that
  // algorithms do not pay for fresh pages on every call. Slots are independent buffers.
  BufferView scratch(std::size_t count, DataType dtype, int slot);

  Watchdog& watchdog() { return *watchdog_; }
  const std::shared_ptr<Watchdog>& shared_watchdog() const { return watchdog_; }
  const TrafficCounters& traffic() const { return traffic_; }
  void reset_traffic() { traffic_ = {}; }

 protected:
  virtual RequestPtr do_isend(BufferView buffer, int peer, int tag) = 0;
  virtual RequestPtr do_irecv(BufferView buffer, int peer, int tag) = 0;
  // Runs the backend's own call for call.collective (from d, its descriptor), on checked buffers.
  virtual void do_native(const CollectiveDescriptor& d, const CollectiveCall& call) = 0;
  // Memory for scratch() in memory_space(): host, or the selected CUDA device.
  virtual std::shared_ptr<void> allocate(std::size_t bytes);
  // Set by the backend's constructor.
  int rank_ = 0, size_ = 1;

 private:
  // Checks a send's or receive's peer and buffer, starts it and labels its request.
  RequestPtr start_point_to_point(BufferView buffer, int peer, int tag, bool send);
  MemorySpaces spaces_;
  struct Scratch {
    std::size_t bytes = 0;
    std::shared_ptr<void> memory;
  };
  std::vector<Scratch> scratch_;
  std::shared_ptr<Watchdog> watchdog_;
  TrafficCounters traffic_;
  std::unique_ptr<Hierarchy> hierarchy_;
  Communicator* counts_to_ = nullptr;  // a hierarchy's groups also count their bytes there
};

// While a communication stream's fiber runs (reference/comm/stream.hpp), a wait() whose
// message has not arrived calls this instead of spinning, handing the core back to the
// computation that started the collective. Null on the main stack.
extern thread_local void (*yield_while_waiting)();

// Checks that a collective's buffers fit its contract (counts, types, memory space, root,
// in-place layout; for all_to_all_v its per-peer counts, which other collectives must not be
// given); throws Error naming the collective and the offending sizes. A native call takes any
// space the backend accepts; a reference algorithm needs memory_space().
void validate_collective(const Communicator& comm, Collective collective, const BufferView& send,
                         const BufferView& recv, int root, bool native = false,
                         std::span<const std::size_t> send_counts = {}, std::span<const std::size_t> recv_counts = {});

// A collective call as the watchdog keeps it: the collective's name, the algorithm (static
// text), and the count and type of the larger buffer; text only if it is ever reported.
Operation collective_operation(Collective collective, const BufferView& send, const BufferView& recv, const char* algorithm);

}  // namespace parity
