// Clocks of a communicator's ranks put on one time axis. Each rank reads its own steady clock;
// rank 0's is the reference. A rank's offset to it is estimated by ping-pong (Cristian's
// method): the rank sends its time t1, rank 0 answers with its time t0, the answer arrives at
// t2; rank 0's clock read t0 somewhere in [t1, t2] of this rank's, so the offset is
// t0 - (t1 + t2) / 2 within half the round trip. The round with the shortest trip is kept.
// Ranks on one host share the clock; the estimate then only measures the method's noise.
#pragma once

#include "reference/comm/communicator.hpp"

namespace parity {

// Seconds on this process's steady clock (the epoch is arbitrary but fixed).
double steady_seconds();

struct ClockOffset {
  double offset_seconds = 0;       // add to this rank's steady_seconds() for rank 0's
  double uncertainty_seconds = 0;  // half the shortest round trip (0 on rank 0)
};

// Collective over comm: every rank learns its own offset to rank 0. Throws UsageError for
// fewer than one round.
ClockOffset estimate_clock_offset(Communicator& comm, int rounds = 16);

}  // namespace parity
