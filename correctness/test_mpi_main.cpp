// Tests of the MPI-aware test harness itself. The Injected tests fail or stall on purpose and
// are run only by CTest entries that expect exactly that (see CMakeLists.txt).
#include <chrono>
#include <thread>

#include "correctness/mpi_test.hpp"

namespace parity::test {
namespace {

class Harness : public MpiTest {};

TEST_F(Harness, EveryRankRuns) {
  std::int64_t one = 1, total = 0;
  comm().all_reduce({&one, 1, DataType::int64, MemorySpace::host}, {&total, 1, DataType::int64, MemorySpace::host},
                    ReduceOp::sum);
  EXPECT_EQ(total, comm().size());
}

using Injected = MpiTest;

TEST_F(Injected, DISABLED_FailsOnRankOne) {
  if (comm().rank() == 1) ADD_FAILURE() << "injected failure on rank 1";
}

TEST_F(Injected, DISABLED_StallOnRankTwo) {
  comm().watchdog().set_timeout(2.0);
  if (comm().rank() == 2) std::this_thread::sleep_for(std::chrono::seconds(30));
  comm().barrier();
}

}  // namespace
}  // namespace parity::test
