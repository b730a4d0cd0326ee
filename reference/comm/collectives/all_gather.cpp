// all_gather: every rank's chunk, concatenated in rank order on every rank. In place, the send
// buffer is this rank's chunk of the receive buffer.
#include "reference/comm/collectives/native.hpp"

namespace parity {
namespace {
using namespace collective_parts;

void mpi(const MpiNative& b, const CollectiveCall& c) {
  const bool in_place = c.send.data == c.recv.slice(static_cast<std::size_t>(b.rank) * c.send.count, 0).data;
  const int count = mpi_count(c.send.count, "all_gather");
  check_mpi(MPI_Allgather(in_place ? MPI_IN_PLACE : c.send.data, count, mpi_type(c.send.dtype), c.recv.data, count,
                          mpi_type(c.recv.dtype), b.comm),
            "MPI_Allgather");
}

#if PARITY_HAVE_CUDA
void nccl(const NcclNative& b, const CollectiveCall& c) {
  check_nccl(ncclAllGather(c.send.data, c.recv.data, c.send.count, nccl_type(c.send.dtype), b.comm, b.stream),
             "ncclAllGather", b.comm);
}
#endif

Source gathered(std::size_t count, int, int, int, std::size_t j) { return {static_cast<int>(j / count), j % count}; }

const RegisteredCollective kAllGather{
    {.collective = Collective::all_gather, .summary = "every rank's chunk, concatenated in rank order on every rank",
     .count_is_chunk = true, .send_count = count_as_is, .recv_count = n_chunks,
     .counts_fit = [](std::size_t send, std::size_t recv, std::size_t n) { return recv == send * n; },
     .counts_rule = "receive count must be size x send count", .in_place = InPlace::send_in_recv,
     .busbw_factor = busbw_n_minus_one_over_n, .busbw_text = "(n-1)/n", .source = gathered, .mpi = mpi,
     .nccl = PARITY_NCCL_CALL(nccl)}};

}  // namespace
}  // namespace parity
