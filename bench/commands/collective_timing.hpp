// How a collective is timed, shared by bench collectives (a row of its sweep) and the
// calibration (each collective's efficiency and alpha-beta fit): the buffers of a row, the timed
// calls, and a native sweep over sizes.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "reference/comm/algorithms.hpp"
#include "reference/comm/communicator.hpp"
#include "reference/comm/collectives.hpp"
#include "reference/core/buffer.hpp"
#include "reference/comm/mirror.hpp"

namespace parity::cli {

// Elements the count column holds for a size: the whole buffer, or the per-rank chunk (for
// per-peer counts the chunk of their pattern, taken from the size as all_to_all's, so that the
// two compare at one size).
std::size_t count_for(Collective c, std::size_t bytes, DataType type, int n);

// Fills a send buffer with small integers so floating arithmetic stays in normal numbers.
void fill_small_values(BufferView b, int rank);

struct Timing {
  std::vector<double> rank_means;  // seconds, per rank
  std::vector<double> slowest;     // seconds, per iteration: the slowest rank's time
};
// `warmup` calls, then `iterations` calls each after a barrier, every rank's times gathered.
Timing time_collective(Communicator& comm, const AlgorithmDescriptor& algorithm, CollectiveCall call,
                       HalfAccumulate half, int warmup, int iterations);

// The buffers of one row (scratch persists in the communicator): send and receive buffers of
// `count` (in place: one buffer), the send buffer filled with small values, the per-peer counts
// of the collectives that take them; on a GPU the call takes device copies of them. The call
// points into the object: it is neither copied nor moved.
struct RowBuffers {
  RowBuffers(Communicator& comm, Collective c, DataType type, ReduceOp op, int root, std::size_t count, bool in_place,
             bool on_gpu);
  RowBuffers(const RowBuffers&) = delete;
  RowBuffers& operator=(const RowBuffers&) = delete;
  PeerCounts blocks;
  std::optional<HostBuffer> send, recv;
  std::optional<Mirror> device;
  CollectiveCall call;
};

// One collective's native algorithm over `sizes` as bench collectives times a row (float32 sum,
// out of place, on the device's memory where the job runs on GPUs): time_collective, a point's
// time the mean over ranks of each rank's mean, its bytes the row's size_bytes. Sizes that come
// to the same count are timed once.
struct SweepPoint {
  double bytes = 0, seconds = 0;
};
std::vector<SweepPoint> time_native_sweep(Communicator& comm, Collective collective, const std::vector<std::size_t>& sizes,
                                          int warmup, int iterations, HalfAccumulate half, bool on_gpu);

}  // namespace parity::cli
