// Binomial trees (Thakur et al. 2005). Ranks are renumbered relative to the root
// (v = (r - root) mod n). Reduce: in round k, ranks with bit k set send their partial result
// to v - 2^k and drop out; the others add what v + 2^k sends. Broadcast runs the same tree
// from the root outwards. ceil(log2 n) rounds of whole-buffer messages.
#include "reference/comm/algorithms.hpp"
#include "reference/kernels/buffer_kernels.hpp"

namespace parity::algorithms {
namespace {

void binomial_tree_reduce(Communicator& comm, const CollectiveCall& call) {
  const int n = comm.size(), root = call.root;
  const int v = (comm.rank() - root + n) % n;
  // Only the root's receive buffer is written; elsewhere partial sums live in scratch.
  BufferView partial = v == 0 ? call.recv : comm.scratch(call.send.count, call.send.dtype, kScratchB);
  copy_buffer(partial, call.send);
  BufferView incoming = comm.scratch(call.send.count, call.send.dtype, kScratchA);
  for (int mask = 1; mask < n; mask <<= 1) {
    if (v & mask) {
      RequestPtr request = comm.isend(partial, (v - mask + root) % n, mask);
      comm.wait(request);
      return;
    }
    if (v + mask < n) {
      RequestPtr request = comm.irecv(incoming, (v + mask + root) % n, mask);
      comm.wait(request);
      reduce_into(partial, incoming, call.op);
    }
  }
  if (call.op == ReduceOp::avg) finish_average(partial, n);
}

void binomial_tree_broadcast(Communicator& comm, const CollectiveCall& call) {
  const int n = comm.size(), root = call.root;
  const int v = (comm.rank() - root + n) % n;
  int mask = 1;
  if (v == 0) copy_buffer(call.recv, call.send);
  // Receive from the parent: the rank that differs in our lowest set bit.
  for (; mask < n; mask <<= 1) {
    if (v & mask) {
      RequestPtr request = comm.irecv(call.recv, (v - mask + root) % n, 0);
      comm.wait(request);
      break;
    }
  }
  // Send to the children below that bit.
  std::vector<RequestPtr> sends;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < n) sends.push_back(comm.isend(call.recv, (v + mask + root) % n, 0));
  comm.wait_all(sends);
}

// Each rank but the root sends the whole buffer once.
double whole_buffer_tree(int n, double bytes) { return n > 1 ? bytes * (n - 1) / n : 0.0; }

const RegisteredAlgorithm kBinomialTreeReduce{{
    .name = "binomial_tree",
    .collective = Collective::reduce,
    .order = 10,
    .summary = "binomial tree towards the root, ceil(log2 n) rounds",
    .bytes_sent_per_rank = whole_buffer_tree,
    .predicted_seconds = theory::binomial_tree_seconds,
    .run = binomial_tree_reduce}};
const RegisteredAlgorithm kBinomialTreeBroadcast{{
    .name = "binomial_tree",
    .collective = Collective::broadcast,
    .order = 10,
    .summary = "binomial tree from the root, ceil(log2 n) rounds",
    .bytes_sent_per_rank = whole_buffer_tree,
    .predicted_seconds = theory::binomial_tree_seconds,
    .run = binomial_tree_broadcast}};
}  // namespace
}  // namespace parity::algorithms
