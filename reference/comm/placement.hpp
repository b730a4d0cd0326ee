// Where a rank's work goes on a GPU host: which device (from the node-local rank), whether a
// backend may share that device between ranks, and whether a job's tensors fit in it. The
// decisions are plain functions of their inputs, so they are tested without a GPU.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "reference/comm/communicator.hpp"

namespace parity::cuda {

// The NCCL release from which several ranks may share one GPU (2.30.0, as NCCL_VERSION_CODE),
// and the environment variable that must then be set to 1.
inline constexpr int kNcclMultiRankVersion = 23000;
inline constexpr const char* kNcclMultiRankVariable = "NCCL_MULTI_RANK_GPU_ENABLE";

// "2.28.9" from an NCCL_VERSION_CODE such as 22809.
std::string nccl_version_text(int code);

// Empty when `backend` may run with `ranks_on_gpu` ranks on one GPU; otherwise the reason and
// the fix, one line. MPI always may; NCCL only from 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1
// (`variable` is that variable's value, null when unset).
std::string sharing_problem(std::string_view backend, int ranks_on_gpu, int nccl_version, const char* variable);

// Empty when `needed` bytes fit in `free_bytes` of a GPU's memory with a margin for the CUDA
// context and library workspaces; otherwise a message naming both figures and `what`.
std::string fit_problem(std::size_t needed, std::size_t free_bytes, std::string_view what);
inline constexpr double kDeviceMemoryMargin = 0.9;  // of the free bytes; the rest is left to CUDA and NCCL

struct Placement {
  int local_rank = 0;    // among the ranks on this host
  int local_ranks = 1;
  int device = -1;       // local_rank modulo the host's GPU count
  int devices = 0;
  int ranks_on_device = 1;  // ranks of this host on the same GPU, this one included
};
// The device for a rank: local_rank % devices (round robin), and how many ranks share it.
Placement place(int local_rank, int local_ranks, int devices);

// Selects this rank's GPU from its rank among the ranks of `world` on the same host, and
// returns the placement. Throws UsageError when the host has no GPU or parity was built
// without CUDA.
Placement select_device_for(Communicator& world);

}  // namespace parity::cuda
