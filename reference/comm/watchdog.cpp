// Watchdog thread. It ends the process with _Exit rather than MPI_Abort because MPI may only
// be called from the main thread here; mpirun sees a rank exit non-zero and kills the job.
#include "reference/comm/watchdog.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "reference/core/error.hpp"

namespace parity {

namespace {
std::atomic<Watchdog*> g_first{nullptr};  // read by describe_current
}  // namespace

Watchdog::Watchdog(double timeout_seconds) : timeout_seconds_(timeout_seconds) {
  Watchdog* none = nullptr;
  g_first.compare_exchange_strong(none, this);
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  Watchdog* self = this;
  g_first.compare_exchange_strong(self, nullptr);
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

namespace {
// "all_reduce 256 x float32 (ring)" into `out` (always terminated), without allocating: the
// one spelling of an operation, for reports and for signal handlers alike.
void format_operation(char* out, std::size_t size, const char* name, std::int64_t count, DataType dtype,
                      const char* variant) noexcept {
  if (size == 0) return;
  std::size_t used = 0;
  const auto put = [&](const char* text) {
    for (; *text != '\0' && used + 1 < size; ++text) out[used++] = *text;
  };
  put(name);
  if (count >= 0) {
    char digits[24];
    int n = 0;
    do digits[n++] = static_cast<char>('0' + count % 10);
    while ((count /= 10) > 0 && n < 23);
    put(" ");
    while (n > 0 && used + 1 < size) out[used++] = digits[--n];
    put(" x ");
    put(name_of(dtype).data());  // views of string literals: terminated
  }
  if (variant != nullptr) {
    put(" (");
    put(variant);
    put(")");
  }
  out[used] = '\0';
}
}  // namespace

std::string Operation::describe() const {
  if (text != nullptr) return text;
  char out[256];
  format_operation(out, sizeof out, name, count, dtype, variant);
  return out;
}

namespace {
// The task (set_task): two buffers, the one not shown written and then shown, so a signal
// handler on the writing thread always reads a whole text.
char g_task[2][192];
std::atomic<int> g_task_shown{0};
}  // namespace

void Watchdog::set_task(const std::string& task) noexcept {
  const int next = 1 - g_task_shown.load(std::memory_order_relaxed);
  std::size_t used = 0;
  for (char c : task) {
    if (used + 1 >= sizeof g_task[next]) break;
    g_task[next][used++] = (c >= ' ' && c != 0x7f) ? c : '?';  // one line of printable text
  }
  g_task[next][used] = '\0';
  g_task_shown.store(next, std::memory_order_release);
}

void Watchdog::describe_current(char* out, std::size_t size) noexcept {
  if (size == 0) return;
  out[0] = '\0';
  const char* task = g_task[g_task_shown.load(std::memory_order_acquire)];
  const Watchdog* dog = g_first.load();
  const bool in_operation = dog != nullptr && dog->depth_.load(std::memory_order_acquire) > 0;
  if (in_operation) {
    // An operation with made-up text (rare) is named by its static name only: the text is
    // guarded by a mutex a handler may not take.
    format_operation(out, size, dog->name_.load(std::memory_order_relaxed), dog->count_.load(std::memory_order_relaxed),
                     static_cast<DataType>(dog->dtype_.load(std::memory_order_relaxed)),
                     dog->variant_.load(std::memory_order_relaxed));
  }
  if (task[0] == '\0') return;
  std::size_t used = std::strlen(out);
  const auto put = [&](const char* text) {
    for (; *text != '\0' && used + 1 < size; ++text) out[used++] = *text;
    out[used] = '\0';
  };
  if (in_operation) put(" of ");
  put(task);
  if (!in_operation) put(", between operations");
}

std::string Wait::describe(const Operation& operation) const {
  std::string out;
  switch (kind) {
    case every_rank:
      out = "every rank to reach this ";
      if (operation.variant != nullptr) {
        out += operation.variant;
        out += ' ';
      }
      out += operation.name;
      break;
    case send_to:
    case message_from:
      out = kind == send_to ? "a send to rank " : "a message from rank ";
      out += std::to_string(peer);
      out += " (";
      out += std::to_string(bytes);
      out += " bytes, tag ";
      out += std::to_string(tag);
      out += ')';
      break;
    case unknown:
      break;
  }
  return out;
}

void Watchdog::store_text(const char* text) {
  std::lock_guard lock(mutex_);
  text_ = text != nullptr ? text : "";
  has_text_.store(text != nullptr, std::memory_order_relaxed);
}

void Watchdog::waiting_for(const Wait& wait) { store_wait(wait); }

Operation Watchdog::load_operation() {
  Operation op{name_.load(std::memory_order_relaxed), variant_.load(std::memory_order_relaxed),
               count_.load(std::memory_order_relaxed), static_cast<DataType>(dtype_.load(std::memory_order_relaxed)), nullptr};
  if (has_text_.load(std::memory_order_relaxed)) op.text = text_.c_str();  // the caller holds mutex_
  return op;
}

Wait Watchdog::load_wait() const {
  return {static_cast<Wait::Kind>(wait_kind_.load(std::memory_order_relaxed)), wait_peer_.load(std::memory_order_relaxed),
          wait_bytes_.load(std::memory_order_relaxed), wait_tag_.load(std::memory_order_relaxed)};
}

namespace {
std::atomic<Watchdog::FireHook> g_fire_hook{nullptr};
}  // namespace

void Watchdog::set_fire_hook(FireHook hook) { g_fire_hook.store(hook); }

void Watchdog::run() {
  std::unique_lock lock(mutex_);
  std::uint64_t watched = 0;  // the sequence number of the operation being timed
  bool watching = false;
  Clock::time_point since;
  while (!stop_) {
    // Look ten times per timeout, at most every 100 ms: a 1 ms timeout fires near 1 ms.
    const double period = timeout_seconds_ > 0 ? std::clamp(timeout_seconds_ / 10, 1e-4, 0.1) : 0.1;
    wake_.wait_for(lock, std::chrono::duration<double>(period));
    if (stop_) break;
    const std::uint64_t sequence = sequence_.load(std::memory_order_acquire);
    if (depth_.load(std::memory_order_acquire) == 0 || timeout_seconds_ <= 0) {
      watching = false;
      continue;
    }
    // The same outermost operation as at the last look: it has run at least since then.
    if (!watching || sequence != watched) {
      watching = true;
      watched = sequence;
      since = Clock::now();
      continue;
    }
    // Seen first up to one period after it began: count that period in.
    const double elapsed = std::chrono::duration<double>(Clock::now() - since).count() + period;
    if (elapsed < timeout_seconds_) continue;
    const Operation op = load_operation();
    const Wait wait = load_wait();
    if (sequence_.load(std::memory_order_acquire) != watched) continue;  // it ended as we looked
    std::string who = process_rank() >= 0
                          ? "rank " + std::to_string(process_rank()) + " on " + process_host()
                          : "this process";
    const std::string operation = op.describe(), detail = wait.describe(op);
    char report[1024];
    std::snprintf(report, sizeof report, "%s: %s stalled: not finished after %.3g s%s%s; aborting the job (--timeout %g)",
                  who.c_str(), operation.c_str(), elapsed, detail.empty() ? "" : ", waiting for ", detail.c_str(),
                  timeout_seconds_);
    std::fprintf(stderr, "parity: %s\n", report);
    std::fflush(stderr);
    std::fflush(stdout);
    if (FireHook hook = g_fire_hook.load()) hook(report);
    // Give the other ranks waiting in the same operation time to say so too before this exit
    // makes mpirun stop them: the launcher's parent (bench/cli/supervisor) names, from these
    // lines, the ranks that waited and the ones that never entered the operation.
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::duration<double>(std::clamp(timeout_seconds_, 0.5, 2.0)));
    std::_Exit(3);
  }
}

}  // namespace parity
