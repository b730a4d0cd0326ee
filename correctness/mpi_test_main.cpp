// main() for MPI tests: MPI up, tests registered for this world size, printing on rank 0,
// consensus after each test, and a job-wide abort (with the message) when a rank throws.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <vector>

#include "correctness/mpi_test.hpp"
#include "reference/comm/mpi_communicator.hpp"
#include "reference/core/error.hpp"

namespace parity::test {
namespace {

std::unique_ptr<Communicator> g_world;
MpiRuntime* g_runtime = nullptr;
std::string g_failures;  // this rank's failure messages in the current test

std::vector<Registrar>& registrars() {
  static std::vector<Registrar> list;
  return list;
}

// Collects this rank's failure messages so TearDown can share them.
class FailureRecorder : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo&) override { g_failures.clear(); }
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.failed() && g_failures.size() < 4000) {
      if (!g_failures.empty()) g_failures += " | ";
      g_failures += result.summary();
    }
  }
};

[[noreturn]] void abort_on_exception() {
  std::string what = "unknown exception";
  try {
    if (auto e = std::current_exception()) std::rethrow_exception(e);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  MpiRuntime::abort("parity test: rank " + std::to_string(process_rank()) + " in " +
                        (test ? std::string(test->test_suite_name()) + "." + test->name() : std::string("setup")) +
                        ": uncaught exception: " + what + "; aborting the job",
                    4);
}

}  // namespace

Communicator& world() { return *g_world; }

std::unique_ptr<Communicator> mpi_world(MemorySpace space) { return g_runtime->world(g_world->watchdog().timeout(), space); }

bool add_registrar(Registrar registrar) {
  registrars().push_back(registrar);
  return true;
}

void verbose(Communicator& comm, const char* format, ...) {
  if (comm.rank() != 0 || std::getenv("PARITY_VERBOSE") == nullptr) return;
  va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
}

void BoundRatios::note(const std::string& group, double error, double bound, int world_size) {
  if (bound <= 0 || world_size < 2) return;
  double& largest = largest_[group];
  largest = std::max(largest, error / bound);
}

void register_bound_tightness(const char* suite, const BoundRatios& ratios, double slack) {
  class Tightness : public MpiTest {
   public:
    Tightness(const BoundRatios& ratios, double slack) : ratios_(ratios), slack_(slack) {}
    void TestBody() override {
      if (comm().size() < 2) GTEST_SKIP() << "one rank is the single-device run itself: no error to measure";
      if (ratios_.largest().empty()) GTEST_SKIP() << "no case of the grid ran (filtered out)";
      for (const auto& [group, ratio] : ratios_.largest()) {
        verbose(comm(), "%s: the largest error is %.3g of the bound\n", group.c_str(), ratio);
        EXPECT_GE(ratio, 1 / slack_) << group << ": the largest error is " << ratio << " of the bound, under 1/" << slack_;
      }
    }

   private:
    const BoundRatios& ratios_;
    double slack_;
  };
  ::testing::RegisterTest(suite, "WithinAStatedFactorOfTheMeasuredError", nullptr, nullptr, __FILE__, __LINE__,
                          [&ratios, slack]() -> MpiTest* { return new Tightness(ratios, slack); });
}

void MpiTest::TearDown() {
  const auto messages = comm().all_gather_strings(g_failures);
  for (int r = 0; r < comm().size(); ++r)
    if (r != comm().rank() && !messages[static_cast<std::size_t>(r)].empty())
      ADD_FAILURE() << "failed on rank " << r << ": " << messages[static_cast<std::size_t>(r)];
}

}  // namespace parity::test

int main(int argc, char** argv) {
  using namespace parity;
  MpiRuntime mpi(&argc, &argv);
  test::g_runtime = &mpi;
  ::testing::InitGoogleTest(&argc, argv);
  // An exception escaping a test on one rank ends the job with its message; caught by
  // GoogleTest it would leave the other ranks waiting in a collective.
  GTEST_FLAG_SET(catch_exceptions, false);
  std::set_terminate(test::abort_on_exception);
  const char* timeout = std::getenv("PARITY_TEST_TIMEOUT");
  test::g_world = mpi.world(timeout ? std::atof(timeout) : 300.0);
  for (auto registrar : test::registrars()) registrar(*test::g_world);

  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (test::g_world->rank() != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new test::FailureRecorder);

  std::int64_t status = RUN_ALL_TESTS();
  test::g_world->all_reduce({&status, 1, DataType::int64, MemorySpace::host}, {&status, 1, DataType::int64, MemorySpace::host},
                               ReduceOp::max);
  test::g_world.reset();
  return static_cast<int>(status);
}
