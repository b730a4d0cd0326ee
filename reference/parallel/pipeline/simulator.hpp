// Validator and discrete-event simulator of pipeline schedules. Each rank runs its actions in
// order; an action starts when the rank is free and what it needs has arrived: the previous
// stage's forward output (forward), the next stage's input gradient and its own forward
// (B or I), its own I (W). A message between ranks costs alpha + bytes x beta and does not
// occupy either rank (sends are non-blocking, as in the executor). The same rules decide
// validity: a schedule whose simulation cannot finish deadlocks.
#pragma once

#include <string>
#include <vector>

#include "reference/parallel/pipeline/schedule.hpp"

namespace parity::parallel::pipeline {

struct Costs {
  // Seconds of each kind of work on each rank (one entry per rank), per action: an action on
  // one chunk of a rank that holds v chunks costs the same as any other of its chunks.
  std::vector<double> forward, backward, input_grad, weight_grad;
  double alpha_seconds = 0;
  double seconds_per_byte = 0;
  double message_bytes = 0;  // one activation (or its gradient) of a micro-batch
  // Every rank alike: backward = input_grad + weight_grad; no communication cost.
  static Costs uniform(int ranks, double forward, double input_grad, double weight_grad);
  double message_seconds() const { return alpha_seconds + message_bytes * seconds_per_byte; }
};

struct Interval {
  Action action;
  double start = 0, end = 0;
};

struct Timeline {
  std::vector<std::vector<Interval>> ranks;
  double makespan = 0;
  std::vector<double> busy;         // seconds of work per rank
  // Per rank, the most (stage, micro-batch) pairs whose forward has run and whose backward
  // (B, or I when split) has not: the activations it holds at its peak, counted as Qi et al.
  // count them.
  std::vector<int> peak_in_flight;
  // Per rank, the most pairs whose forward has run and whose B or W has not: with the
  // backward split, a deferred W keeps the layer inputs its weight gradient reads.
  std::vector<int> peak_held;
  double bubble_fraction(int rank) const;   // idle over the step: 1 - busy / makespan
  double bubble_over_ideal(int rank) const; // idle over busy: (makespan - busy) / busy
};

// Checks the schedule's structure (every stage on one rank, one F and one B, or one I and one
// W, per stage and micro-batch, each backward after its forward on the rank, W after I) and
// that it runs to the end; throws UsageError naming the rank, the action and the rule broken.
// Returns its timeline with every action costing 1 (backward 2) and free messages.
Timeline validate(const Schedule& schedule);
Timeline simulate(const Schedule& schedule, const Costs& costs);

}  // namespace parity::parallel::pipeline
