// Watchdog thread. It ends the process with _Exit rather than MPI_Abort because MPI may only
// be called from the main thread here; mpirun sees a rank exit non-zero and kills the job.
#include "reference/comm/watchdog.hpp"

#include <cstdio>
#include <cstdlib>

#include "reference/core/error.hpp"

namespace parity {

Watchdog::Watchdog(double timeout_seconds) : timeout_seconds_(timeout_seconds) {
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Watchdog::set_timeout(double seconds) {
  std::lock_guard lock(mutex_);
  timeout_seconds_ = seconds;
}

Watchdog::Scope::Scope(Watchdog& dog, std::string operation, std::string detail) : dog_(dog) {
  std::lock_guard lock(dog_.mutex_);
  outermost_ = dog_.depth_++ == 0;
  if (outermost_) {
    dog_.operation_ = std::move(operation);
    dog_.started_ = Clock::now();
  }
  if (outermost_ || !detail.empty()) dog_.detail_ = std::move(detail);
}

Watchdog::Scope::~Scope() {
  std::lock_guard lock(dog_.mutex_);
  --dog_.depth_;
  if (outermost_) dog_.operation_.clear();
}

void Watchdog::waiting_for(std::string detail) {
  std::lock_guard lock(mutex_);
  detail_ = std::move(detail);
}

void Watchdog::run() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(100));
    if (stop_ || depth_ == 0 || timeout_seconds_ <= 0) continue;
    const double elapsed = std::chrono::duration<double>(Clock::now() - started_).count();
    if (elapsed < timeout_seconds_) continue;
    std::string who = process_rank() >= 0
                          ? "rank " + std::to_string(process_rank()) + " on " + process_host()
                          : "this process";
    std::fprintf(stderr, "parity: %s: %s stalled: not finished after %.1f s%s%s; aborting the job (--timeout %g)\n",
                 who.c_str(), operation_.c_str(), elapsed, detail_.empty() ? "" : ", waiting for ",
                 detail_.c_str(), timeout_seconds_);
    std::fflush(stderr);
    std::fflush(stdout);
    std::_Exit(3);
  }
}

}  // namespace parity
