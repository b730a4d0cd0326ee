// The communication stream (see stream.hpp): a ucontext fiber with its own stack that runs
// queued collectives and gives the core back whenever one waits on a message.
#include "reference/comm/stream.hpp"

#include <ucontext.h>

#include <thread>
#include <vector>

#include "reference/core/error.hpp"

namespace parity {

struct CommStream::Fiber {
  ucontext_t owner{};
  ucontext_t fiber{};
  // Collectives keep their buffers on the heap; the stack holds frames of the algorithm, the
  // communicator and MPI.
  std::vector<char> stack = std::vector<char>(1 << 20);
};

namespace {
thread_local CommStream* running_stream = nullptr;  // whose fiber is executing now
thread_local CommStream* starting_stream = nullptr;  // handed to fiber_entry on first switch
}  // namespace

CommStream::CommStream(Communicator& parent) : comm_(parent.split(0, parent.rank())), fiber_(std::make_unique<Fiber>()) {
  require(getcontext(&fiber_->fiber) == 0, "communication stream: getcontext failed");
  fiber_->fiber.uc_stack.ss_sp = fiber_->stack.data();
  fiber_->fiber.uc_stack.ss_size = fiber_->stack.size();
  fiber_->fiber.uc_link = &fiber_->owner;
  makecontext(&fiber_->fiber, &CommStream::fiber_entry, 0);
  starting_stream = this;
  resume();  // runs the loop up to its first wait for work
}

CommStream::~CommStream() {
  // A stream left with work (an exception unwound its owner) cannot be finished without the
  // other ranks; its fiber stack is dropped as it is. An idle one returns from its loop.
  if (!in_work_ && !failure_) {
    stopping_ = true;
    resume();
  }
}

void CommStream::fiber_entry() {
  CommStream* self = starting_stream;
  starting_stream = nullptr;
  self->run_fiber();
}

void CommStream::run_fiber() {
  for (;;) {
    while (!queue_.empty() && !failure_) {
      Item item = std::move(queue_.front());
      queue_.pop_front();
      in_work_ = true;
      try {
        item.work(*comm_);
      } catch (...) {
        failure_ = std::current_exception();
        failed_what_ = item.what;
      }
      in_work_ = false;
      finished_ = item.ticket;
    }
    if (stopping_) return;  // back to the owner through uc_link
    yield_to_owner();
  }
}

void CommStream::yield_to_owner() {
  CommStream* self = running_stream;
  running_stream = nullptr;
  yield_while_waiting = nullptr;
  swapcontext(&self->fiber_->fiber, &self->fiber_->owner);
  // resumed by the owner
  running_stream = self;
  yield_while_waiting = &CommStream::yield_to_owner;
}

void CommStream::resume() {
  require(running_stream == nullptr, "communication stream resumed from inside a stream");
  const auto start = std::chrono::steady_clock::now();
  running_stream = this;
  yield_while_waiting = &CommStream::yield_to_owner;
  swapcontext(&fiber_->owner, &fiber_->fiber);
  running_stream = nullptr;
  yield_while_waiting = nullptr;
  busy_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (failure_) {
    // Report once; the stream stays failed (later calls fail at once).
    std::exception_ptr failure = failure_;
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      throw Error("communication stream: " + failed_what_ + " failed: " + e.what());
    }
  }
}

CommStream::Ticket CommStream::enqueue(std::string what, std::function<void(Communicator&)> work) {
  if (failure_) throw Error("communication stream: enqueue after " + failed_what_ + " failed");
  queue_.push_back({++queued_, std::move(what), std::move(work)});
  return queued_;
}

void CommStream::progress() {
  if (idle() && !failure_) return;
  const double before = busy_seconds_;
  try {
    resume();
  } catch (...) {
    progress_seconds_ += busy_seconds_ - before;
    throw;
  }
  progress_seconds_ += busy_seconds_ - before;
}

void CommStream::wait(Ticket ticket) {
  require(ticket <= queued_, "communication stream: waiting for work that was never queued");
  for (unsigned spins = 0; !finished(ticket); ++spins) {
    resume();
    if (spins > 64) std::this_thread::yield();  // ranks may share cores
  }
}

void CommStream::synchronize() { wait(queued_); }

}  // namespace parity
