// The process grid (see grid.hpp).
#include "reference/parallel/grid.hpp"

#include <algorithm>
#include <cctype>
#include <limits>

#include "reference/core/error.hpp"

namespace parity::parallel {

std::string_view name_of(Axis axis) {
  switch (axis) {
    case Axis::tp: return "tp";
    case Axis::cp: return "cp";
    case Axis::ep: return "ep";
    case Axis::dp: return "dp";
    case Axis::pp: return "pp";
  }
  return "?";
}

Axis parse_axis(std::string_view text) {
  for (Axis a : kAllAxes)
    if (name_of(a) == text) return a;
  throw UsageError("unknown grid axis '" + std::string(text) + "' (known: tp, cp, ep, dp, pp)");
}

AxisSet::AxisSet(std::initializer_list<Axis> axes) {
  for (Axis a : axes) bits_ |= 1u << static_cast<int>(a);
}

AxisSet AxisSet::from_bits(unsigned bits) {
  AxisSet s;
  s.bits_ = bits & ((1u << kAxisCount) - 1);
  return s;
}

AxisSet AxisSet::all() { return {Axis::tp, Axis::cp, Axis::ep, Axis::dp, Axis::pp}; }

std::string AxisSet::describe() const {
  std::string out;
  for (Axis a : kAllAxes)
    if (has(a)) out += (out.empty() ? "" : " x ") + std::string(name_of(a));
  return out.empty() ? "none" : out;
}

GridSpec& GridSpec::set(Axis axis, int size) {
  sizes[static_cast<std::size_t>(axis)] = size;
  return *this;
}

int GridSpec::product() const {
  long long p = 1;
  for (int s : sizes) p = std::min<long long>(p * s, std::numeric_limits<int>::max());  // sizes are at most 6 digits
  return static_cast<int>(p);
}

std::string GridSpec::describe(bool with_order) const {
  std::string out;
  for (Axis a : kAllAxes)
    if (size(a) != 1) {
      if (!out.empty()) out += " x ";
      out.append(name_of(a)).append(std::to_string(size(a)));
    }
  if (out.empty()) out.push_back('1');
  if (with_order) out.append(" (order ").append(order).append(")");
  return out;
}

GridSpec parse_grid(std::string_view text) {
  GridSpec spec;
  bool seen[kAxisCount] = {};
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view entry = text.substr(start, comma - start);
    const std::size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == entry.size())
      throw UsageError("grid entry '" + std::string(entry) + "' is not axis=size (e.g. tp=2,dp=4)");
    const Axis axis = parse_axis(entry.substr(0, eq));
    const std::string_view number = entry.substr(eq + 1);
    if (number.size() > 6 || !std::all_of(number.begin(), number.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
      throw UsageError("grid size '" + std::string(number) + "' of " + std::string(name_of(axis)) + " is not a whole number");
    const int size = std::stoi(std::string(number));
    if (size < 1) throw UsageError("grid size of " + std::string(name_of(axis)) + " must be at least 1, not " + std::to_string(size));
    if (seen[static_cast<int>(axis)]) throw UsageError("grid axis " + std::string(name_of(axis)) + " is given twice");
    seen[static_cast<int>(axis)] = true;
    spec.set(axis, size);
    start = comma + 1;
  }
  return spec;
}

GridLayout::GridLayout(GridSpec spec, int world) : spec_(std::move(spec)), world_(world) {
  const std::string what = "grid " + spec_.describe();
  bool listed[kAxisCount] = {};
  int count = 0;
  std::size_t start = 0;
  const std::string& order = spec_.order;
  while (start <= order.size()) {
    const std::size_t dash = std::min(order.find('-', start), order.size());
    const std::string name = order.substr(start, dash - start);
    Axis axis{};
    try {
      axis = parse_axis(name);
    } catch (const UsageError&) {
      throw UsageError(what + ": order '" + order + "' names an unknown axis '" + name + "' (known: tp, cp, ep, dp, pp)");
    }
    if (listed[static_cast<int>(axis)]) throw UsageError(what + ": order '" + order + "' names " + name + " twice");
    listed[static_cast<int>(axis)] = true;
    order_[static_cast<std::size_t>(count++)] = axis;
    start = dash + 1;
  }
  for (Axis a : kAllAxes) {
    if (spec_.size(a) < 1) throw UsageError(what + ": the size of " + std::string(name_of(a)) + " must be at least 1");
    if (listed[static_cast<int>(a)]) continue;
    if (spec_.size(a) > 1)
      throw UsageError(what + ": order '" + order + "' leaves out " + std::string(name_of(a)) + ", whose size is " +
                       std::to_string(spec_.size(a)));
    order_[static_cast<std::size_t>(count++)] = a;  // size 1: its place does not matter
  }
  if (spec_.product() != world)
    throw UsageError(what + " needs " + std::to_string(spec_.product()) + " ranks, but the world has " +
                     std::to_string(world) + " (the product of the axis sizes must equal the world size)");
  int stride = 1;
  for (Axis a : order_) {
    strides_[static_cast<std::size_t>(a)] = stride;
    stride *= spec_.size(a);
  }
}

int GridLayout::size(AxisSet axes) const {
  int n = 1;
  for (Axis a : kAllAxes)
    if (axes.has(a)) n *= size(a);
  return n;
}

std::array<int, kAxisCount> GridLayout::coordinates(int rank) const {
  require(rank >= 0 && rank < world_, "grid: rank " + std::to_string(rank) + " outside a world of " + std::to_string(world_));
  std::array<int, kAxisCount> out{};
  for (Axis a : kAllAxes) out[static_cast<std::size_t>(a)] = coordinate(rank, a);
  return out;
}

int GridLayout::rank_of(const std::array<int, kAxisCount>& c) const {
  int rank = 0;
  for (Axis a : kAllAxes) {
    const int x = c[static_cast<std::size_t>(a)];
    require(x >= 0 && x < size(a), "grid: coordinate " + std::to_string(x) + " outside " + std::string(name_of(a)) +
                                       " of size " + std::to_string(size(a)));
    rank += x * stride(a);
  }
  return rank;
}

int GridLayout::index_over(int rank, AxisSet axes, bool inside) const {
  int index = 0, radix = 1;
  for (Axis a : order_) {
    if (axes.has(a) != inside) continue;
    index += coordinate(rank, a) * radix;
    radix *= size(a);
  }
  return index;
}

int GridLayout::position_in_group(int rank, AxisSet axes) const { return index_over(rank, axes, true); }
int GridLayout::group_index(int rank, AxisSet axes) const { return index_over(rank, axes, false); }

std::vector<int> GridLayout::members(int rank, AxisSet axes) const {
  // Start from the group's first rank (coordinates 0 on the set's axes) and count through the
  // set's axes in grid order, first fastest.
  std::array<int, kAxisCount> c = coordinates(rank);
  for (Axis a : kAllAxes)
    if (axes.has(a)) c[static_cast<std::size_t>(a)] = 0;
  const int base = rank_of(c);
  std::vector<int> out = {base};
  for (Axis a : order_) {
    if (!axes.has(a)) continue;
    const std::size_t n = out.size();
    for (int x = 1; x < size(a); ++x)
      for (std::size_t i = 0; i < n; ++i) out.push_back(out[i] + x * stride(a));
  }
  return out;
}

int GridLayout::neighbour(int rank, Axis axis, int offset, bool wrap) const {
  const int n = size(axis), c = coordinate(rank, axis);
  int to = c + offset;
  if (wrap) {
    to = ((to % n) + n) % n;
  } else if (to < 0 || to >= n) {
    return -1;
  }
  return rank + (to - c) * stride(axis);
}

Grid::Grid(Communicator& world, GridSpec spec) : world_(world), layout_(std::move(spec), world.size()) {}

Communicator& Grid::group(AxisSet axes) {
  auto it = groups_.find(axes);
  if (it != groups_.end()) return *it->second;
  auto comm = world_.split(layout_.group_index(rank(), axes), layout_.position_in_group(rank(), axes));
  require(comm->size() == layout_.size(axes) && comm->rank() == layout_.position_in_group(rank(), axes),
          "grid: the " + axes.describe() + " group split into " + std::to_string(comm->size()) + " ranks, expected " +
              std::to_string(layout_.size(axes)));
  return *groups_.emplace(axes, std::move(comm)).first->second;
}

}  // namespace parity::parallel
