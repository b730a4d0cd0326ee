// Memory accounting by category and space (see memory.hpp).
#include "reference/tensor/memory.hpp"

#include <algorithm>

#include "reference/core/error.hpp"

namespace parity {

std::string_view name_of(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::parameters: return "parameters";
    case MemoryCategory::gradients: return "gradients";
    case MemoryCategory::optimizer_state: return "optimizer_state";
    case MemoryCategory::activations: return "activations";
    case MemoryCategory::communication: return "communication";
    case MemoryCategory::workspace: break;
  }
  return "workspace";
}

MemoryTracker& MemoryTracker::process() {
  static MemoryTracker tracker;
  return tracker;
}

void MemoryTracker::charge(MemoryCategory category, MemorySpace space, std::size_t bytes) {
  const auto b = static_cast<std::int64_t>(bytes);
  std::lock_guard lock(mutex_);
  auto& cell = cells_[static_cast<std::size_t>(space)][static_cast<std::size_t>(category)];
  cell.current += b;
  cell.peak = std::max(cell.peak, cell.current);
  auto& total = totals_[static_cast<std::size_t>(space)];
  total.current += b;
  total.peak = std::max(total.peak, total.current);
  for (PeakScope* scope : scopes_) {
    if (scope->space_ != space) continue;
    auto& peak = scope->peak_[static_cast<std::size_t>(category)];
    peak = std::max(peak, cell.current);
    scope->total_peak_ = std::max(scope->total_peak_, total.current);
  }
}

void MemoryTracker::release(MemoryCategory category, MemorySpace space, std::size_t bytes) {
  const auto b = static_cast<std::int64_t>(bytes);
  std::lock_guard lock(mutex_);
  auto& cell = cells_[static_cast<std::size_t>(space)][static_cast<std::size_t>(category)];
  if (cell.current < b)
    throw Error("memory tracker: releasing " + std::to_string(b) + " bytes of " + std::string(name_of(category)) +
                " but only " + std::to_string(cell.current) + " are charged");
  cell.current -= b;
  totals_[static_cast<std::size_t>(space)].current -= b;
}

MemoryUsage MemoryTracker::usage(MemoryCategory category, MemorySpace space) const {
  std::lock_guard lock(mutex_);
  return cells_[static_cast<std::size_t>(space)][static_cast<std::size_t>(category)];
}

MemoryUsage MemoryTracker::total(MemorySpace space) const {
  std::lock_guard lock(mutex_);
  return totals_[static_cast<std::size_t>(space)];
}

PeakScope::PeakScope(MemorySpace space) : space_(space) {
  auto& tracker = MemoryTracker::process();
  std::lock_guard lock(tracker.mutex_);
  const auto s = static_cast<std::size_t>(space);
  for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) start_[c] = peak_[c] = tracker.cells_[s][c].current;
  total_start_ = total_peak_ = tracker.totals_[s].current;
  tracker.scopes_.push_back(this);
}

PeakScope::~PeakScope() {
  auto& tracker = MemoryTracker::process();
  std::lock_guard lock(tracker.mutex_);
  std::erase(tracker.scopes_, this);
}

std::int64_t PeakScope::peak_above_start(MemoryCategory category) const {
  std::lock_guard lock(MemoryTracker::process().mutex_);
  return peak_[static_cast<std::size_t>(category)] - start_[static_cast<std::size_t>(category)];
}

std::int64_t PeakScope::total_peak_above_start() const {
  std::lock_guard lock(MemoryTracker::process().mutex_);
  return total_peak_ - total_start_;
}

}  // namespace parity
