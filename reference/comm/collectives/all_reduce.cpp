// all_reduce: every rank ends with the reduction of every rank's buffer.
#include "reference/comm/collectives/native.hpp"

namespace parity {
namespace {
using namespace collective_parts;

void mpi(const MpiNative& b, const CollectiveCall& c) {
  const void* send = c.send.data == c.recv.data ? MPI_IN_PLACE : c.send.data;
  check_mpi(MPI_Allreduce(send, c.recv.data, mpi_count(c.recv.count, "all_reduce"), mpi_type(c.recv.dtype),
                          mpi_op(c.op, c.recv.dtype), b.comm),
            "MPI_Allreduce");
  if (c.op == ReduceOp::avg) finish_average(c.recv, b.size);
}

#if PARITY_HAVE_CUDA
void nccl(const NcclNative& b, const CollectiveCall& c) {
  check_nccl(ncclAllReduce(c.send.data, c.recv.data, c.recv.count, nccl_type(c.recv.dtype), nccl_op(c.op, c.recv.dtype),
                           b.comm, b.stream),
             "ncclAllReduce", b.comm);
  if (divide_after(c.op, c.recv.dtype)) finish_average(c.recv, b.size);
}
#endif

const RegisteredCollective kAllReduce{
    {.collective = Collective::all_reduce, .summary = "every rank ends with the reduction of every rank's buffer",
     .reducing = true, .send_count = count_as_is, .recv_count = count_as_is,
     .counts_fit = counts_equal, .counts_rule = "send and receive counts differ",
     .busbw_factor = [](int n) { return 2.0 * (n - 1) / n; }, .busbw_text = "2(n-1)/n",
     .source = reduced_in_place, .mpi = mpi, .nccl = PARITY_NCCL_CALL(nccl)}};

}  // namespace
}  // namespace parity
