// The training state's bookkeeping without ranks (parallel/state/held.hpp): a shard's runs in
// the whole tensor, who writes which elements (replicas split evenly, every element once, gaps
// and overlaps refused), and the copies between a saved piece and what a rank needs.
#include <gtest/gtest.h>

#include <utility>

#include "reference/core/error.hpp"
#include "reference/parallel/state/held.hpp"

namespace parity {
namespace {

using Runs = std::vector<parallel::Run>;

TEST(TrainingState, AShardIsRunsOfTheWholeInItsOrder) {
  model::Parameter p;
  p.name = "w";
  EXPECT_EQ(parallel::parameter_runs(p, {4, 6}, 5, 10), (Runs{{5, 10}}));
  // Columns 2 and 3 of a [4, 6] weight: one run of 2 per row.
  p.shard = ShardSpec({4, 6});
  p.shard->split(1, 1, 3);
  EXPECT_EQ(parallel::parameter_runs(p, {4, 2}, 0, 8), (Runs{{2, 2}, {8, 2}, {14, 2}, {20, 2}}));
  // A flat range of the shard (as a ZeRO chunk cuts it): elements 3..5 of the shard.
  EXPECT_EQ(parallel::parameter_runs(p, {4, 2}, 3, 3), (Runs{{9, 1}, {14, 2}}));
  EXPECT_THROW(parallel::parameter_runs(p, {4, 2}, 6, 3), Error);
}

// The ranges each holder writes, as (begin, end) pairs.
using Ranges = std::vector<std::pair<std::int64_t, std::int64_t>>;
std::vector<Ranges> writes(std::int64_t whole, const std::vector<Runs>& holders) {
  std::vector<Ranges> out;
  for (const auto& ranges : parallel::assign_writers("x", whole, holders)) {
    Ranges r;
    for (const auto& w : ranges) r.push_back({w.begin, w.end});
    out.push_back(r);
  }
  return out;
}

TEST(TrainingState, ReplicasSplitTheirElementsAndEveryElementIsWrittenOnce) {
  // Two replicas of the whole; two ranks holding halves, one of them twice.
  EXPECT_EQ(writes(10, {{{0, 10}}, {{0, 10}}}), (std::vector<Ranges>{{{0, 5}}, {{5, 10}}}));
  EXPECT_EQ(writes(10, {{{5, 5}}, {{0, 5}}, {{5, 5}}}), (std::vector<Ranges>{{{0, 2}}, {{0, 5}}, {{2, 5}}}));
  // Overlapping holdings (a tied table's two copies, each cut into its own chunks): the one
  // sorting first writes the common elements, the other only what is left.
  EXPECT_EQ(writes(10, {{{0, 6}}, {{4, 6}}}), (std::vector<Ranges>{{{0, 6}}, {{2, 6}}}));
  EXPECT_EQ(writes(12, {{{0, 2}, {6, 2}}, {{0, 12}}}), (std::vector<Ranges>{{{0, 4}}, {{2, 6}, {8, 12}}}));
}

TEST(TrainingState, ElementsNobodyHoldsAreRefused) {
  try {
    parallel::assign_writers("blocks.0.w", 10, {{{0, 4}}, {{6, 4}}});
    FAIL() << "a gap was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("elements [4, 6) of blocks.0.w"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parallel::assign_writers("w", 10, {{{0, 8}}}), Error);
}

TEST(TrainingState, OverlapsCopyEachCommonElementOnce) {
  // Saved: whole elements 0..9 in order; needed: columns {2, 3} and {8, 9} of rows of 6.
  const auto copies = parallel::overlaps({{0, 10}}, {{2, 2}, {8, 2}, {14, 2}});
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0].from_offset, 2);
  EXPECT_EQ(copies[0].to_offset, 0);
  EXPECT_EQ(copies[0].count, 2);
  EXPECT_EQ(copies[1].from_offset, 8);
  EXPECT_EQ(copies[1].to_offset, 2);
  EXPECT_EQ(copies[1].count, 2);
  EXPECT_EQ(parallel::sub_runs({{2, 2}, {8, 2}, {14, 2}}, 1, 5), (Runs{{3, 1}, {8, 2}, {14, 1}}));
}

}  // namespace
}  // namespace parity
