// all_to_all_v: all_to_all with a count per peer. Block p of rank r's send buffer
// (send_counts[p] elements) goes to rank p, where it is block r of the receive buffer
// (recv_counts[r] there); blocks are packed, zero allowed. No in-place form (MPI's takes one
// counts array for both sides; NCCL has none). Checked and benchmarked with the uneven pattern
// of theory::all_to_all_v_count.
#include <vector>

#include "reference/comm/collectives/native.hpp"
#include "reference/theory/collectives.hpp"

namespace parity {
namespace {
using namespace collective_parts;

void mpi(const MpiNative& b, const CollectiveCall& c) {
  // MPI takes int counts and displacements: the blocks packed, each at the sum of those before.
  const auto layout = [](std::span<const std::size_t> counts, std::vector<int>& ints, std::vector<int>& displacements) {
    std::size_t at = 0;
    for (std::size_t count : counts) {
      ints.push_back(mpi_count(count, "all_to_all_v count"));
      displacements.push_back(mpi_count(at, "all_to_all_v displacement"));
      at += count;
    }
  };
  std::vector<int> sc, sd, rc, rd;
  layout(c.send_counts, sc, sd);
  layout(c.recv_counts, rc, rd);
  check_mpi(MPI_Alltoallv(c.send.data, sc.data(), sd.data(), mpi_type(c.send.dtype), c.recv.data, rc.data(), rd.data(),
                          mpi_type(c.recv.dtype), b.comm),
            "MPI_Alltoallv");
}

#if PARITY_HAVE_CUDA
// NCCL has no all-to-all-v: one group of a send and a receive per peer. An empty block posts
// nothing on either side (the receiver's count for this rank is the sender's count for it).
// The block a rank keeps is copied on the same stream, not sent to itself.
void nccl(const NcclNative& b, const CollectiveCall& c) {
  std::size_t send_at = 0, recv_at = 0;  // displacements of peer's blocks, in elements
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  for (int peer = 0; peer < b.size; ++peer) {
    const BufferView out = c.send.slice(send_at, c.send_counts[static_cast<std::size_t>(peer)]);
    const BufferView in = c.recv.slice(recv_at, c.recv_counts[static_cast<std::size_t>(peer)]);
    send_at += out.count;
    recv_at += in.count;
    if (peer == b.rank) {
      copy_buffer(in, out);  // enqueued on the stream now, before the group's launch
      continue;
    }
    if (out.count) check_nccl(ncclSend(out.data, out.count, nccl_type(out.dtype), peer, b.comm, b.stream), "ncclSend", b.comm);
    if (in.count) check_nccl(ncclRecv(in.data, in.count, nccl_type(in.dtype), peer, b.comm, b.stream), "ncclRecv", b.comm);
  }
  check_nccl(ncclGroupEnd(), "ncclGroupEnd", b.comm);
}
#endif

// Receive blocks are packed in source order: find the source q of element j, then the element
// q sent from its block for r, which starts at q's send displacement for r.
Source source(std::size_t count, int n, int, int r, std::size_t j) {
  for (int q = 0; q < n; ++q) {
    const std::size_t block = theory::all_to_all_v_count(count, q, r);
    if (j < block) {
      std::size_t displacement = 0;
      for (int p = 0; p < r; ++p) displacement += theory::all_to_all_v_count(count, q, p);
      return {q, displacement + j};
    }
    j -= block;
  }
  return {Source::kNowhere, 0};  // beyond the receive buffer: never asked
}

std::size_t send_total(std::size_t count, int n, int rank) { return theory::all_to_all_v_send_total(count, rank, n); }
std::size_t recv_total(std::size_t count, int n, int rank) { return theory::all_to_all_v_recv_total(count, rank, n); }

const RegisteredCollective kAllToAllV{
    {.collective = Collective::all_to_all_v, .summary = "all_to_all with a count per peer, blocks packed, zero allowed",
     .count_is_chunk = true, .send_count = send_total, .recv_count = recv_total, .block = theory::all_to_all_v_count,
     .block_pattern = "rank r sending rank p chunk x ((p + 2r + 1) mod 3)", .in_place = InPlace::none,
     .busbw_factor = busbw_n_minus_one_over_n, .busbw_text = "(n-1)/n", .source = source, .mpi = mpi,
     .nccl = PARITY_NCCL_CALL(nccl)}};

}  // namespace
}  // namespace parity
