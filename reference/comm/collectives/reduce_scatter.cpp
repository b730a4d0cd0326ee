// reduce_scatter: rank r ends with chunk r of the reduction of every rank's buffer. In place,
// the receive buffer is this rank's chunk of the send buffer.
#include "reference/comm/collectives/native.hpp"

namespace parity {
namespace {
using namespace collective_parts;

void mpi(const MpiNative& b, const CollectiveCall& c) {
  const int count = mpi_count(c.recv.count, "reduce_scatter");
  if (c.recv.data == c.send.slice(static_cast<std::size_t>(b.rank) * c.recv.count, 0).data && c.recv.count != 0) {
    // In place (NCCL's layout): MPI leaves the result at the start of the buffer; move it.
    check_mpi(MPI_Reduce_scatter_block(MPI_IN_PLACE, c.send.data, count, mpi_type(c.recv.dtype),
                                       mpi_op(c.op, c.recv.dtype), b.comm),
              "MPI_Reduce_scatter_block");
    copy_buffer(c.recv, c.send.slice(0, c.recv.count));
  } else {
    check_mpi(MPI_Reduce_scatter_block(c.send.data, c.recv.data, count, mpi_type(c.recv.dtype),
                                       mpi_op(c.op, c.recv.dtype), b.comm),
              "MPI_Reduce_scatter_block");
  }
  if (c.op == ReduceOp::avg) finish_average(c.recv, b.size);
}

#if PARITY_HAVE_CUDA
void nccl(const NcclNative& b, const CollectiveCall& c) {
  check_nccl(ncclReduceScatter(c.send.data, c.recv.data, c.recv.count, nccl_type(c.recv.dtype),
                               nccl_op(c.op, c.recv.dtype), b.comm, b.stream),
             "ncclReduceScatter", b.comm);
  if (divide_after(c.op, c.recv.dtype)) finish_average(c.recv, b.size);
}
#endif

Source scattered(std::size_t count, int, int, int r, std::size_t j) {
  return {Source::kReduced, static_cast<std::size_t>(r) * count + j};
}

const RegisteredCollective kReduceScatter{
    {.collective = Collective::reduce_scatter, .summary = "rank r ends with chunk r of the reduction of every rank's buffer",
     .reducing = true, .count_is_chunk = true, .send_count = n_chunks, .recv_count = count_as_is,
     .counts_fit = [](std::size_t send, std::size_t recv, std::size_t n) { return send == recv * n; },
     .counts_rule = "send count must be size x receive count", .in_place = InPlace::recv_in_send,
     .busbw_factor = busbw_n_minus_one_over_n, .busbw_text = "(n-1)/n", .source = scattered, .mpi = mpi,
     .nccl = PARITY_NCCL_CALL(nccl)}};

}  // namespace
}  // namespace parity
