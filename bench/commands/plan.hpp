// parity plan's pipeline from the schedule simulator (reference/parallel/pipeline/simulator.hpp)
// fed with the step model's costs (reference/theory/planner.hpp).
#pragma once

#include "reference/theory/planner.hpp"

namespace parity::cli {

// The layout's schedule (1F1B, interleaved 1F1B with v chunks, or a zero-bubble one) of its m micro-batches on pp
// ranks, simulated: each forward or backward action costs the slowest stage's share of one
// chunk (its collectives included) and the send of its output (the step model's point-to-point
// time: blocking sends, as Megatron-LM's schedules of 2021). The makespan replaces the closed
// form's micro-batches with their messages, fill and drain; the bubble is what is left of it.
// The rest of the step is the step model's. Unchanged without pipelining, and where the schedule
// would hold more than kMostSimulatedActions actions (pipeline_actions): those keep the closed
// form (simulated = false). A search simulates kMostSimulatedActionsInAll at most, fastest first.
inline constexpr double kMostSimulatedActions = 1 << 20;       // about 0.4 s and 100 MB here
inline constexpr double kMostSimulatedActionsInAll = 1 << 23;
// The actions of the layout's schedule: pp x m x v forwards and backwards, and the zero-bubble
// schedules' weight gradients too.
double pipeline_actions(const theory::PlanLayout& layout, int micro_batches);
theory::PlanPrediction with_simulated_pipeline(const theory::PlanLayout& layout, theory::PlanPrediction prediction);

}  // namespace parity::cli
