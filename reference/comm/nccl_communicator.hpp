// NCCL backend: native collectives are NCCL's, and point-to-point calls are ncclSend/ncclRecv,
// grouped: every send and receive posted before the first wait goes into one
// ncclGroupStart/ncclGroupEnd, so a ring step's send and receive (or a pairwise exchange's
// whole round) run together, as NCCL needs. Messages between two ranks match in the order they
// are posted (NCCL has no tags). Everything runs on the process's stream (cuda::stream());
// a request completes when an event recorded after its group has passed, and a native call
// returns once the stream has finished it.
#pragma once

#include <memory>

#include "reference/comm/communicator.hpp"

namespace parity {

bool compiled_with_nccl();
// NCCL_VERSION_CODE of the library in use (22809 for 2.28.9); 0 without NCCL.
int nccl_version();

// An NCCL communicator over the ranks of `bootstrap` (an MPI communicator: rank 0's unique id
// is broadcast over it), on the device this process selected. Refuses several ranks on one GPU
// unless NCCL allows it (cuda::sharing_problem).
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap);

}  // namespace parity
