// The grid on real ranks: at every factorisation of this world size (in two axis orders),
// every axis's communicator and the products techniques use hold exactly the ranks of the
// closed form, in its order, and messages sent to the next pipeline stage arrive from the
// previous one.
#include <cstdint>

#include "correctness/grid_factorisations.hpp"
#include "correctness/mpi_test.hpp"
#include "reference/core/error.hpp"

namespace parity::test {
namespace {

using parallel::Axis;
using parallel::AxisSet;

class GridTest : public MpiTest {};

std::vector<int> world_ranks_of(Communicator& group, int my_world_rank) {
  std::vector<std::int32_t> ranks(static_cast<std::size_t>(group.size()));
  std::int32_t mine = my_world_rank;
  group.all_gather({&mine, 1, DataType::int32, MemorySpace::host},
                   {ranks.data(), ranks.size(), DataType::int32, MemorySpace::host});
  return {ranks.begin(), ranks.end()};
}

TEST_F(GridTest, GroupsHoldTheClosedFormsRanksAtEveryFactorisation) {
  const int n = comm().size();
  const std::vector<AxisSet> sets = {{Axis::tp}, {Axis::cp}, {Axis::ep}, {Axis::dp}, {Axis::pp},
                                     {Axis::dp, Axis::cp}, {Axis::tp, Axis::ep}, {Axis::tp, Axis::dp}, AxisSet::all()};
  const std::vector<Axis> default_order = {Axis::tp, Axis::cp, Axis::ep, Axis::dp, Axis::pp};
  const std::vector<Axis> reversed(default_order.rbegin(), default_order.rend());
  for (parallel::GridSpec spec : factorisations(n))
    for (const auto* order : {&default_order, &reversed}) {
      spec.order = order == &default_order ? "tp-cp-ep-dp-pp" : "pp-dp-ep-cp-tp";
      parallel::Grid grid(comm(), spec);
      for (AxisSet axes : sets) {
        Communicator& group = grid.group(axes);
        const std::vector<int> expected = brute_force_members(grid.layout(), comm().rank(), axes, *order);
        EXPECT_EQ(world_ranks_of(group, comm().rank()), expected) << spec.describe(true) << ", " << axes.describe();
        EXPECT_EQ(group.rank(), grid.layout().position_in_group(comm().rank(), axes));
      }
      // Along pp, around the ring: what the previous stage sends arrives here.
      std::int32_t sent[5], received[5];
      const auto mine = grid.layout().coordinates(comm().rank());
      for (int i = 0; i < 5; ++i) sent[i] = mine[static_cast<std::size_t>(i)];
      comm().send_recv({sent, 5, DataType::int32, MemorySpace::host}, grid.next(Axis::pp, true),
                       {received, 5, DataType::int32, MemorySpace::host}, grid.previous(Axis::pp, true), 90);
      const int p = grid.size(Axis::pp);
      for (Axis a : parallel::kAllAxes) {
        const auto i = static_cast<std::size_t>(a);
        const int want = a == Axis::pp ? (mine[i] + p - 1) % p : mine[i];
        EXPECT_EQ(received[i], want) << spec.describe(true) << " axis " << parallel::name_of(a);
      }
    }
}

TEST_F(GridTest, RefusesAGridThatIsNotTheWorld) {
  parallel::GridSpec spec;
  spec.set(Axis::tp, comm().size() + 1);
  try {
    parallel::Grid grid(comm(), spec);
    ADD_FAILURE() << "a grid of " << spec.product() << " ranks was accepted on " << comm().size();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("but the world has " + std::to_string(comm().size())), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace parity::test
