// Recursive doubling all-reduce (Thakur et al. 2005): in round k each rank exchanges its whole
// buffer with the rank whose number differs in bit k and reduces; log2(n) rounds. For n not a
// power of two, the ranks beyond p = 2^k fold in first (fold.hpp).
#include "reference/comm/algorithms.hpp"
#include "reference/comm/algorithms/fold.hpp"
#include "reference/kernels/buffer_kernels.hpp"

namespace parity::algorithms {

void recursive_doubling_all_reduce(Communicator& comm, const CollectiveCall& call) {
  copy_buffer(call.recv, call.send);
  const Fold f = fold_ranks(comm);
  fold_in(comm, f, call.recv, call.op);
  if (f.new_rank >= 0) {
    BufferView incoming = comm.scratch(call.recv.count, call.recv.dtype, kScratchA);
    for (int mask = 1; mask < f.p; mask <<= 1) {
      const int partner = f.actual(f.new_rank ^ mask);
      comm.send_recv(call.recv, partner, incoming, partner, mask);
      // a + b is the same number on both sides (IEEE addition and multiplication commute),
      // so every rank ends with identical bits.
      reduce_into(call.recv, incoming, call.op);
    }
  }
  fold_out(comm, f, call.recv);
  if (call.op == ReduceOp::avg) finish_average(call.recv, comm.size());
}

}  // namespace parity::algorithms
