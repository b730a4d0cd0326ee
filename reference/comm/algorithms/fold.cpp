// The fold onto a power of two shared by recursive doubling and Rabenseifner.
#include "reference/comm/algorithms/fold.hpp"

#include "reference/kernels/buffer_kernels.hpp"

namespace parity::algorithms {

Fold fold_ranks(const Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  Fold f;
  f.p = theory::power_of_two_floor(n);
  f.extra = n - f.p;
  if (r < 2 * f.extra) f.new_rank = (r % 2 == 1) ? r / 2 : -1;
  else f.new_rank = r - f.extra;
  return f;
}

void fold_in(Communicator& comm, const Fold& f, BufferView data, ReduceOp op) {
  const int r = comm.rank();
  if (r >= 2 * f.extra) return;
  if (f.new_rank < 0) {
    RequestPtr request = comm.isend(data, r + 1, 1 << 20);
    comm.wait(request);
  } else {
    BufferView incoming = comm.scratch(data.count, data.dtype, kScratchB);
    RequestPtr request = comm.irecv(incoming, r - 1, 1 << 20);
    comm.wait(request);
    reduce_into(data, incoming, op);
  }
}

void fold_out(Communicator& comm, const Fold& f, BufferView data) {
  const int r = comm.rank();
  if (r >= 2 * f.extra) return;
  RequestPtr request = f.new_rank < 0 ? comm.irecv(data, r + 1, (1 << 20) + 1) : comm.isend(data, r - 1, (1 << 20) + 1);
  comm.wait(request);
}

}  // namespace parity::algorithms
