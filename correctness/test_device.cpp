// The GPU path's decisions that need no GPU: which device a rank takes, when a backend may
// share a GPU, when a job does not fit, and the mirrored buffers that stage collectives between
// memory spaces (exercised host to host here; the GPU tests run the same code on a device).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <limits>
#include <numeric>
#include <vector>

#include "reference/comm/mirror.hpp"
#include "reference/core/error.hpp"
#include "reference/cuda/device.hpp"
#include "reference/kernels/buffer_kernels.hpp"
#include "reference/comm/placement.hpp"
#include "reference/tensor/tensor.hpp"

using namespace parity;

TEST(Placement, RoundRobinOverTheHostsGpus) {
  // 4 ranks on 1 GPU: all on device 0, 4 sharing it.
  for (int r = 0; r < 4; ++r) {
    const auto p = cuda::place(r, 4, 1);
    EXPECT_EQ(p.device, 0);
    EXPECT_EQ(p.ranks_on_device, 4);
  }
  // 5 ranks on 2 GPUs: devices 0,1,0,1,0; GPU 0 holds 3 ranks and GPU 1 holds 2.
  const int expected_device[] = {0, 1, 0, 1, 0};
  const int expected_sharing[] = {3, 2, 3, 2, 3};
  for (int r = 0; r < 5; ++r) {
    const auto p = cuda::place(r, 5, 2);
    EXPECT_EQ(p.device, expected_device[r]) << "rank " << r;
    EXPECT_EQ(p.ranks_on_device, expected_sharing[r]) << "rank " << r;
  }
  // One rank per GPU on an 8-GPU host.
  EXPECT_EQ(cuda::place(7, 8, 8).device, 7);
  EXPECT_EQ(cuda::place(7, 8, 8).ranks_on_device, 1);
  EXPECT_EQ(cuda::place(0, 1, 0).device, -1);  // no GPU: no device
  EXPECT_THROW(cuda::place(4, 4, 1), Error);
}

TEST(Placement, NcclSharesAGpuOnlyWhereItAllowsIt) {
  // MPI always may, and one rank per GPU always may.
  EXPECT_EQ(cuda::sharing_problem("mpi", 4, 22809, nullptr), "");
  EXPECT_EQ(cuda::sharing_problem("nccl", 1, 22809, nullptr), "");
  // NCCL 2.28: refused, naming the version needed and the fix.
  const std::string old = cuda::sharing_problem("nccl", 4, 22809, "1");
  EXPECT_NE(old.find("4 ranks share one GPU"), std::string::npos) << old;
  EXPECT_NE(old.find("2.30.0"), std::string::npos) << old;
  EXPECT_NE(old.find("2.28.9"), std::string::npos) << old;
  EXPECT_NE(old.find("--backend mpi"), std::string::npos) << old;
  // NCCL 2.30 without the variable, or with it set to something else: refused, naming it.
  for (const char* value : {static_cast<const char*>(nullptr), "0", "yes"}) {
    const std::string unset = cuda::sharing_problem("nccl", 2, 23000, value);
    EXPECT_NE(unset.find("NCCL_MULTI_RANK_GPU_ENABLE=1"), std::string::npos) << unset;
  }
  EXPECT_EQ(cuda::sharing_problem("nccl", 2, 23000, "1"), "");
  EXPECT_EQ(cuda::sharing_problem("nccl", 8, 23101, "1"), "");
  EXPECT_EQ(cuda::nccl_version_text(22809), "2.28.9");
  EXPECT_EQ(cuda::nccl_version_text(23000), "2.30.0");
}

TEST(Placement, RefusesAJobThatDoesNotFitTheGpu) {
  const std::size_t gib = std::size_t{1} << 30;
  EXPECT_EQ(cuda::fit_problem(8 * gib, 80 * gib, "the benchmark"), "");
  // The margin: 0.9 of the free memory is usable.
  EXPECT_EQ(cuda::fit_problem(72 * gib, 80 * gib, "x"), "");
  const std::string over = cuda::fit_problem(73 * gib, 80 * gib, "the model benchmark on h GPU 0");
  EXPECT_NE(over.find("the model benchmark on h GPU 0"), std::string::npos) << over;
  EXPECT_NE(over.find("74752.0 MiB"), std::string::npos) << over;  // 73 GiB needed
  EXPECT_NE(over.find("81920.0 MiB are free"), std::string::npos) << over;
}

TEST(Placement, WithoutAGpuCudaIsAClearError) {
  if (!cuda::devices().empty()) GTEST_SKIP() << "a GPU is visible: the no-GPU errors cannot be seen here";
  EXPECT_EQ(cuda::selected_device(), -1);
  try {
    (void)Tensor::empty("on_gpu", {4}, DataType::float32, MemoryCategory::workspace, MemorySpace::cuda);
    FAIL() << "a device tensor was made without a device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
  }
}

namespace {
std::vector<float> iota(std::size_t n, float first) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}
BufferView view_of(std::vector<float>& v, std::size_t first, std::size_t count) {
  return {v.data() + first, count, DataType::float32, MemorySpace::host};
}
}  // namespace

// In place stays in place: the mirror of an in-place reduce-scatter holds one area, and the
// receive view sits at the same offset of it as in the original.
TEST(Mirror, KeepsInPlaceLayoutsAndCopiesBack) {
  std::vector<float> whole = iota(12, 1);
  const BufferView send = view_of(whole, 0, 12), recv = view_of(whole, 8, 4);  // rank 2 of 3
  int allocations = 0;
  const Mirror::Allocate allocate = [&](std::size_t bytes) {
    ++allocations;
    return allocator_for(MemorySpace::host)(bytes);
  };
  const Mirror m(send, recv, MemorySpace::host, 0, allocate);
  EXPECT_EQ(allocations, 1);
  EXPECT_EQ(m.recv().as<float>() - m.send().as<float>(), 8);
  EXPECT_EQ(m.send().as<float>()[11], 12.0f);  // contents copied in
  for (std::size_t i = 0; i < 4; ++i) m.recv().as<float>()[i] = -1.0f;
  m.send().as<float>()[0] = 99.0f;  // outside the receive buffer: not copied back by copy_back_receive
  m.copy_back_receive();
  EXPECT_EQ(whole[0], 1.0f);
  for (std::size_t i = 8; i < 12; ++i) EXPECT_EQ(whole[i], -1.0f);
  m.copy_back_all();
  EXPECT_EQ(whole[0], 99.0f);
}

TEST(Mirror, SeparateBuffersAndMarginsAreMirrored) {
  std::vector<float> a = iota(10, 0), b = iota(10, 100);
  // Send a[2..6), receive b[2..6), with 2 floats (8 bytes) of margin on each side.
  const Mirror m(view_of(a, 2, 4), view_of(b, 2, 4), MemorySpace::host, 8, allocator_for(MemorySpace::host));
  EXPECT_EQ(m.send().as<float>()[-2], 0.0f);  // the margin came along
  EXPECT_EQ(m.recv().as<float>()[5], 107.0f);
  m.recv().as<float>()[4] = -7.0f;  // an overrun into the margin
  m.copy_back_receive();
  EXPECT_EQ(b[6], 106.0f);  // the receive copy stops at the buffer
  m.copy_back_all();
  EXPECT_EQ(b[6], -7.0f);  // the whole copy shows the overrun, as a guard check needs
  const Mirror empty(BufferView{}, view_of(b, 0, 3), MemorySpace::host, 0, allocator_for(MemorySpace::host));
  EXPECT_EQ(empty.send().data, nullptr);
  EXPECT_EQ(empty.recv().as<float>()[2], 102.0f);
}

// Tensor::to makes a copy with its own storage, charged to the category asked for (host to
// host here; the GPU tests move tensors and models to the device and back).
TEST(TensorPlacement, ToCopiesIntoItsOwnStorage) {
  Tensor a = Tensor::empty("a", {2, 3}, DataType::float32, MemoryCategory::parameters);
  for (std::int64_t i = 0; i < a.numel(); ++i) a.set(i, static_cast<double>(i) + 0.5);
  const auto before = MemoryTracker::process().usage(MemoryCategory::workspace).current;
  Tensor b = a.to(MemorySpace::host, "b", MemoryCategory::workspace);
  EXPECT_EQ(MemoryTracker::process().usage(MemoryCategory::workspace).current - before, 24);
  EXPECT_EQ(b.to_vector(), a.to_vector());
  EXPECT_EQ(b.shape(), a.shape());
  b.set(0, -1.0);
  EXPECT_EQ(a.at(0), 0.5);  // separate storage
  EXPECT_NE(a.raw(), b.raw());
}

// Faults in the CUDA layer (compiled as C++17 by nvcc, or the stubs) are parity::Error naming
// the rank, the host and where they happened, like every other fault.
TEST(DeviceErrors, NameRankHostAndPlace) {
  set_process_identity(3, "node-a");
  try {
    // No such device: refused by CUDA, or as a second selection where an earlier test of this
    // program selected one, or for want of CUDA in a build without it.
    cuda::select_device(1 << 20);
    ADD_FAILURE() << "select_device(1 << 20) did not throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.rank(), 3);
    EXPECT_EQ(e.host(), "node-a");
    EXPECT_NE(what.find("rank 3 on node-a: "), std::string::npos) << what;
    EXPECT_NE(what.find("reference/cuda/device"), std::string::npos) << what;
  }
  // raise_error takes its caller's location by default.
  try {
    raise_error("kernel failed", "someKernel");
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("kernel failed [someKernel]"), std::string::npos) << what;
    EXPECT_NE(what.find("test_device.cpp:"), std::string::npos) << what;
  }
  set_process_identity(-1, "");
}

namespace {

// Loss scaling's kernels: a power-of-two scale is exact on every floating type (each result
// rounded once from a product that needs no rounding), and non-finite elements are counted,
// on the host and, where a GPU is visible, on the device with the same results.
std::vector<double> scaled_and_counted(DataType type, MemorySpace space, double factor, std::size_t& nonfinite) {
  const std::vector<double> values = {1.5, -0.375, 3.0e-3, 1000, -7.25, 0.0};
  Tensor t = Tensor::empty("values", {static_cast<std::int64_t>(values.size())}, type, MemoryCategory::workspace);
  for (std::size_t i = 0; i < values.size(); ++i) t.set(static_cast<std::int64_t>(i), values[i]);
  if (space == MemorySpace::cuda) t = t.to(space, "values", MemoryCategory::workspace);
  scale_buffer(t.view(), factor);
  nonfinite = count_nonfinite(t.view());
  return t.to_vector();
}

TEST(LossScalingKernels, PowerOfTwoScalingIsExactAndInfIsCounted) {
  for (DataType type : {DataType::float64, DataType::float32, DataType::bfloat16, DataType::float16}) {
    std::size_t bad = 0;
    const std::vector<double> start = scaled_and_counted(type, MemorySpace::host, 1.0, bad);
    EXPECT_EQ(bad, 0u);
    const std::vector<double> up = scaled_and_counted(type, MemorySpace::host, 0x1p4, bad);
    for (std::size_t i = 0; i < start.size(); ++i) EXPECT_EQ(up[i], start[i] * 16) << name_of(type) << " element " << i;
    // float16 ends at 65504: 1000 x 2^8 overflows, the other elements do not.
    const std::vector<double> over = scaled_and_counted(type, MemorySpace::host, 0x1p8, bad);
    EXPECT_EQ(bad, type == DataType::float16 ? 1u : 0u) << name_of(type);
    if (type == DataType::float16) {
      EXPECT_TRUE(std::isinf(over[3]));
    }
  }
  Tensor ints = Tensor::zeros("ints", {2}, DataType::int32, MemoryCategory::workspace);
  EXPECT_THROW(scale_buffer(ints.view(), 2), Error);
  EXPECT_EQ(count_nonfinite(ints.view()), 0u);
}

// Several buffers are counted together (a step's gradient segments, one read on a device):
// the total over buffers of different types, integers counting nothing.
std::size_t count_in_buffers(MemorySpace space) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<Tensor> tensors;
  std::vector<BufferView> views;
  const std::vector<std::pair<DataType, std::vector<double>>> contents = {
      {DataType::float16, {1, inf, 2}}, {DataType::int32, {1, 2}}, {DataType::float32, {nan, -inf, 0, 3}},
      {DataType::bfloat16, {0.5, nan}}, {DataType::float64, {4, 5}}};
  for (const auto& [type, values] : contents) {
    Tensor t = Tensor::empty("values", {static_cast<std::int64_t>(values.size())}, type, MemoryCategory::workspace);
    for (std::size_t i = 0; i < values.size(); ++i) t.set(static_cast<std::int64_t>(i), values[i]);
    if (space == MemorySpace::cuda) t = t.to(space, "values", MemoryCategory::workspace);
    tensors.push_back(std::move(t));
  }
  for (const Tensor& t : tensors) views.push_back(t.view());
  return count_nonfinite(views);
}

TEST(LossScalingKernels, BuffersAreCountedTogether) { EXPECT_EQ(count_in_buffers(MemorySpace::host), 4u); }

TEST(LossScalingKernels, DeviceMatchesHost) {
  if (cuda::devices().empty()) GTEST_SKIP() << "no CUDA GPU visible: the device kernels are compiled but not run here";
  for (DataType type : {DataType::float64, DataType::float32, DataType::bfloat16, DataType::float16})
    for (double factor : {0x1p-3, 0x1p8}) {
      std::size_t host_bad = 0, device_bad = 0;
      EXPECT_EQ(scaled_and_counted(type, MemorySpace::cuda, factor, device_bad),
                scaled_and_counted(type, MemorySpace::host, factor, host_bad))
          << name_of(type) << " x " << factor;
      EXPECT_EQ(device_bad, host_bad) << name_of(type) << " x " << factor;
    }
  // Twice: the counter kept between calls starts again from zero.
  EXPECT_EQ(count_in_buffers(MemorySpace::cuda), 4u);
  EXPECT_EQ(count_in_buffers(MemorySpace::cuda), 4u);
}

}  // namespace

// cuBLAS and cuBLASLt are opened at their first use, not at the start of every process (a
// linked cuBLASLt spends about half a second of each process's start on its initialisers).
TEST(CudaLibraries, CublasIsOpenedOnFirstUseWithoutAGpu) {
  if (!cuda::compiled_with_cuda()) {
    EXPECT_THROW(cuda::blas_status_words(0), Error);
    GTEST_SKIP() << "built without CUDA";
  }
  const auto mapped = [] {
    std::ifstream maps("/proc/self/maps");
    const std::string text((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
    return text.find("libcublasLt.so") != std::string::npos;
  };
  const bool before = mapped();
  EXPECT_EQ(cuda::blas_status_words(0), "success");
  EXPECT_TRUE(mapped());
  // Earlier tests may have used it on a GPU; without one nothing has.
  if (cuda::devices().empty()) {
    EXPECT_FALSE(before) << "cuBLASLt was loaded before any use";
  }
}
