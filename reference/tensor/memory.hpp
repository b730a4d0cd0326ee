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

#include "reference/comm/buffer.hpp"

namespace parity {

enum class MemoryCategory { parameters, gradients, optimizer_state, activations, communication, workspace };
inline constexpr MemoryCategory kAllMemoryCategories[] = {
    MemoryCategory::parameters,  MemoryCategory::gradients,     MemoryCategory::optimizer_state,
    MemoryCategory::activations, MemoryCategory::communication, MemoryCategory::workspace};
inline constexpr std::size_t kMemoryCategoryCount = std::size(kAllMemoryCategories);
std::string_view name_of(MemoryCategory category);

// Bytes of one (category, space) cell.
struct MemoryUsage {
  std::int64_t current = 0;
  std::int64_t peak = 0;
};

// One tracker per process (MemoryTracker::process()); thread-safe.
class MemoryTracker {
 public:
  static MemoryTracker& process();

  void charge(MemoryCategory category, MemorySpace space, std::size_t bytes);
  void release(MemoryCategory category, MemorySpace space, std::size_t bytes);

  MemoryUsage usage(MemoryCategory category, MemorySpace space = MemorySpace::host) const;
  // Sum over categories: current, and the peak of that sum (not the sum of per-category peaks).
  MemoryUsage total(MemorySpace space = MemorySpace::host) const;
  // Starts a new measurement: every peak becomes the current value.
  void reset_peaks();

 private:
  static constexpr std::size_t kSpaces = 2;
  mutable std::mutex mutex_;
  std::array<std::array<MemoryUsage, kMemoryCategoryCount>, kSpaces> cells_{};
  std::array<MemoryUsage, kSpaces> totals_{};
};

// Measures the peak of one category (and of the total) over a scope, relative to its start.
class PeakScope {
 public:
  explicit PeakScope(MemorySpace space = MemorySpace::host);
  // Peak bytes above the value at construction.
  std::int64_t peak_above_start(MemoryCategory category) const;
  std::int64_t total_peak_above_start() const;

 private:
  MemorySpace space_;
  std::array<std::int64_t, kMemoryCategoryCount> start_{};
  std::int64_t total_start_ = 0;
};

}  // namespace parity
