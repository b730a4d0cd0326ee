// Hang diagnosis: every communicator operation runs under a watchdog scope. When one takes
// longer than the timeout, the watchdog prints which rank, which operation and what it was
// waiting for, then ends the process so the launcher aborts the whole job instead of hanging.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace parity {

class Watchdog {
 public:
  // timeout_seconds <= 0 disables it.
  explicit Watchdog(double timeout_seconds = 0);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void set_timeout(double seconds);
  double timeout() const { return timeout_seconds_; }

  // Marks an operation as running until the scope ends. Nested scopes (a collective made of
  // point-to-point waits) keep the outermost operation and its start time.
  class Scope {
   public:
    // detail: what the operation waits on until something more precise is said.
    Scope(Watchdog& dog, std::string operation, std::string detail = "");
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
   private:
    Watchdog& dog_;
    bool outermost_;
  };
  // What the current operation is blocked on ("a message from rank 3"), for the report.
  void waiting_for(std::string detail);

 private:
  void run();
  using Clock = std::chrono::steady_clock;
  double timeout_seconds_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  int depth_ = 0;
  std::string operation_;
  std::string detail_;
  Clock::time_point started_;
  std::thread thread_;
};

}  // namespace parity
