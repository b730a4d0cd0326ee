// all_to_all: chunk p of rank r's buffer goes to rank p, where it is chunk r.
#include "reference/comm/collectives/native.hpp"

namespace parity {
namespace {
using namespace collective_parts;

void mpi(const MpiNative& b, const CollectiveCall& c) {
  const int count = mpi_count(c.send.count / static_cast<std::size_t>(b.size), "all_to_all");
  check_mpi(MPI_Alltoall(c.send.data == c.recv.data ? MPI_IN_PLACE : c.send.data, count, mpi_type(c.send.dtype),
                         c.recv.data, count, mpi_type(c.recv.dtype), b.comm),
            "MPI_Alltoall");
}

#if PARITY_HAVE_CUDA
void nccl(const NcclNative& b, const CollectiveCall& c) {
  BufferView send = c.send;
  if (send.data == c.recv.data) {  // NCCL documents no in-place all-to-all: send from a copy
    const BufferView copy = b.owner.scratch(send.count, send.dtype, kNcclScratchSlot);
    copy_buffer(copy, send);
    send = copy;
  }
  const std::size_t chunk = send.count / static_cast<std::size_t>(b.size);
  check_nccl(ncclAlltoAll(send.data, c.recv.data, chunk, nccl_type(send.dtype), b.comm, b.stream), "ncclAlltoAll", b.comm);
}
#endif

Source exchanged(std::size_t count, int, int, int r, std::size_t j) {
  return {static_cast<int>(j / count), static_cast<std::size_t>(r) * count + j % count};
}

const RegisteredCollective kAllToAll{
    {.collective = Collective::all_to_all, .summary = "chunk p of rank r's buffer goes to rank p, where it is chunk r",
     .count_is_chunk = true, .send_count = n_chunks, .recv_count = n_chunks,
     .counts_fit = [](std::size_t send, std::size_t recv, std::size_t n) { return send == recv && send % n == 0; },
     .counts_rule = "send and receive counts must be equal multiples of the size",
     .busbw_factor = busbw_n_minus_one_over_n, .busbw_text = "(n-1)/n", .source = exchanged, .mpi = mpi,
     .nccl = PARITY_NCCL_CALL(nccl)}};

}  // namespace
}  // namespace parity
