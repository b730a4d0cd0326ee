// Memory accounting: every tensor's storage is charged to a category (parameters, gradients,
// optimizer state, activations, communication buffers, workspace) on a memory space. The
// tracker keeps current and peak bytes per category and space, and the peak of the total, so
// measured memory can be set beside the analytic models (ZeRO model states, activation bytes).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string_view>
#include <vector>

#include "reference/core/buffer.hpp"

namespace parity {

enum class MemoryCategory { parameters, gradients, optimizer_state, activations, communication, workspace };
inline constexpr MemoryCategory kAllMemoryCategories[] = {
    MemoryCategory::parameters,  MemoryCategory::gradients,     MemoryCategory::optimizer_state,
    MemoryCategory::activations, MemoryCategory::communication, MemoryCategory::workspace};
inline constexpr std::size_t kMemoryCategoryCount = std::size(kAllMemoryCategories);
std::string_view name_of(MemoryCategory category);

// Bytes of one (category, space) cell; peak is over the life of the process.
struct MemoryUsage {
  std::int64_t current = 0;
  std::int64_t peak = 0;
};

class PeakScope;

// One tracker per process (MemoryTracker::process()); thread-safe. Peaks over an interval are
// measured with PeakScope, which may nest.
class MemoryTracker {
 public:
  static MemoryTracker& process();

  void charge(MemoryCategory category, MemorySpace space, std::size_t bytes);
  void release(MemoryCategory category, MemorySpace space, std::size_t bytes);

  MemoryUsage usage(MemoryCategory category, MemorySpace space = MemorySpace::host) const;
  // Sum over categories: current, and the peak of that sum (not the sum of per-category peaks).
  MemoryUsage total(MemorySpace space = MemorySpace::host) const;

 private:
  friend class PeakScope;
  static constexpr std::size_t kSpaces = 2;
  mutable std::mutex mutex_;
  std::array<std::array<MemoryUsage, kMemoryCategoryCount>, kSpaces> cells_{};
  std::array<MemoryUsage, kSpaces> totals_{};
  std::vector<PeakScope*> scopes_;  // open scopes, updated on every charge
};

// The peak of every category (and of their total) on one memory space while the scope is open,
// relative to the bytes allocated when it opened. Scopes nest and do not disturb each other.
class PeakScope {
 public:
  explicit PeakScope(MemorySpace space = MemorySpace::host);
  ~PeakScope();
  PeakScope(const PeakScope&) = delete;
  PeakScope& operator=(const PeakScope&) = delete;
  std::int64_t peak_above_start(MemoryCategory category) const;
  std::int64_t total_peak_above_start() const;

 private:
  friend class MemoryTracker;
  MemorySpace space_;
  std::array<std::int64_t, kMemoryCategoryCount> start_{}, peak_{};
  std::int64_t total_start_ = 0, total_peak_ = 0;
};

}  // namespace parity
