// MPI backend (Open MPI). A communicator in CUDA memory also takes device buffers: directly
// when the MPI library is CUDA-aware, otherwise staged through pinned host memory (Debian's
// Open MPI is not CUDA-aware).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "reference/comm/communicator.hpp"

namespace parity {

// Initialises MPI for the life of the object (one per process) and names the process
// (rank, host) for error messages.
class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  // The world communicator; its watchdog times every operation (timeout 0 = off). In CUDA
  // memory, its scratch is device memory and it accepts host and device buffers.
  std::unique_ptr<Communicator> world(double timeout_seconds, MemorySpace space = MemorySpace::host);
  // Whether the MPI library reads device memory itself: MPIX_Query_cuda_support() where Open
  // MPI's CUDA extension exists, overridden by PARITY_MPI_CUDA_AWARE=0 or 1.
  static bool cuda_aware();
  // First line of MPI_Get_library_version, e.g. "Open MPI v4.1.4, ...".
  static std::string library_version();
  // Ends the whole job from any rank (MPI_Abort), after printing message on stderr.
  [[noreturn]] static void abort(const std::string& message, int code);
  // The largest `status` of the ranks, when every rank of the world has called this by
  // `patience_seconds` after this one did (a reduction on a communicator of its own, so that it
  // matches no operation of the job, polled); nothing when some rank had not. Once per process.
  std::optional<int> agreed_status(int status, double patience_seconds);
};

}  // namespace parity
