// Rabenseifner's all-reduce (halving-doubling; Rabenseifner 2004, Thakur et al. 2005):
// reduce-scatter by recursive halving (each round exchanges half of the remaining range with
// the partner across one bit), then all-gather by recursive doubling in reverse. Sends
// 2(p-1)/p of the buffer in 2 log2(p) messages. Non-powers of two fold as in recursive doubling.
#include "reference/comm/algorithms.hpp"
#include "reference/comm/algorithms/fold.hpp"
#include "reference/kernels/buffer_kernels.hpp"

namespace parity::algorithms {
namespace {

void rabenseifner_all_reduce(Communicator& comm, const CollectiveCall& call) {
  copy_buffer(call.recv, call.send);
  const Fold f = fold_ranks(comm);
  fold_in(comm, f, call.recv, call.op);
  BufferView data = call.recv;
  auto range = [&](int first_block, int blocks) {
    const std::size_t begin = block_begin(data.count, f.p, first_block);
    return data.slice(begin, block_begin(data.count, f.p, first_block + blocks) - begin);
  };
  if (f.new_rank >= 0) {
    // Halving: keep the half that contains our own block (highest bit first), so after
    // log2(p) rounds participant i holds the reduced block i.
    int first = 0, blocks = f.p;
    BufferView incoming = comm.scratch(data.count / 2 + f.p, data.dtype, kScratchA);
    for (int mask = f.p / 2; mask >= 1; mask /= 2) {
      const int partner = f.actual(f.new_rank ^ mask);
      blocks /= 2;
      const bool keep_lower = (f.new_rank & mask) == 0;
      BufferView keep = range(keep_lower ? first : first + blocks, blocks);
      BufferView give = range(keep_lower ? first + blocks : first, blocks);
      comm.send_recv(give, partner, incoming.slice(0, keep.count), partner, mask);
      reduce_into(keep, incoming.slice(0, keep.count), call.op);
      if (!keep_lower) first += blocks;
    }
    if (call.op == ReduceOp::avg) finish_average(range(f.new_rank, 1), comm.size());
    // Doubling: exchange the ranges gathered so far, lowest bit first.
    for (int mask = 1; mask < f.p; mask *= 2) {
      const int partner = f.actual(f.new_rank ^ mask);
      const int partner_first = first ^ mask;  // the partner's range mirrors ours across bit `mask`
      comm.send_recv(range(first, blocks), partner, range(partner_first, blocks), partner, f.p + mask);
      first = std::min(first, partner_first);
      blocks *= 2;
    }
  }
  fold_out(comm, f, data);
}

const RegisteredAlgorithm kRabenseifnerAllReduce{{
    .name = "rabenseifner",
    .collective = Collective::all_reduce,
    .order = 40,
    .summary = "recursive halving reduce-scatter then recursive doubling all-gather; non-powers of two fold first",
    .bytes_sent_per_rank =
        [](int n, double b) {
          const int p = theory::power_of_two_floor(n);
          return (p * 2.0 * (p - 1) / p * b + 2.0 * (n - p) * b) / n;
        },
    .predicted_seconds = theory::rabenseifner_all_reduce_seconds,
    .run = rabenseifner_all_reduce}};
}  // namespace
}  // namespace parity::algorithms
