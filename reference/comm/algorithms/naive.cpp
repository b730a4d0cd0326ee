// Naive all-reduce: every rank sends its whole buffer to rank 0, which reduces them in rank
// order and sends the result back to everyone. O(n) bytes through the root: the baseline the
// ring improves on.
#include "reference/comm/algorithms.hpp"
#include "reference/kernels/buffer_kernels.hpp"

namespace parity::algorithms {
namespace {

void naive_all_reduce(Communicator& comm, const CollectiveCall& call) {
  const int n = comm.size();
  if (comm.rank() != 0) {
    RequestPtr requests[2] = {comm.isend(call.send, 0, 0), nullptr};
    comm.wait(requests[0]);  // the send buffer may be the receive buffer (in place)
    requests[1] = comm.irecv(call.recv, 0, 1);
    comm.wait(requests[1]);
    return;
  }
  copy_buffer(call.recv, call.send);
  BufferView incoming = comm.scratch(call.recv.count, call.recv.dtype, kScratchA);
  for (int peer = 1; peer < n; ++peer) {
    RequestPtr request = comm.irecv(incoming, peer, 0);
    comm.wait(request);
    reduce_into(call.recv, incoming, call.op);
  }
  if (call.op == ReduceOp::avg) finish_average(call.recv, n);
  std::vector<RequestPtr> sends;
  for (int peer = 1; peer < n; ++peer) sends.push_back(comm.isend(call.recv, peer, 1));
  comm.wait_all(sends);
}

const RegisteredAlgorithm kNaiveAllReduce{{
    .name = "naive",
    .collective = Collective::all_reduce,
    .order = 20,
    .summary = "every rank sends to rank 0, which reduces in rank order and sends the result back",
    .bytes_sent_per_rank = [](int n, double b) { return 2.0 * (n - 1) / n * b; },
    .predicted_seconds = theory::naive_all_reduce_seconds,
    .run = naive_all_reduce}};
}  // namespace
}  // namespace parity::algorithms
