// Pairwise-exchange all-to-all: in step k rank r trades chunks with rank p = (k - r) mod n.
// The pairing is symmetric (p's partner in step k is r), so each step is one exchange with one
// peer, and over n steps every rank meets every other once (and itself once). The same
// schedule works in place with one chunk of scratch.
//
// all_to_all_v runs the same schedule with per-peer blocks. A block of zero elements is no
// message at all, and both sides agree on that without talking: what r sends p
// (send_counts[p] on r) is what p expects from r (recv_counts[r] on p), so when one side skips
// a send the other skips the matching receive.
#include <vector>

#include "reference/comm/algorithms.hpp"
#include "reference/kernels/buffer_kernels.hpp"

namespace parity::algorithms {
namespace {

void pairwise_all_to_all(Communicator& comm, const CollectiveCall& call) {
  const int n = comm.size(), r = comm.rank();
  const std::size_t c = call.send.count / static_cast<std::size_t>(n);
  const bool in_place = call.send.data == call.recv.data;
  auto chunk = [c](BufferView b, int i) { return b.slice(static_cast<std::size_t>(i) * c, c); };
  BufferView staging = comm.scratch(c, call.recv.dtype, kScratchA);
  for (int k = 0; k < n; ++k) {
    const int peer = ((k - r) % n + n) % n;
    if (peer == r) {
      copy_buffer(chunk(call.recv, r), chunk(call.send, r));
      continue;
    }
    BufferView arriving = in_place ? staging : chunk(call.recv, peer);
    comm.send_recv(chunk(call.send, peer), peer, arriving, peer, k);
    if (in_place) copy_buffer(chunk(call.recv, peer), staging);
  }
}

// Block p of a packed buffer: counts[p] elements after the counts of the blocks before it.
std::vector<BufferView> packed_blocks(BufferView buffer, std::span<const std::size_t> counts) {
  std::vector<BufferView> blocks;
  blocks.reserve(counts.size());
  std::size_t displacement = 0;
  for (std::size_t count : counts) {
    blocks.push_back(buffer.slice(displacement, count));
    displacement += count;
  }
  return blocks;
}

void pairwise_all_to_all_v(Communicator& comm, const CollectiveCall& call) {
  const int n = comm.size(), r = comm.rank();
  const std::vector<BufferView> outgoing = packed_blocks(call.send, call.send_counts);
  const std::vector<BufferView> arriving = packed_blocks(call.recv, call.recv_counts);
  for (int k = 0; k < n; ++k) {
    const int peer = ((k - r) % n + n) % n;
    const BufferView& out = outgoing[static_cast<std::size_t>(peer)];
    const BufferView& in = arriving[static_cast<std::size_t>(peer)];
    if (peer == r) {
      copy_buffer(in, out);  // counts checked equal by validation
    } else if (out.count && in.count) {
      comm.send_recv(out, peer, in, peer, k);
    } else if (out.count) {
      RequestPtr send = comm.isend(out, peer, k);
      comm.wait(send);
    } else if (in.count) {
      RequestPtr receive = comm.irecv(in, peer, k);
      comm.wait(receive);
    }
  }
}

const RegisteredAlgorithm kPairwiseAllToAll{{
    .name = "pairwise",
    .collective = Collective::all_to_all,
    .order = 10,
    .summary = "n-1 pairwise exchanges, partner (step - rank) mod n",
    .bytes_sent_per_rank = theory::ring_chunked_bytes_per_rank,
    .predicted_seconds = theory::pairwise_all_to_all_seconds,
    .run = pairwise_all_to_all}};
const RegisteredAlgorithm kPairwiseAllToAllV{{
    .name = "pairwise",
    .collective = Collective::all_to_all_v,
    .order = 10,
    .summary = "n-1 pairwise exchanges of per-peer blocks, partner (step - rank) mod n; empty blocks are not sent",
    .bytes_sent_per_rank = theory::pairwise_all_to_all_v_bytes_per_rank,
    .predicted_seconds = theory::pairwise_all_to_all_v_seconds,
    .run = pairwise_all_to_all_v}};

}  // namespace
}  // namespace parity::algorithms
