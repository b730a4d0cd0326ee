// Progress of long runs on rank 0's stderr: one rewritten line on a terminal, a line every
// tenth of the way otherwise (logs stay short). --quiet silences it.
#pragma once

#include <chrono>
#include <string>

namespace parity::cli {

class Progress {
 public:
  Progress(std::string task, std::size_t total, bool enabled);
  // Also on ranks that do not print: the item becomes the process's task (Watchdog::set_task),
  // which an interruption or a stall names beside the operation.
  void update(std::size_t done, const std::string& item);
  void finish();

 private:
  std::string task_;
  std::size_t total_;
  bool enabled_;
  bool terminal_;
  int last_tenth_ = -1;
  std::chrono::steady_clock::time_point last_draw_{};
  std::chrono::steady_clock::time_point start_;
};

}  // namespace parity::cli
