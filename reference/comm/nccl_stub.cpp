// Built instead of nccl_communicator.cpp when CUDA or NCCL is not found.
#include "reference/comm/nccl_communicator.hpp"
#include "reference/core/error.hpp"

namespace parity {

bool compiled_with_nccl() { return false; }
int nccl_version() { return 0; }
std::unique_ptr<Communicator> make_nccl_communicator(Communicator&) {
  throw UsageError("--backend nccl: this parity was built without NCCL (configure with CUDA and NCCL found)");
}

}  // namespace parity
