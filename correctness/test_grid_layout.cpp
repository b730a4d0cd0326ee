// The grid's arithmetic without ranks: coordinates, groups and neighbours at every
// factorisation of world sizes 1..8 in every axis order, against groups found by brute force;
// Megatron-core's published 16-GPU example; and bad grids refused in one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "correctness/grid_factorisations.hpp"
#include "correctness/thrown.hpp"
#include "reference/core/error.hpp"

namespace parity::test {
namespace {

using parallel::Axis;
using parallel::AxisSet;
using parallel::GridLayout;
using parallel::GridSpec;

std::string order_string(const std::vector<Axis>& order) {
  std::string s;
  for (Axis a : order) s += (s.empty() ? "" : "-") + std::string(parallel::name_of(a));
  return s;
}

// Megatron-core (parallel_state.initialize_model_parallel): 16 GPUs, tp 2, pp 4, so dp 2,
// order tp-dp-pp.
TEST(GridLayout, ReproducesMegatronsSixteenGpuExample) {
  GridSpec spec;
  spec.set(Axis::tp, 2).set(Axis::pp, 4).set(Axis::dp, 2);
  spec.order = "tp-dp-pp";
  const GridLayout g(spec, 16);
  auto groups = [&](AxisSet axes) {
    std::set<std::vector<int>> out;
    for (int r = 0; r < 16; ++r) out.insert(g.members(r, axes));
    return out;
  };
  EXPECT_EQ(groups({Axis::tp}), (std::set<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(groups({Axis::dp}), (std::set<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(groups({Axis::pp}), (std::set<std::vector<int>>{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(g.coordinates(13), (std::array<int, 5>{1, 0, 0, 0, 3}));
  EXPECT_EQ(g.neighbour(5, Axis::pp, 1), 9);
  EXPECT_EQ(g.neighbour(13, Axis::pp, 1), -1);
  EXPECT_EQ(g.neighbour(13, Axis::pp, 1, true), 1);
}

TEST(GridLayout, GroupsEqualTheClosedFormAndPartitionTheWorldAtEveryFactorisation) {
  std::vector<Axis> order(std::begin(parallel::kAllAxes), std::end(parallel::kAllAxes));
  std::sort(order.begin(), order.end());
  int layouts = 0;
  do {
    for (int world = 1; world <= 8; ++world)
      for (GridSpec spec : factorisations(world)) {
        spec.order = order_string(order);
        const GridLayout g(spec, world);
        ++layouts;
        const std::string where = spec.describe(true);
        for (int r = 0; r < world; ++r) {
          const auto c = g.coordinates(r);
          ASSERT_EQ(g.rank_of(c), r) << where;
          // The first axis of the order varies fastest.
          if (g.size(order[0]) > 1 && c[static_cast<std::size_t>(order[0])] + 1 < g.size(order[0])) {
            ASSERT_EQ(g.neighbour(r, order[0], 1), r + 1) << where;
          }
        }
        for (AxisSet axes : all_axis_sets()) {
          std::vector<int> seen(static_cast<std::size_t>(world), 0);
          std::set<int> indices;
          for (int r = 0; r < world; ++r) {
            const std::vector<int> members = g.members(r, axes);
            ASSERT_EQ(members, brute_force_members(g, r, axes, order)) << where << " " << axes.describe() << " rank " << r;
            ASSERT_EQ(static_cast<int>(members.size()), g.size(axes));
            ASSERT_EQ(members[static_cast<std::size_t>(g.position_in_group(r, axes))], r) << where;
            indices.insert(g.group_index(r, axes));
            if (members.front() == r)  // count each group once, from its first rank
              for (int m : members) ++seen[static_cast<std::size_t>(m)];
          }
          // The groups of a set partition the world, and are numbered 0 .. world/size - 1.
          ASSERT_EQ(seen, std::vector<int>(static_cast<std::size_t>(world), 1)) << where << " " << axes.describe();
          ASSERT_EQ(static_cast<int>(indices.size()), world / g.size(axes));
          ASSERT_EQ(*indices.rbegin(), world / g.size(axes) - 1);
        }
      }
  } while (std::next_permutation(order.begin(), order.end()));
  // Every order (5! = 120) of every factorisation: world sizes 1..8 have 1, 5, 5, 15, 5, 25, 5
  // and 35 ways of being a product of five sizes.
  EXPECT_EQ(layouts, 120 * 96);
}

TEST(GridLayout, NeighboursAlongPipelineStages) {
  for (int world = 1; world <= 8; ++world)
    for (const GridSpec& spec : factorisations(world)) {
      const GridLayout g(spec, world);
      const int p = g.size(Axis::pp);
      for (int r = 0; r < world; ++r) {
        auto c = g.coordinates(r);
        const int stage = c[static_cast<std::size_t>(Axis::pp)];
        const int next = g.neighbour(r, Axis::pp, 1), previous = g.neighbour(r, Axis::pp, -1);
        if (stage + 1 < p) {
          auto n = c;
          n[static_cast<std::size_t>(Axis::pp)] = stage + 1;
          EXPECT_EQ(next, g.rank_of(n)) << spec.describe() << " rank " << r;
        } else {
          EXPECT_EQ(next, -1);
        }
        EXPECT_EQ(previous == -1, stage == 0);
        if (previous >= 0) {
          EXPECT_EQ(g.neighbour(previous, Axis::pp, 1), r);
        }
        // Around the ring: p steps come back; one step from the last stage is the first.
        EXPECT_EQ(g.neighbour(r, Axis::pp, p, true), r);
        EXPECT_EQ(g.coordinate(g.neighbour(r, Axis::pp, 1, true), Axis::pp), (stage + 1) % p);
      }
    }
}

TEST(GridLayout, RefusesBadGridsInOneLineNamingTheSizes) {
  GridSpec spec;
  spec.set(Axis::tp, 2).set(Axis::dp, 3);
  const std::string wrong_world = message_of<UsageError>([&] { GridLayout(spec, 4); });
  EXPECT_NE(wrong_world.find("grid tp2 x dp3 needs 6 ranks, but the world has 4"), std::string::npos) << wrong_world;
  EXPECT_EQ(wrong_world.find('\n'), std::string::npos);
  spec.order = "tp-cp-ep-dp-dp";
  EXPECT_NE(message_of<UsageError>([&] { GridLayout(spec, 6); }).find("names dp twice"), std::string::npos);
  spec.order = "tp-xp-dp";
  EXPECT_NE(message_of<UsageError>([&] { GridLayout(spec, 6); }).find("unknown axis 'xp'"), std::string::npos);
  spec.order = "dp-pp";
  EXPECT_NE(message_of<UsageError>([&] { GridLayout(spec, 6); }).find("leaves out tp, whose size is 2"), std::string::npos);
  spec.order = "dp-tp";  // axes of size 1 may be left out
  EXPECT_EQ(GridLayout(spec, 6).members(0, {Axis::tp}), (std::vector<int>{0, 3}));

  EXPECT_EQ(parallel::parse_grid("tp=2,dp=4").describe(), "tp2 x dp4");
  EXPECT_EQ(parallel::parse_grid("pp=1").describe(), "1");
  EXPECT_NE(message_of<UsageError>([] { parallel::parse_grid("tp=2,tp=2"); }).find("tp is given twice"), std::string::npos);
  EXPECT_NE(message_of<UsageError>([] { parallel::parse_grid("zz=2"); }).find("unknown grid axis 'zz'"), std::string::npos);
  EXPECT_NE(message_of<UsageError>([] { parallel::parse_grid("tp=0"); }).find("at least 1"), std::string::npos);
  EXPECT_NE(message_of<UsageError>([] { parallel::parse_grid("tp=-2"); }).find("not a whole number"), std::string::npos);
  EXPECT_NE(message_of<UsageError>([] { parallel::parse_grid("tp2"); }).find("not axis=size"), std::string::npos);
  EXPECT_NE(message_of<UsageError>([] { parallel::parse_grid(""); }).find("not axis=size"), std::string::npos);
}

}  // namespace
}  // namespace parity::test
