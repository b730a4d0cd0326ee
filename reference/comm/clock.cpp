#include "reference/comm/clock.hpp"

#include <chrono>
#include <limits>

#include "reference/core/error.hpp"

namespace parity {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ClockOffset estimate_clock_offset(Communicator& comm, int rounds) {
  if (rounds < 1) throw UsageError("clock offset: " + std::to_string(rounds) + " rounds; at least one is needed");
  ClockOffset out;
  constexpr int kTag = 0;
  double stamp = 0;
  const BufferView message{&stamp, 1, DataType::float64, MemorySpace::host};
  // Rank 0 answers each rank in turn; the others wait for theirs, so every exchange is alone.
  for (int peer = 1; peer < comm.size(); ++peer) {
    if (comm.rank() == 0) {
      for (int round = 0; round < rounds; ++round) {
        RequestPtr r = comm.irecv(message, peer, kTag);
        comm.wait(r);
        stamp = steady_seconds();
        RequestPtr s = comm.isend(message, peer, kTag);
        comm.wait(s);
      }
    } else if (comm.rank() == peer) {
      double shortest = std::numeric_limits<double>::infinity();
      for (int round = 0; round < rounds; ++round) {
        const double sent = steady_seconds();
        stamp = sent;
        RequestPtr s = comm.isend(message, 0, kTag);
        comm.wait(s);
        RequestPtr r = comm.irecv(message, 0, kTag);
        comm.wait(r);
        const double back = steady_seconds();
        if (back - sent < shortest) {
          shortest = back - sent;
          out.offset_seconds = stamp - (sent + back) / 2;
          out.uncertainty_seconds = shortest / 2;
        }
      }
    }
  }
  comm.barrier();
  return out;
}

}  // namespace parity
