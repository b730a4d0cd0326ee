// broadcast: every rank ends with the root's buffer.
#include "reference/comm/collectives/native.hpp"

namespace parity {
namespace {
using namespace collective_parts;

void mpi(const MpiNative& b, const CollectiveCall& c) {
  if (b.rank == c.root) copy_buffer(c.recv, c.send);
  check_mpi(MPI_Bcast(c.recv.data, mpi_count(c.recv.count, "broadcast"), mpi_type(c.recv.dtype), c.root, b.comm),
            "MPI_Bcast");
}

#if PARITY_HAVE_CUDA
void nccl(const NcclNative& b, const CollectiveCall& c) {
  check_nccl(ncclBroadcast(c.send.data, c.recv.data, c.recv.count, nccl_type(c.recv.dtype), c.root, b.comm, b.stream),
             "ncclBroadcast", b.comm);
}
#endif

Source from_root(std::size_t, int, int root, int, std::size_t j) { return {root, j}; }

const RegisteredCollective kBroadcast{
    {.collective = Collective::broadcast, .summary = "every rank ends with the root's buffer", .rooted = true,
     .send_count = count_as_is, .recv_count = count_as_is, .counts_fit = counts_equal,
     .counts_rule = "send and receive counts differ", .busbw_factor = busbw_one, .busbw_text = "1",
     .source = from_root, .mpi = mpi, .nccl = PARITY_NCCL_CALL(nccl)}};

}  // namespace
}  // namespace parity
