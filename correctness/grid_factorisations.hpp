// Every way of writing a world size as sizes of the five grid axes, and the groups a grid
// must form, computed by brute force from coordinates (not from the grid's strides), so the
// grid tests compare the closed form with an independent count.
#pragma once

#include <algorithm>
#include <vector>

#include "reference/parallel/grid.hpp"

namespace parity::test {

// Every GridSpec (default order) whose sizes multiply to `world`.
inline std::vector<parallel::GridSpec> factorisations(int world) {
  std::vector<parallel::GridSpec> out;
  parallel::GridSpec spec;
  auto place = [&](auto&& self, int axis, int left) -> void {
    if (axis == parallel::kAxisCount - 1) {
      spec.sizes[static_cast<std::size_t>(axis)] = left;
      out.push_back(spec);
      return;
    }
    for (int s = 1; s <= left; ++s)
      if (left % s == 0) {
        spec.sizes[static_cast<std::size_t>(axis)] = s;
        self(self, axis + 1, left / s);
      }
  };
  place(place, 0, world);
  return out;
}

// The ranks sharing `rank`'s coordinates off `axes`, ordered by their coordinates on `axes`
// (the grid's order, first axis fastest), found by looking at every rank.
inline std::vector<int> brute_force_members(const parallel::GridLayout& g, int rank, parallel::AxisSet axes,
                                            const std::vector<parallel::Axis>& order) {
  std::vector<std::pair<long long, int>> keyed;
  const auto mine = g.coordinates(rank);
  for (int r = 0; r < g.world(); ++r) {
    const auto c = g.coordinates(r);
    bool same = true;
    long long key = 0, radix = 1;
    for (parallel::Axis a : order) {
      const auto i = static_cast<std::size_t>(a);
      if (!axes.has(a)) {
        same = same && c[i] == mine[i];
      } else {
        key += c[i] * radix;
        radix *= g.size(a);
      }
    }
    if (same) keyed.emplace_back(key, r);
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<int> out;
  for (const auto& k : keyed) out.push_back(k.second);
  return out;
}

// Every non-empty set of axes.
inline std::vector<parallel::AxisSet> all_axis_sets() {
  std::vector<parallel::AxisSet> out;
  for (unsigned bits = 1; bits < (1u << parallel::kAxisCount); ++bits) out.push_back(parallel::AxisSet::from_bits(bits));
  return out;
}

}  // namespace parity::test
