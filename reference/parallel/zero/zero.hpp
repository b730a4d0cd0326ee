// ZeRO (Rajbhandari et al. 2020) stages 1-3, FSDP-style: each top-level layer of the model is
// a unit whose parameters live in one flat buffer, padded to a multiple of the data-parallel
// size n; rank r owns chunk r (padded / n elements) of every unit.
//
//   stage 1: optimizer state (and master weights) sharded. Full gradients are kept, each
//            unit's gradient is reduce-scattered once the last micro-batch's backward has
//            produced it, each rank updates its chunk, and the new parameters are all-gathered.
//   stage 2: gradients sharded too. A unit's full gradient exists only while backward
//            produces it (a communication buffer); it is reduce-scattered every micro-batch
//            and added into the rank's gradient chunk.
//   stage 3: parameters sharded too. A unit's parameters are all-gathered just before its
//            forward and its backward (and before any layer that borrows them: a tied LM
//            head) and freed right after.
//
// Two parts of the step share the shards: the gradient synchronisation (reduce-scatter, and
// the stage-3 gathers around the passes) and the sharded optimizer step (update the chunk,
// all-gather for stages 1-2). Model-state bytes per rank (p, g bytes per parameter and
// gradient element, K optimizer bytes per element, P the padded count): stage 1
// (p+g)P + K P/n; stage 2 p P + (g+K) P/n; stage 3 (p+g+K) P/n (theory/parallel.hpp).
// Communication: 2P(n-1)/n elements per rank per step for stages 1 and 2, 3P(n-1)/n for
// stage 3 (each unit gathered twice, once per pass).
#pragma once

#include <map>
#include <memory>

#include "reference/parallel/data/config.hpp"
#include "reference/parallel/step.hpp"

namespace parity::parallel {

class ZeroShards;

// The gradient synchronisation and the optimizer step of a ZeRO stage over `group` (the
// data-parallel ranks), sharing the model's flat units. The model's parameters are rebound
// to the units' buffers (stages 1-2) or dropped between passes (stage 3).
struct ZeroParts {
  std::unique_ptr<GradientSync> sync;
  std::unique_ptr<OptimizerStep> optimizer;
};
ZeroParts make_zero(Communicator& group, model::Model& model, const model::Optimizer& optimizer,
                    const DataParallelConfig& config);

}  // namespace parity::parallel
