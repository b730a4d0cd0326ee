// Hang diagnosis: every communicator operation runs under a watchdog scope. When one takes
// longer than the timeout, the watchdog prints which rank, which operation and what it was
// waiting for, then ends the process so the launcher aborts the whole job instead of hanging.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "reference/core/dtype.hpp"

namespace parity {

// An operation as plain values. Its text ("all_reduce 256 x float32 (native)") is made only
// when the watchdog reports it: formatting it on every call would cost about a microsecond,
// more than a small native collective itself.
struct Operation {
  const char* name = "";          // static text: a collective's name, "send", "barrier"
  const char* variant = nullptr;  // static text: the algorithm ("native", "ring"), or none
  std::int64_t count = -1;        // elements, or -1 when not a buffer operation
  DataType dtype = DataType::float32;
  // Rare operations that need made-up text: used instead of the above. The scope copies it,
  // so it need only outlive the scope's constructor; Operation stays a few plain values.
  const char* text = nullptr;
  std::string describe() const;
};

// What the current operation is blocked on, as plain values.
struct Wait {
  enum Kind { unknown, every_rank, send_to, message_from } kind = unknown;
  int peer = -1;
  std::int64_t bytes = 0;
  int tag = 0;
  std::string describe(const Operation& operation) const;  // "" for unknown
};

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
  // point-to-point waits) keep the outermost operation. Entering and leaving cost a few
  // relaxed atomic stores: no lock, no clock, no text (see run()).
  class Scope {
   public:
    // wait: what the operation waits on until something more precise is said. Inline: it
    // runs around every communicator call.
    Scope(Watchdog& dog, const Operation& operation, Wait wait = {}) : dog_(dog) {
      const int depth = dog_.depth_.load(std::memory_order_relaxed);
      if (depth == 0) {
        dog_.name_.store(operation.name, std::memory_order_relaxed);
        dog_.variant_.store(operation.variant, std::memory_order_relaxed);
        dog_.count_.store(operation.count, std::memory_order_relaxed);
        dog_.dtype_.store(static_cast<int>(operation.dtype), std::memory_order_relaxed);
        if (operation.text != nullptr || dog_.has_text_.load(std::memory_order_relaxed)) dog_.store_text(operation.text);
        dog_.store_wait(wait);
        // Only this thread writes sequence_: a plain release store, not a locked add.
        dog_.sequence_.store(dog_.sequence_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
      } else if (wait.kind != Wait::unknown) {
        dog_.store_wait(wait);
      }
      dog_.depth_.store(depth + 1, std::memory_order_release);
    }
    Scope(Watchdog& dog, const char* operation) : Scope(dog, Operation{operation, nullptr, -1, DataType::float32, nullptr}) {}
    ~Scope() { dog_.depth_.store(dog_.depth_.load(std::memory_order_relaxed) - 1, std::memory_order_release); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
   private:
    Watchdog& dog_;
  };
  // What the current operation is blocked on ("a message from rank 3"), for the report.
  void waiting_for(const Wait& wait);
  // Called on the watchdog's thread with its report (one line, no newline) after printing it
  // and before ending the process: the one chance to keep what the run finished.
  using FireHook = void (*)(const char* report);
  static void set_fire_hook(FireHook hook);
  // What the process is working on, above single operations: "check training: dp/zero1/..."
  // (the command's progress item, set by bench/cli/progress on every rank; "" clears it).
  // Control characters are shown as '?'; kept to 191 bytes. Called from one thread.
  static void set_task(const std::string& task) noexcept;
  // The operation running now in this process ("all_reduce 256 x float32 (ring)") and the task
  // ("... of check collectives: all_reduce/ring/..."; "check training: ..., between
  // operations" when no operation runs), written into `out` (always terminated) without
  // allocating or locking, so a signal handler may call it; "" when neither is known. The
  // process's first watchdog is the one read.
  static void describe_current(char* out, std::size_t size) noexcept;

 private:
  void run();
  void store_wait(const Wait& wait) {
    wait_kind_.store(wait.kind, std::memory_order_relaxed);
    wait_peer_.store(wait.peer, std::memory_order_relaxed);
    wait_bytes_.store(wait.bytes, std::memory_order_relaxed);
    wait_tag_.store(wait.tag, std::memory_order_relaxed);
  }
  void store_text(const char* text);  // rare: under mutex_, nullptr clears
  Operation load_operation();
  Wait load_wait() const;
  using Clock = std::chrono::steady_clock;
  double timeout_seconds_;
  std::mutex mutex_;  // timeout_seconds_, stop_ and text_
  std::condition_variable wake_;
  bool stop_ = false;
  // Written by the thread that runs operations, read by the watchdog thread. The watchdog
  // times an operation by watching `sequence_` (outermost operations entered so far) stay the
  // same while `depth_` > 0, so the operation itself never reads a clock.
  // What a scope writes shares one cache line (61 bytes), so entering one touches one line.
  alignas(64) std::atomic<int> depth_{0};
  std::atomic<int> dtype_{0};
  std::atomic<std::uint64_t> sequence_{0};
  std::atomic<const char*> name_{""}, variant_{nullptr};
  std::atomic<std::int64_t> count_{-1};
  std::atomic<std::int64_t> wait_bytes_{0};
  std::atomic<int> wait_kind_{0}, wait_peer_{-1}, wait_tag_{0};
  std::atomic<bool> has_text_{false};
  alignas(64) std::string text_;
  std::thread thread_;
};

}  // namespace parity
