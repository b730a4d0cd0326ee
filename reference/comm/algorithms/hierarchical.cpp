// Hierarchical all-reduce: the communication hierarchy of a cluster in two levels, the scheme
// NCCL runs within a node over NVLink and between nodes over the network (and the textbook's
// 2D all-reduce). With every host holding L ranks: the host's ranks reduce-scatter the buffer
// among themselves (a ring of L), each then all-reduces its 1/L with the ranks holding the same
// block on the other hosts (a ring of H hosts), and the host's ranks all-gather the blocks.
// Only 1/L of the buffer crosses the network per rank, in 2(H-1) steps instead of the flat
// ring's 2(n-1); the bytes in all stay the flat ring's 2(n-1)/n (theory/hierarchy.hpp).
// Hosts of unequal size: each host reduces to its first rank (binomial tree), the first ranks
// all-reduce around a ring, and each host's first rank broadcasts the result back.
#include "reference/comm/algorithms.hpp"
#include "reference/kernels/buffer_kernels.hpp"

namespace parity::algorithms {
namespace {

// The algorithms each level runs, looked up once (the registry is complete by the first call).
const AlgorithmDescriptor& ring_all_reduce() {
  static const AlgorithmDescriptor& ring = find_algorithm(Collective::all_reduce, "ring");
  return ring;
}
const AlgorithmDescriptor& tree(Collective collective) {
  static const AlgorithmDescriptor& reduce = find_algorithm(Collective::reduce, "binomial_tree");
  static const AlgorithmDescriptor& broadcast = find_algorithm(Collective::broadcast, "binomial_tree");
  return collective == Collective::reduce ? reduce : broadcast;
}

void hierarchical_all_reduce(Communicator& comm, const CollectiveCall& call) {
  const Communicator::Hierarchy& levels = comm.hierarchy();
  Communicator& host = *levels.host;
  // An average is a sum over every rank, divided once at the end.
  const ReduceOp op = call.op == ReduceOp::avg ? ReduceOp::sum : call.op;
  if (levels.uniform) {
    const int l = host.size();
    if (l > 1)
      ring_reduce_scatter_blocks(host, call.send, call.recv, op);
    else
      copy_buffer(call.recv, call.send);
    // After the reduce-scatter this rank holds block (place + 1) mod L, as its counterparts on
    // the other hosts do: they all-reduce it among themselves, in place.
    const BufferView mine = block_of(call.recv, l, (host.rank() + 1) % l);
    if (levels.hosts > 1) ring_all_reduce().run(*levels.across, {Collective::all_reduce, mine, mine, op});
    if (call.op == ReduceOp::avg) finish_average(mine, comm.size());
    if (l > 1) ring_all_gather_in_place(host, call.recv, 1);
    return;
  }
  tree(Collective::reduce).run(host, {Collective::reduce, call.send, call.recv, op, 0});
  if (host.rank() == 0) {
    ring_all_reduce().run(*levels.across, {Collective::all_reduce, call.recv, call.recv, op});
    if (call.op == ReduceOp::avg) finish_average(call.recv, comm.size());
  }
  tree(Collective::broadcast).run(host, {Collective::broadcast, call.recv, call.recv, op, 0});
}

// Bytes and time as the flat ring's: the mean bytes per rank are the same for every host layout
// (theory::hierarchical_all_reduce_bytes splits them by level), and one link model, as the
// descriptor takes, prices both levels alike.
const RegisteredAlgorithm kHierarchicalAllReduce{{
    .name = "hierarchical",
    .collective = Collective::all_reduce,
    .order = 50,
    .summary = "reduce-scatter within each host, all-reduce of each rank's block across hosts, all-gather within "
               "the host (hosts of unequal size: reduce, all-reduce among the hosts' first ranks, broadcast)",
    .bytes_sent_per_rank = theory::ring_all_reduce_bytes_per_rank,
    .predicted_seconds = theory::ring_all_reduce_seconds,
    .run = hierarchical_all_reduce}};

}  // namespace
}  // namespace parity::algorithms
