// Recursive doubling all-reduce (Thakur et al. 2005): in round k each rank exchanges its whole
// buffer with the rank whose number differs in bit k and reduces; log2(n) rounds. For n not a
// power of two, the ranks beyond p = 2^k fold in first (fold.hpp).
#include <bit>

#include "reference/comm/algorithms.hpp"
#include "reference/comm/algorithms/fold.hpp"
#include "reference/kernels/buffer_kernels.hpp"

namespace parity::algorithms {
namespace {

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

const RegisteredAlgorithm kRecursiveDoublingAllReduce{{
    .name = "recursive_doubling",
    .collective = Collective::all_reduce,
    .order = 30,
    .summary = "log2(n) whole-buffer exchanges across one bit each; non-powers of two fold first",
    .bytes_sent_per_rank =
        [](int n, double b) {
          const int p = theory::power_of_two_floor(n);
          const double rounds = std::bit_width(static_cast<unsigned>(p)) - 1;
          // participants send every round; folded pairs add one message each way
          return (p * rounds * b + 2.0 * (n - p) * b) / n;
        },
    .predicted_seconds = theory::recursive_doubling_all_reduce_seconds,
    .run = recursive_doubling_all_reduce}};
}  // namespace
}  // namespace parity::algorithms
