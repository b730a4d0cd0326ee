// Progress lines.
#include "bench/cli/progress.hpp"

#include <unistd.h>

#include <cstdio>

#include "reference/comm/watchdog.hpp"

namespace parity::cli {

Progress::Progress(std::string task, std::size_t total, bool enabled)
    : task_(std::move(task)), total_(total), enabled_(enabled), terminal_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()) {}

void Progress::update(std::size_t done, const std::string& item) {
  // On every rank: an interruption or a stall names the item as well as the operation.
  Watchdog::set_task(task_ + ": " + item);
  if (!enabled_ || total_ == 0) return;
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - start_).count();
  if (terminal_) {
    if (now - last_draw_ < std::chrono::milliseconds(100) && done + 1 < total_) return;
    last_draw_ = now;
    std::fprintf(stderr, "\r\033[K[%s] %zu/%zu %5.1fs %s", task_.c_str(), done + 1, total_, seconds, item.c_str());
  } else {
    const int tenth = static_cast<int>(10 * done / total_);
    if (tenth == last_tenth_) return;
    last_tenth_ = tenth;
    std::fprintf(stderr, "[%s] %zu/%zu (%d%%) %.1fs %s\n", task_.c_str(), done + 1, total_, 10 * tenth, seconds,
                 item.c_str());
  }
  std::fflush(stderr);
}

void Progress::finish() {
  Watchdog::set_task("");
  if (!enabled_ || total_ == 0) return;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(stderr, "%s[%s] done: %zu in %.1fs\n", terminal_ ? "\r\033[K" : "", task_.c_str(), total_, seconds);
  std::fflush(stderr);
}

}  // namespace parity::cli
