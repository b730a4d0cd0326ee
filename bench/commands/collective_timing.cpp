// How a collective is timed (bench/commands/collective_timing.hpp).
#include "bench/commands/collective_timing.hpp"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "bench/cli/shared.hpp"
#include "reference/core/dtype.hpp"

namespace parity::cli {

using Clock = std::chrono::steady_clock;

std::size_t count_for(Collective c, std::size_t bytes, DataType type, int n) {
  return bytes / size_of(type) / (describe(c).count_is_chunk ? static_cast<std::size_t>(n) : 1);
}

void fill_small_values(BufferView b, int rank) {
  visit_data_type(b.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = b.as<T>();
    for (std::size_t i = 0; i < b.count; ++i) p[i] = from_double<T>(static_cast<double>((i + static_cast<std::size_t>(rank)) % 7 + 1));
  });
}

Timing time_collective(Communicator& comm, const AlgorithmDescriptor& algorithm, CollectiveCall call,
                       HalfAccumulate half, int warmup, int iterations) {
  for (int it = 0; it < warmup; ++it) run_collective(comm, algorithm, call, half);
  std::vector<double> mine(static_cast<std::size_t>(iterations));
  for (int it = 0; it < iterations; ++it) {
    comm.barrier();
    const auto t0 = Clock::now();
    run_collective(comm, algorithm, call, half);
    mine[static_cast<std::size_t>(it)] = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  const std::size_t n = static_cast<std::size_t>(comm.size());
  std::vector<double> all(mine.size() * n);
  comm.all_gather({mine.data(), mine.size(), DataType::float64, MemorySpace::host},
                  {all.data(), all.size(), DataType::float64, MemorySpace::host});
  Timing t;
  t.rank_means.resize(n);
  t.slowest.assign(mine.size(), 0.0);
  for (std::size_t r = 0; r < n; ++r) {
    double sum = 0;
    for (std::size_t it = 0; it < mine.size(); ++it) {
      const double x = all[r * mine.size() + it];
      sum += x;
      t.slowest[it] = std::max(t.slowest[it], x);
    }
    t.rank_means[r] = sum / static_cast<double>(mine.size());
  }
  return t;
}

RowBuffers::RowBuffers(Communicator& comm, Collective c, DataType type, ReduceOp op, int root, std::size_t count,
                       bool in_place, bool on_gpu)
    : blocks(peer_counts(c, count, comm.size(), comm.rank())) {
  const int n = comm.size();
  const CollectiveDescriptor& d = describe(c);
  const std::size_t sc = d.send_count(count, n, comm.rank()), rc = d.recv_count(count, n, comm.rank());
  send.emplace(in_place ? 0 : sc, type);
  recv.emplace(std::max(in_place ? std::max(sc, rc) : rc, std::size_t{1}), type);
  call = CollectiveCall{c, {}, {}, op, root, blocks.send, blocks.recv};
  if (in_place) {
    place_in(call, recv->view().slice(0, std::max(sc, rc)), count, comm.rank());
  } else {
    call.send = send->view();
    call.recv = recv->view().slice(0, rc);
  }
  fill_small_values(call.send, comm.rank());
  if (on_gpu) {
    device.emplace(call.send, call.recv, MemorySpace::cuda, 0, allocator_for(MemorySpace::cuda));
    call.send = device->send();
    call.recv = device->recv();
  }
}

std::vector<SweepPoint> time_native_sweep(Communicator& comm, Collective collective, const std::vector<std::size_t>& sizes,
                                          int warmup, int iterations, HalfAccumulate half, bool on_gpu) {
  const int n = comm.size();
  const AlgorithmDescriptor& native = find_algorithm(collective, "native");
  std::vector<std::size_t> counts;
  for (const std::size_t size : sizes) counts.push_back(count_for(collective, size, DataType::float32, n));
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  std::vector<SweepPoint> out;
  for (const std::size_t count : counts) {
    const RowBuffers buffers(comm, collective, DataType::float32, ReduceOp::sum, 0, count, false, on_gpu);
    const Timing timing = time_collective(comm, native, buffers.call, half, warmup, iterations);
    const double mean = std::accumulate(timing.rank_means.begin(), timing.rank_means.end(), 0.0) / n;
    out.push_back({collective_bytes(collective, count, size_of(DataType::float32), n), mean});
  }
  return out;
}

}  // namespace parity::cli
