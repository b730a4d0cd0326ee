// A communication stream: collectives queued in order and run on a fiber (a second stack on
// the same thread), so a rank can start a collective and go on computing, as DDP does with
// its gradient buckets and FSDP with its gathers.
//
// MPI is initialised FUNNELED here (only the main thread may call it), so there is no
// communication thread. The fiber runs when the owner calls progress() (data parallelism does
// so after every layer's backward) and in wait()/synchronize(). When a collective would block
// on a message that has not arrived, Communicator::wait() hands control back to the owner, so
// every reference algorithm becomes non-blocking without being rewritten. A backend's native
// collective is one blocking call: it runs whole at the first progress() after it is queued.
//
// Work runs in the order it was queued; every rank must queue the same collectives in the same
// order (as with a CUDA stream of NCCL calls). The stream has its own communicator (split from
// the parent), so its messages never meet the owner's.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "reference/comm/communicator.hpp"

namespace parity {

class CommStream {
 public:
  explicit CommStream(Communicator& parent);
  ~CommStream();
  CommStream(const CommStream&) = delete;
  CommStream& operator=(const CommStream&) = delete;

  using Ticket = std::uint64_t;
  // Queues work to run on the stream's communicator; `what` names it in error messages.
  Ticket enqueue(std::string what, std::function<void(Communicator&)> work);
  // Runs queued work until it would block or the queue is empty. Rethrows a failure.
  void progress();
  // Runs the stream until `ticket` (and everything queued before it) has finished.
  void wait(Ticket ticket);
  void synchronize();
  bool idle() const { return finished_ == queued_; }
  bool finished(Ticket ticket) const { return ticket <= finished_; }

  Communicator& communicator() { return *comm_; }
  const Communicator& communicator() const { return *comm_; }
  // Wall time spent running the stream's work (inside progress, wait, synchronize), and the
  // part of it spent inside progress(): on a rank with one thread, that time is taken from
  // the computation that called progress(), so it is not hidden communication.
  double busy_seconds() const { return busy_seconds_; }
  double progress_seconds() const { return progress_seconds_; }
  void reset_busy() { busy_seconds_ = progress_seconds_ = 0; }

 private:
  struct Fiber;
  struct Item {
    Ticket ticket;
    std::string what;
    std::function<void(Communicator&)> work;
  };
  void resume();                 // main stack -> fiber, until it yields or runs dry
  void run_fiber();              // the fiber's loop
  static void fiber_entry();
  static void yield_to_owner();  // fiber -> main stack (installed as yield_while_waiting)

  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<Fiber> fiber_;
  std::deque<Item> queue_;
  Ticket queued_ = 0, finished_ = 0;
  bool in_work_ = false;  // the fiber is inside an item (suspended in a wait)
  bool stopping_ = false;
  std::exception_ptr failure_;
  std::string failed_what_;
  double busy_seconds_ = 0;
  double progress_seconds_ = 0;
};

}  // namespace parity
