// What a collective's NCCL call needs (reference/comm/collectives/, CUDA builds only): the
// communicator and its stream, this rank and the size, a scratch buffer, and NCCL's names for
// parity's types and reductions. Calls are enqueued on the stream; the backend waits for it.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include "reference/comm/communicator.hpp"

namespace parity {

struct NcclNative {
  ncclComm_t comm;
  cudaStream_t stream;
  int rank;
  int size;
  Communicator& owner;  // for scratch(count, dtype, kNcclScratchSlot)
};
// The scratch slot a collective's NCCL call may use (after the reference algorithms' 0-3 and
// the backend's own staging slots 8 and 9).
inline constexpr int kNcclScratchSlot = 10;

// Throws Error naming the NCCL call and NCCL's text, unless rc is success (or in progress).
void check_nccl(ncclResult_t rc, const char* call, ncclComm_t comm = nullptr);
ncclDataType_t nccl_type(DataType type);
// Integers average as a sum followed by a truncating division (divide_after), floats with ncclAvg.
ncclRedOp_t nccl_op(ReduceOp op, DataType type);
inline bool divide_after(ReduceOp op, DataType type) { return op == ReduceOp::avg && !is_floating(type); }

}  // namespace parity
