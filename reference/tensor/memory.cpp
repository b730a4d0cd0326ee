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
}

void MemoryTracker::release(MemoryCategory category, MemorySpace space, std::size_t bytes) {
  const auto b = static_cast<std::int64_t>(bytes);
  std::lock_guard lock(mutex_);
  auto& cell = cells_[static_cast<std::size_t>(space)][static_cast<std::size_t>(category)];
  require(cell.current >= b, "memory tracker: releasing more " + std::string(name_of(category)) +
                                 " bytes than were charged");
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

void MemoryTracker::reset_peaks() {
  std::lock_guard lock(mutex_);
  for (auto& space : cells_)
    for (auto& cell : space) cell.peak = cell.current;
  for (auto& total : totals_) total.peak = total.current;
}

PeakScope::PeakScope(MemorySpace space) : space_(space) {
  auto& tracker = MemoryTracker::process();
  tracker.reset_peaks();
  for (MemoryCategory c : kAllMemoryCategories) start_[static_cast<std::size_t>(c)] = tracker.usage(c, space).current;
  total_start_ = tracker.total(space).current;
}

std::int64_t PeakScope::peak_above_start(MemoryCategory category) const {
  return MemoryTracker::process().usage(category, space_).peak - start_[static_cast<std::size_t>(category)];
}

std::int64_t PeakScope::total_peak_above_start() const {
  return MemoryTracker::process().total(space_).peak - total_start_;
}

}  // namespace parity
