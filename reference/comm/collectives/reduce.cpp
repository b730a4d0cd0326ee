// reduce: the root ends with the reduction of every rank's buffer; the others' receive buffers
// are left alone.
#include "reference/comm/collectives/native.hpp"

namespace parity {
namespace {
using namespace collective_parts;

void mpi(const MpiNative& b, const CollectiveCall& c) {
  const void* send = (b.rank == c.root && c.send.data == c.recv.data) ? MPI_IN_PLACE : c.send.data;
  check_mpi(MPI_Reduce(send, c.recv.data, mpi_count(c.recv.count, "reduce"), mpi_type(c.recv.dtype),
                       mpi_op(c.op, c.recv.dtype), c.root, b.comm),
            "MPI_Reduce");
  if (c.op == ReduceOp::avg && b.rank == c.root) finish_average(c.recv, b.size);
}

#if PARITY_HAVE_CUDA
void nccl(const NcclNative& b, const CollectiveCall& c) {
  check_nccl(ncclReduce(c.send.data, c.recv.data, c.recv.count, nccl_type(c.recv.dtype), nccl_op(c.op, c.recv.dtype),
                        c.root, b.comm, b.stream),
             "ncclReduce", b.comm);
  if (b.rank == c.root && divide_after(c.op, c.recv.dtype)) finish_average(c.recv, b.size);
}
#endif

const RegisteredCollective kReduce{
    {.collective = Collective::reduce, .summary = "the root ends with the reduction of every rank's buffer",
     .reducing = true, .rooted = true, .root_writes_only = true, .send_count = count_as_is, .recv_count = count_as_is,
     .counts_fit = counts_equal, .counts_rule = "send and receive counts differ",
     .busbw_factor = busbw_one, .busbw_text = "1", .source = reduced_in_place, .mpi = mpi, .nccl = PARITY_NCCL_CALL(nccl)}};

}  // namespace
}  // namespace parity
