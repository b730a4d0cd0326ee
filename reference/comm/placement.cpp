// Device placement and the checks that refuse a job before it allocates (see placement.hpp).
#include "reference/comm/placement.hpp"

#include <cstdio>

#include "reference/core/error.hpp"
#include "reference/cuda/device.hpp"

namespace parity::cuda {

std::string nccl_version_text(int code) {
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
}

std::string sharing_problem(std::string_view backend, int ranks_on_gpu, int nccl_version, const char* variable) {
  if (ranks_on_gpu <= 1 || backend != "nccl") return "";
  const std::string ranks = std::to_string(ranks_on_gpu) + " ranks share one GPU";
  if (nccl_version < kNcclMultiRankVersion)
    return ranks + ", which NCCL allows only from " + nccl_version_text(kNcclMultiRankVersion) + " (this is NCCL " +
           nccl_version_text(nccl_version) + "): use --backend mpi, or at most one rank per GPU";
  if (variable == nullptr || std::string_view(variable) != "1")
    return ranks + "; NCCL " + nccl_version_text(nccl_version) + " allows it only with " + kNcclMultiRankVariable +
           "=1 in the environment (or use --backend mpi, or at most one rank per GPU)";
  return "";
}

std::string fit_problem(std::size_t needed, std::size_t free_bytes, std::string_view what) {
  const double usable = kDeviceMemoryMargin * static_cast<double>(free_bytes);
  if (static_cast<double>(needed) <= usable) return "";
  char text[256];
  std::snprintf(text, sizeof text, "needs %.1f MiB of GPU memory per rank, but only %.1f MiB are free (%.0f%% of that is usable)",
                static_cast<double>(needed) / (1 << 20), static_cast<double>(free_bytes) / (1 << 20),
                kDeviceMemoryMargin * 100);
  return std::string(what) + " " + text;
}

Placement place(int local_rank, int local_ranks, int devices) {
  require(local_rank >= 0 && local_rank < local_ranks, "place: local rank outside the host's ranks");
  Placement p;
  p.local_rank = local_rank;
  p.local_ranks = local_ranks;
  p.devices = devices;
  if (devices <= 0) return p;
  p.device = local_rank % devices;
  p.ranks_on_device = local_ranks / devices + (local_ranks % devices > p.device ? 1 : 0);
  return p;
}

Placement select_device_for(Communicator& world) {
  if (!compiled_with_cuda())
    throw UsageError("--device cuda: this parity was built without CUDA (configure with nvcc on PATH or -DPARITY_CUDA=ON)");
  const auto host = world.split_by_host();
  const int count = static_cast<int>(devices().size());
  if (count == 0)
    throw UsageError("--device cuda: no CUDA GPU is visible on " + process_host() +
                     " (check nvidia-smi and CUDA_VISIBLE_DEVICES)");
  const Placement p = place(host->rank(), host->size(), count);
  select_device(p.device);
  return p;
}

}  // namespace parity::cuda
