// The conformance cases on a GPU: collectives on device buffers through MPI (staged through
// pinned host memory unless the MPI is CUDA-aware) and through NCCL (native collectives and
// every reference algorithm over grouped ncclSend/ncclRecv), and data parallelism and ZeRO
// training on the device against single-device float64-checked training on the host. Without
// a GPU every test skips, saying why.
#include <cstdlib>

#include "correctness/cases/collectives.hpp"
#include "correctness/cases/training.hpp"
#include "correctness/mpi_test.hpp"
#include "reference/comm/nccl_communicator.hpp"
#include "reference/core/error.hpp"
#include "reference/cuda/device.hpp"
#include "reference/comm/placement.hpp"

namespace parity::test {
namespace {

class DeviceTest : public MpiTest {
 protected:
  void SetUp() override {
    if (!cuda::compiled_with_cuda()) GTEST_SKIP() << "built without CUDA: the device path is not compiled";
    if (cuda::devices().empty()) GTEST_SKIP() << "no CUDA GPU visible: the device path is compiled but not run here";
    if (cuda::selected_device() < 0) placement() = cuda::select_device_for(comm());
  }
  static cuda::Placement& placement() {
    static cuda::Placement p;
    return p;
  }
  // The most crowded GPU's rank count, agreed by every rank.
  int ranks_per_gpu() {
    std::int64_t most = placement().ranks_on_device;
    comm().all_reduce({&most, 1, DataType::int64, MemorySpace::host}, {&most, 1, DataType::int64, MemorySpace::host},
                      ReduceOp::max);
    return static_cast<int>(most);
  }
  // Every case of the grid without the large sizes, on `device_comm`; failures name the case.
  void run_grid(Communicator& device_comm) {
    int ran = 0;
    for (const auto& c : cases::conformance_grid(device_comm.size(), {false})) {
      const cases::CaseResult r = cases::run_case(device_comm, c);
      EXPECT_TRUE(r.passed && r.wrong == 0 && r.guard_ok)
          << device_comm.backend() << " " << c.name() << ": " << r.message << " (max abs error " << r.max_abs_error << ")";
      ++ran;
    }
    EXPECT_GT(ran, 0);
  }
};

TEST_F(DeviceTest, MpiCollectivesOnDeviceBuffers) {
  auto device = mpi_world(MemorySpace::cuda);
  ASSERT_EQ(device->memory_space(), MemorySpace::cuda);
  run_grid(*device);
}

TEST_F(DeviceTest, NcclCollectivesAndReferenceAlgorithms) {
  const std::string problem = cuda::sharing_problem("nccl", ranks_per_gpu(), nccl_version(),
                                                    std::getenv(cuda::kNcclMultiRankVariable));
  if (!problem.empty()) GTEST_SKIP() << "NCCL cannot run this placement: " << problem;
  auto nccl = make_nccl_communicator(comm());
  ASSERT_EQ(nccl->backend(), "nccl");
  run_grid(*nccl);
}

// With ranks sharing a GPU and an NCCL that does not allow it, asking for NCCL is refused with
// the fix in the message (the check the CLI makes before building the communicator).
TEST_F(DeviceTest, NcclRefusesSharedGpuWhereUnsupported) {
  const int sharing = ranks_per_gpu();
  if (sharing < 2) GTEST_SKIP() << "one rank per GPU: nothing to refuse";
  const std::string problem = cuda::sharing_problem("nccl", sharing, nccl_version(),
                                                    std::getenv(cuda::kNcclMultiRankVariable));
  if (problem.empty()) GTEST_SKIP() << "this NCCL allows several ranks per GPU";
  EXPECT_THROW(make_nccl_communicator(comm()), UsageError);
}

TEST_F(DeviceTest, DataParallelTrainingOnTheGpu) {
  auto device = mpi_world(MemorySpace::cuda);
  int ran = 0;
  for (const auto& c : cases::training_grid(device->size())) {
    if (cases::runs_on_host(c)) continue;
    const cases::TrainingResult r = cases::run_training_case(*device, c);
    EXPECT_TRUE(r.passed) << c.name() << ": " << r.message << " (" << r.compared << ")";
    ++ran;
  }
  EXPECT_GT(ran, 0);
}

}  // namespace
}  // namespace parity::test
