// The collective conformance grid under GoogleTest: one test per case of
// cases::conformance_grid at this world size (suite "collectives", test name = case name, so
// --gtest_filter='collectives.all_reduce/ring/*' selects like `parity check --filter`).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "correctness/cases/collectives.hpp"
#include "correctness/mpi_test.hpp"
#include "reference/comm/algorithms.hpp"
#include "reference/comm/collectives.hpp"
#include "reference/core/error.hpp"
#include "reference/kernels/buffer_kernels.hpp"

namespace parity::test {
namespace {

class CollectiveCaseTest : public MpiTest {
 public:
  explicit CollectiveCaseTest(cases::CollectiveCase c, HalfAccumulate half) : case_(std::move(c)), half_(half) {}
  void TestBody() override {
    const cases::CaseResult r = cases::run_case(comm(), case_, half_);
    EXPECT_TRUE(r.passed) << case_.name() << ": " << r.message << " (max abs error " << r.max_abs_error
                          << ", tolerance " << r.tolerance << ")";
    EXPECT_EQ(r.wrong, 0);
    EXPECT_TRUE(r.guard_ok);
  }

 private:
  cases::CollectiveCase case_;
  HalfAccumulate half_;
};

// PARITY_TEST_LARGE=0 leaves out the 1 MiB + 3 and 64 MiB cases, PARITY_TEST_LARGE=1mib the
// 64 MiB ones alone (CTest runs each size at a few world sizes only, to keep CI short; `parity
// check` runs both at every size).
std::string large_cases() {
  const char* v = std::getenv("PARITY_TEST_LARGE");
  return v == nullptr ? "1" : v;
}

// A 64 MiB case: its whole buffer (or a rank's chunk of it) past 2 MiB; the 1 MiB + 3 cases and
// the small ones are below.
bool is_64_mib(const cases::CollectiveCase& c) { return c.count * size_of(c.dtype) > (std::size_t{2} << 20); }

void register_grid(Communicator& comm) {
  const std::string large = large_cases();
  for (const auto& c : cases::conformance_grid(comm.size(), {large != "0"})) {
    if (large == "1mib" && is_64_mib(c)) continue;
    ::testing::RegisterTest("collectives", c.name().c_str(), nullptr, nullptr, __FILE__, __LINE__,
                            [c]() -> MpiTest* { return new CollectiveCaseTest(c, HalfAccumulate::float32); });
  }
  // 16-bit reductions in native precision (every partial result rounded to 16 bits): small
  // sizes of every reducing algorithm, exact and random inputs.
  for (auto c : cases::conformance_grid(comm.size(), {false})) {
    if (!is_half(c.dtype) || !is_reducing(c.collective) || c.count != 1021 || c.op == ReduceOp::prod) continue;
    const std::string name = c.name() + "/native_half";
    ::testing::RegisterTest("collectives_native_half", name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                            [c]() -> MpiTest* { return new CollectiveCaseTest(c, HalfAccumulate::native); });
  }
}
const bool registered = add_registrar(register_grid);

class Grid : public MpiTest {};

// The grid is what the README promises (every collective x algorithm x type x reduction x size x
// placement): count it independently of the generator.
TEST_F(Grid, CoversEveryCombination) {
  const std::size_t n = static_cast<std::size_t>(comm().size());
  std::set<std::size_t> counts = {0, 1, n - 1, n, n + 1, 1021};
  const std::size_t sizes = counts.size();
  // reducing collectives: 6 types x 5 ops exact + 4 floating types x 2 ops random; others 6 types
  const std::size_t per_reducing_algorithm = (6 * 5 + 4 * 2) * sizes * 2 + 2 * 2 * 2;
  const std::size_t per_other_algorithm = 6 * sizes * 2 + 2 * 2 * 2;
  // all_to_all_v: 6 types, out of place only, no large sizes
  const std::size_t per_all_to_all_v_algorithm = 6 * sizes;
  // Every registered algorithm is in the grid, so a new one (algorithms/*.cpp) adds its cases
  // with no edit here; the registry itself is checked against the known names below.
  std::size_t expected = 0;
  for (Collective c : kAllCollectives) {
    const std::size_t per_algorithm = has_block_counts(c) ? per_all_to_all_v_algorithm
                                      : is_reducing(c)    ? per_reducing_algorithm
                                                          : per_other_algorithm;
    expected += per_algorithm * algorithms_for(c).size();
  }
  EXPECT_EQ(cases::conformance_grid(comm().size()).size(), expected);
}

// The registry holds every algorithm file's entry, the native collective first and the others
// by their order. A file that stopped registering (or a linker that dropped it) would take its
// cases out of the grid above without failing it, so the algorithms parity ships are named
// here; one added later is in the grid, the benchmark and the report without an edit here.
TEST(Registry, HoldsEveryAlgorithmInOrder) {
  const std::map<Collective, std::vector<std::string>> shipped = {
      {Collective::all_reduce, {"native", "ring", "naive", "recursive_doubling", "rabenseifner", "hierarchical"}},
      {Collective::reduce, {"native", "binomial_tree"}},
      {Collective::broadcast, {"native", "binomial_tree"}},
      {Collective::all_gather, {"native", "ring"}},
      {Collective::reduce_scatter, {"native", "ring"}},
      {Collective::all_to_all, {"native", "pairwise"}},
      {Collective::all_to_all_v, {"native", "pairwise"}}};
  for (Collective c : kAllCollectives) {
    const auto algorithms = algorithms_for(c);
    ASSERT_FALSE(algorithms.empty()) << name_of(c);
    EXPECT_TRUE(algorithms.front()->native) << name_of(c);
    std::vector<std::string> found;  // the shipped names, in registry order
    for (std::size_t i = 0; i < algorithms.size(); ++i) {
      const auto& names = shipped.at(c);
      if (std::find(names.begin(), names.end(), algorithms[i]->name) != names.end()) found.push_back(algorithms[i]->name);
      if (i > 1) {
        EXPECT_LE(algorithms[i - 1]->order, algorithms[i]->order) << name_of(c) << " " << algorithms[i]->name;
      }
    }
    EXPECT_EQ(found, shipped.at(c)) << name_of(c);
  }
  EXPECT_THROW(find_algorithm(Collective::reduce, "ring"), UsageError);
}

// The checks can fail: deliberately broken algorithms are caught, each in its own way.
AlgorithmDescriptor broken(AlgorithmDescriptor::Run run) {
  AlgorithmDescriptor d = find_algorithm(Collective::all_reduce, "ring");
  d.name = "broken";
  d.run = run;
  return d;
}

cases::CollectiveCase small_case(DataType type, ReduceOp op) {
  cases::CollectiveCase c;
  c.collective = Collective::all_reduce;
  c.dtype = type;
  c.op = op;
  c.count = 37;
  return c;
}

TEST_F(Grid, CatchesAWrongReduction) {
  auto max_instead_of_sum = broken([](Communicator& comm, const CollectiveCall& call) {
    comm.all_reduce(call.send, call.recv, ReduceOp::max);
  });
  const auto r = cases::run_case(comm(), small_case(DataType::int32, ReduceOp::sum), max_instead_of_sum,
                                 HalfAccumulate::float32, false);
  if (comm().size() == 1) {
    EXPECT_TRUE(r.passed);  // max and sum of one value agree
  } else {
    EXPECT_FALSE(r.passed);
    EXPECT_GT(r.wrong, 0);
    EXPECT_NE(r.message.find("expected"), std::string::npos) << r.message;
  }
}

TEST_F(Grid, CatchesAnUnwrittenElement) {
  auto skips_last = broken([](Communicator& comm, const CollectiveCall& call) {
    CollectiveCall shorter = call;
    shorter.send.count -= 1;
    shorter.recv.count -= 1;
    comm.all_reduce(shorter.send, shorter.recv, call.op);
  });
  const auto r = cases::run_case(comm(), small_case(DataType::float32, ReduceOp::sum), skips_last,
                                 HalfAccumulate::float32, false);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.wrong, comm().size());  // the poisoned last element, on every rank
}

TEST_F(Grid, CatchesAnOverrunGuard) {
  auto overruns = broken([](Communicator& comm, const CollectiveCall& call) {
    comm.all_reduce(call.send, call.recv, call.op);
    static_cast<float*>(call.recv.data)[call.recv.count] = 0.0f;  // one element past the end
  });
  const auto r = cases::run_case(comm(), small_case(DataType::float32, ReduceOp::sum), overruns,
                                 HalfAccumulate::float32, false);
  EXPECT_FALSE(r.passed);
  EXPECT_FALSE(r.guard_ok);
}

TEST_F(Grid, CatchesAModifiedInput) {
  auto scribbles = broken([](Communicator& comm, const CollectiveCall& call) {
    comm.all_reduce(call.send, call.recv, call.op);
    static_cast<float*>(call.send.data)[0] += 1.0f;
  });
  const auto r = cases::run_case(comm(), small_case(DataType::float32, ReduceOp::sum), scribbles,
                                 HalfAccumulate::float32, false);
  // The output is right; only the input was touched: the case itself must fail, and say why.
  EXPECT_EQ(r.wrong, 0);
  EXPECT_FALSE(r.guard_ok);
  EXPECT_FALSE(r.passed);
  EXPECT_FALSE(r.message.empty());
  // The next case with the same inputs takes them from a copy made before any algorithm ran:
  // the scribble above does not reach it.
  EXPECT_TRUE(cases::run_case(comm(), small_case(DataType::float32, ReduceOp::sum), HalfAccumulate::float32, false).passed);
}

// Cases that differ only in their root share inputs but not expected values (a broadcast gives
// every rank the root's): each root's case passes after the other's (run_case keeps the last
// case's inputs and expected values). Every rooted collective's algorithms at every root, in
// place and not: the conformance grid itself puts the root at n / 2 only.
TEST_F(Grid, KeptExpectationsFollowTheRoot) {
  std::map<Collective, int> ran, expected;
  for (Collective collective : kAllCollectives) {
    if (!has_root(collective)) continue;
    for (const AlgorithmDescriptor* algorithm : algorithms_for(collective))
      for (int root = 0; root < comm().size(); ++root)
        for (bool in_place : {false, true}) {
          if (in_place && describe(collective).in_place == InPlace::none) continue;
          for (int again = 0; again < 2; ++again) {
            cases::CollectiveCase c = small_case(DataType::int32, ReduceOp::sum);
            c.collective = collective;
            c.algorithm = algorithm->name;
            c.root = root;
            c.in_place = in_place;
            const auto r = cases::run_case(comm(), c, HalfAccumulate::float32, false);
            EXPECT_TRUE(r.passed) << c.name() << " root " << root << ": " << r.message;
            ++ran[collective];
          }
        }
    // Every algorithm (at least the native one and one other) at every root, twice, in each
    // placement the collective has.
    const int placements = describe(collective).in_place == InPlace::none ? 1 : 2;
    expected[collective] = static_cast<int>(algorithms_for(collective).size()) * comm().size() * placements * 2;
    EXPECT_GE(algorithms_for(collective).size(), 2u) << name_of(collective);
  }
  EXPECT_EQ(ran, expected);
  EXPECT_EQ(ran.count(Collective::broadcast) + ran.count(Collective::reduce), 2u);  // both rooted collectives ran
}

// all_to_all_v's checks can fail too. The broken versions run the native collective into
// scratch, then misplace what arrived, so that they finish on every rank whatever they break.
AlgorithmDescriptor broken_all_to_all_v(AlgorithmDescriptor::Run run) {
  AlgorithmDescriptor d = find_algorithm(Collective::all_to_all_v, "pairwise");
  d.name = "broken";
  d.run = run;
  return d;
}

cases::CollectiveCase small_all_to_all_v_case() {
  cases::CollectiveCase c;
  c.collective = Collective::all_to_all_v;
  c.dtype = DataType::float32;
  c.count = 37;
  return c;
}

// The received blocks, each from its source, in rank order.
std::vector<BufferView> received_blocks(Communicator& comm, const CollectiveCall& call, BufferView into) {
  comm.all_to_all_v(call.send, call.send_counts, into, call.recv_counts);
  std::vector<BufferView> blocks;
  std::size_t at = 0;
  for (std::size_t count : call.recv_counts) {
    blocks.push_back(into.slice(at, count));
    at += count;
  }
  return blocks;
}

TEST_F(Grid, CatchesAllToAllVBlocksFromTheWrongPeer) {
  // The blocks packed in reverse source order: right values, wrong places.
  auto reversed = broken_all_to_all_v([](Communicator& comm, const CollectiveCall& call) {
    const auto blocks = received_blocks(comm, call, comm.scratch(call.recv.count, call.recv.dtype, algorithms::kScratchA));
    std::size_t at = 0;
    for (auto block = blocks.rbegin(); block != blocks.rend(); ++block) {
      copy_buffer(call.recv.slice(at, block->count), *block);
      at += block->count;
    }
  });
  const auto r = cases::run_case(comm(), small_all_to_all_v_case(), reversed, HalfAccumulate::float32, false);
  if (comm().size() == 1) {
    EXPECT_TRUE(r.passed);  // one block: reversing changes nothing
  } else {
    EXPECT_FALSE(r.passed);
    EXPECT_GT(r.wrong, 0);
    EXPECT_NE(r.message.find("expected"), std::string::npos) << r.message;
  }
}

TEST_F(Grid, CatchesAnAllToAllVBlockNotWritten) {
  // Every block but the last source's lands; the last stays poisoned on every rank.
  auto drops_last = broken_all_to_all_v([](Communicator& comm, const CollectiveCall& call) {
    const auto blocks = received_blocks(comm, call, comm.scratch(call.recv.count, call.recv.dtype, algorithms::kScratchA));
    std::size_t at = 0;
    for (std::size_t q = 0; q + 1 < blocks.size(); ++q) {
      copy_buffer(call.recv.slice(at, blocks[q].count), blocks[q]);
      at += blocks[q].count;
    }
  });
  const auto c = small_all_to_all_v_case();
  const auto r = cases::run_case(comm(), c, drops_last, HalfAccumulate::float32, false);
  EXPECT_FALSE(r.passed);
  // What the last rank sends, summed over the ranks that receive it.
  const int n = comm().size();
  EXPECT_EQ(r.wrong, static_cast<std::int64_t>(theory::all_to_all_v_send_total(c.count, n - 1, n)));
}

TEST_F(Grid, RandomInputsRejectAnErrorBeyondTheBound) {
  // Random inputs are compared under gamma_n * sum|x|; a relative error of 1e-3 is far beyond
  // it for float32 and must be caught.
  auto large_error = broken([](Communicator& comm, const CollectiveCall& call) {
    comm.all_reduce(call.send, call.recv, call.op);
    auto* p = static_cast<float*>(call.recv.data);
    for (std::size_t i = 0; i < call.recv.count; ++i) p[i] = p[i] * 1.001f + 1e-3f;
  });
  auto c = small_case(DataType::float32, ReduceOp::sum);
  c.input = cases::InputKind::random;
  c.count = 1000;
  const auto r = cases::run_case(comm(), c, large_error, HalfAccumulate::float32, false);
  EXPECT_FALSE(r.passed);
  EXPECT_GT(r.tolerance, 0.0);
  EXPECT_GT(r.max_abs_error, r.tolerance);
}

}  // namespace
}  // namespace parity::test
