// Ring algorithms (Patarasuk and Yuan 2009; the NCCL ring). The buffer is cut into n blocks;
// in reduce-scatter each rank passes a partial block to its right neighbour n-1 times, adding
// its own contribution on the way; in all-gather the finished blocks travel round once more.
// Each rank sends 2(n-1)/n of the buffer in all-reduce: bandwidth-optimal, independent of n.
#include "reference/comm/algorithms.hpp"
#include "reference/kernels/buffer_kernels.hpp"

namespace parity::algorithms {
namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

BufferView block(BufferView buffer, int n, int i) { return block_of(buffer, n, i); }

}  // namespace

// Reduce-scatter of `input` into `data` (both n blocks; they may be the same buffer):
// afterwards block (r+1) mod n of `data` holds the full reduction. Each arriving partial block
// is combined with this rank's own input block straight into `data`, so an out-of-place call
// needs no separate copy. The next block's receive is posted before the current one is
// reduced, so communication overlaps the reduction (two scratch buffers alternate).
void ring_reduce_scatter_blocks(Communicator& comm, BufferView input, BufferView data, ReduceOp op) {
  const int n = comm.size(), r = comm.rank();
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  const std::size_t largest = block_begin(data.count, n, 1) + 1;
  BufferView incoming[2] = {comm.scratch(largest, data.dtype, kScratchA),
                            comm.scratch(largest, data.dtype, kScratchB)};
  auto receive_block = [&](int step) { return mod(r - step - 1, n); };
  auto post_receive = [&](int step) {
    BufferView target = block(data, n, receive_block(step));
    return comm.irecv(incoming[step % 2].slice(0, target.count), left, step);
  };
  RequestPtr receive = post_receive(0);
  RequestPtr send = comm.isend(block(input, n, r), right, 0);
  for (int step = 0; step < n - 1; ++step) {
    RequestPtr next_receive = step + 1 < n - 1 ? post_receive(step + 1) : nullptr;
    comm.wait(receive);
    const int index = receive_block(step);
    BufferView target = block(data, n, index);
    reduce_to(target, block(input, n, index), incoming[step % 2].slice(0, target.count), op);
    comm.wait(send);
    if (step + 1 < n - 1) send = comm.isend(target, right, step + 1);
    receive = std::move(next_receive);
  }
}

void ring_all_gather_in_place(Communicator& comm, BufferView data, int shift) {
  const int n = comm.size(), r = comm.rank();
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  for (int step = 0; step < n - 1; ++step) {
    BufferView outgoing = block(data, n, mod(r + shift - step, n));
    BufferView arriving = block(data, n, mod(r + shift - step - 1, n));
    comm.send_recv(outgoing, right, arriving, left, n + step);
  }
}

std::size_t block_begin(std::size_t count, int blocks, int i) {
  // count * i may exceed 64 bits only beyond 2^57 elements; not a practical concern.
  return count * static_cast<std::size_t>(i) / static_cast<std::size_t>(blocks);
}

BufferView block_of(BufferView buffer, int blocks, int i) {
  const std::size_t begin = block_begin(buffer.count, blocks, i);
  return buffer.slice(begin, block_begin(buffer.count, blocks, i + 1) - begin);
}

namespace {

void ring_all_reduce(Communicator& comm, const CollectiveCall& call) {
  if (comm.size() == 1) return copy_buffer(call.recv, call.send);
  // Every block of recv is written by one of the two phases; none is read before it is.
  ring_reduce_scatter_blocks(comm, call.send, call.recv, call.op);
  if (call.op == ReduceOp::avg) finish_average(block(call.recv, comm.size(), (comm.rank() + 1) % comm.size()), comm.size());
  ring_all_gather_in_place(comm, call.recv, 1);
}

// Reduce-scatter with the result for rank r in its own chunk: partial sums travel in scratch
// buffers, so the send buffer is only read and the receive buffer written once, at the end.
void ring_reduce_scatter(Communicator& comm, const CollectiveCall& call) {
  const int n = comm.size(), r = comm.rank();
  const std::size_t c = call.recv.count;
  auto chunk = [&](int i) { return call.send.slice(static_cast<std::size_t>(i) * c, c); };
  if (n == 1) {
    copy_buffer(call.recv, chunk(0));
  } else {
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    BufferView partial[2] = {comm.scratch(c, call.recv.dtype, kScratchA), comm.scratch(c, call.recv.dtype, kScratchB)};
    BufferView outgoing = chunk(mod(r - 1, n));  // step 0 sends our own contribution
    for (int step = 0; step < n - 1; ++step) {
      // Arriving: the left neighbour's partial sum of chunk (r - step - 2) mod n.
      const int index = mod(r - step - 2, n);
      BufferView arriving = partial[step % 2];
      comm.send_recv(outgoing, right, arriving, left, step);
      BufferView result = step == n - 2 ? call.recv : arriving;
      reduce_to(result, arriving, chunk(index), call.op);
      outgoing = result;
    }
  }
  if (call.op == ReduceOp::avg) finish_average(call.recv, n);
}

void ring_all_gather(Communicator& comm, const CollectiveCall& call) {
  const std::size_t c = call.send.count;
  copy_buffer(call.recv.slice(static_cast<std::size_t>(comm.rank()) * c, c), call.send);
  ring_all_gather_in_place(comm, call.recv, 0);
}

const RegisteredAlgorithm kRingAllReduce{{
    .name = "ring",
    .collective = Collective::all_reduce,
    .order = 10,
    .summary = "reduce-scatter then all-gather around a ring, double-buffered; sends 2(n-1)/n of the buffer",
    .bytes_sent_per_rank = theory::ring_all_reduce_bytes_per_rank,
    .predicted_seconds = theory::ring_all_reduce_seconds,
    .run = ring_all_reduce}};
const RegisteredAlgorithm kRingReduceScatter{{
    .name = "ring",
    .collective = Collective::reduce_scatter,
    .order = 10,
    .summary = "partial sums travel n-1 steps round a ring",
    .bytes_sent_per_rank = theory::ring_chunked_bytes_per_rank,
    .predicted_seconds = theory::ring_chunked_seconds,
    .run = ring_reduce_scatter}};
const RegisteredAlgorithm kRingAllGather{{
    .name = "ring",
    .collective = Collective::all_gather,
    .order = 10,
    .summary = "chunks travel n-1 steps round a ring",
    .bytes_sent_per_rank = theory::ring_chunked_bytes_per_rank,
    .predicted_seconds = theory::ring_chunked_seconds,
    .run = ring_all_gather}};

}  // namespace
}  // namespace parity::algorithms
