// The process grid: the world's ranks arranged along named axes (Megatron-core's
// RankGenerator), built from sizes per axis and an order string such as "tp-cp-ep-dp-pp" in
// which the first axis varies fastest:
//   rank = sum over axes of coordinate(axis) * stride(axis),
//   stride(first axis) = 1, stride(next) = stride(previous) * size(previous).
// So with the default order the tp ranks of a group are neighbours (one host, fast links) and
// pp varies slowest. A group of a set of axes is every rank that shares this rank's
// coordinates on all the other axes; its ranks are ordered by their coordinates on the set's
// axes, again first axis fastest. Techniques take their communicators from here: tp for tensor
// parallelism, dp x cp for gradient reduction, pp neighbours for activations, ...
//
// GridLayout is the arithmetic alone (tested without ranks); Grid adds the communicators.
#pragma once

#include <array>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reference/comm/communicator.hpp"

namespace parity::parallel {

enum class Axis { tp, cp, ep, dp, pp };
inline constexpr Axis kAllAxes[] = {Axis::tp, Axis::cp, Axis::ep, Axis::dp, Axis::pp};
inline constexpr int kAxisCount = 5;
std::string_view name_of(Axis axis);
Axis parse_axis(std::string_view text);  // throws UsageError naming the known axes

// A set of axes: {Axis::dp, Axis::cp}.
class AxisSet {
 public:
  AxisSet() = default;
  AxisSet(std::initializer_list<Axis> axes);
  static AxisSet all();
  static AxisSet from_bits(unsigned bits);  // bit i: the axis kAllAxes[i]
  bool has(Axis axis) const { return (bits_ >> static_cast<int>(axis)) & 1u; }
  bool empty() const { return bits_ == 0; }
  unsigned bits() const { return bits_; }
  std::string describe() const;  // "dp x cp" in the order given by kAllAxes, "none" when empty
  friend bool operator==(AxisSet a, AxisSet b) { return a.bits_ == b.bits_; }
  friend bool operator<(AxisSet a, AxisSet b) { return a.bits_ < b.bits_; }

 private:
  unsigned bits_ = 0;
};

// Sizes per axis and the order they are laid out in.
struct GridSpec {
  std::array<int, kAxisCount> sizes{1, 1, 1, 1, 1};
  std::string order = "tp-cp-ep-dp-pp";
  int size(Axis axis) const { return sizes[static_cast<std::size_t>(axis)]; }
  GridSpec& set(Axis axis, int size);
  int product() const;
  // "tp2 x dp4" (axes of size 1 left out; "1" when all are), then " (order ...)" if asked.
  std::string describe(bool with_order = false) const;
};
// "tp=2,dp=4" (axes not named have size 1). Throws UsageError for an unknown or repeated axis,
// a size below 1, or a malformed entry.
GridSpec parse_grid(std::string_view text);

class GridLayout {
 public:
  // Throws UsageError, in one line naming the sizes, when the order names an unknown or
  // repeated axis, leaves out an axis of size above 1, or the product of the sizes is not
  // `world`.
  GridLayout(GridSpec spec, int world);
  const GridSpec& spec() const { return spec_; }
  int world() const { return world_; }
  int size(Axis axis) const { return spec_.size(axis); }
  // Size of the group of a set of axes (the product of their sizes).
  int size(AxisSet axes) const;
  int stride(Axis axis) const { return strides_[static_cast<std::size_t>(axis)]; }
  std::array<int, kAxisCount> coordinates(int rank) const;
  int coordinate(int rank, Axis axis) const { return rank / stride(axis) % size(axis); }
  int rank_of(const std::array<int, kAxisCount>& coordinates) const;
  // The ranks of `rank`'s group along `axes`, in group order; position_in_group(rank, axes)
  // is this rank's index in it and group_index(rank, axes) numbers the groups of that set
  // from 0 (by the coordinates of the other axes).
  std::vector<int> members(int rank, AxisSet axes) const;
  int position_in_group(int rank, AxisSet axes) const;
  int group_index(int rank, AxisSet axes) const;
  // The rank `offset` steps along `axis` (other coordinates kept), or -1 beyond the ends;
  // with wrap, around the ring instead.
  int neighbour(int rank, Axis axis, int offset, bool wrap = false) const;

 private:
  // Mixed-radix index, in grid order, of the coordinates on the set's axes (inside) or on the
  // others.
  int index_over(int rank, AxisSet axes, bool inside) const;
  GridSpec spec_;
  int world_;
  std::array<Axis, kAxisCount> order_{};  // fastest first
  std::array<int, kAxisCount> strides_{};
};

// The grid on a communicator: this rank's coordinates and the communicator of any set of axes.
class Grid {
 public:
  // Checks the spec against world.size() (UsageError, the same on every rank).
  Grid(Communicator& world, GridSpec spec);
  const GridLayout& layout() const { return layout_; }
  Communicator& world() { return world_; }
  int rank() const { return world_.rank(); }
  int size(Axis axis) const { return layout_.size(axis); }
  int coordinate(Axis axis) const { return layout_.coordinate(rank(), axis); }
  // The communicator of this rank's group along `axes` (its rank is position_in_group).
  // Made on first use by splitting the world: collective over the whole world, so every rank
  // asks for the same sets in the same order, as with any communicator split.
  Communicator& group(AxisSet axes);
  Communicator& group(Axis axis) { return group(AxisSet{axis}); }
  // Neighbours along an axis in world ranks (-1 beyond the ends unless wrap).
  int next(Axis axis, bool wrap = false) const { return layout_.neighbour(rank(), axis, 1, wrap); }
  int previous(Axis axis, bool wrap = false) const { return layout_.neighbour(rank(), axis, -1, wrap); }

 private:
  Communicator& world_;
  GridLayout layout_;
  std::map<AxisSet, std::unique_ptr<Communicator>> groups_;
};

}  // namespace parity::parallel
