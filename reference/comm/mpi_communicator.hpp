// MPI backend (Open MPI): host buffers; device buffers come with the GPU path.
#pragma once

#include <memory>
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
  // The world communicator; its watchdog times every operation (timeout 0 = off).
  std::unique_ptr<Communicator> world(double timeout_seconds);
  // First line of MPI_Get_library_version, e.g. "Open MPI v4.1.4, ...".
  static std::string library_version();
  // Ends the whole job from any rank (MPI_Abort), after printing message on stderr.
  [[noreturn]] static void abort(const std::string& message, int code);
};

}  // namespace parity
