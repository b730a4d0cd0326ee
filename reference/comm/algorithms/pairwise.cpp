// Pairwise-exchange all-to-all: in step k rank r trades chunks with rank p = (k - r) mod n.
// The pairing is symmetric (p's partner in step k is r), so each step is one exchange with one
// peer, and over n steps every rank meets every other once (and itself once). The same
// schedule works in place with one chunk of scratch.
#include "reference/comm/algorithms.hpp"
#include "reference/kernels/buffer_kernels.hpp"

namespace parity::algorithms {

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

}  // namespace parity::algorithms
