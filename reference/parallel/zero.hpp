// ZeRO (Rajbhandari et al. 2020) stages 1-3, FSDP-style: each top-level layer of the model is
// a unit whose parameters live in one flat buffer, padded to a multiple of the world size n;
// rank r owns chunk r (padded / n elements) of every unit.
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
// Model-state bytes per rank (p, g bytes per parameter and gradient element, K optimizer
// bytes per element, P the padded count): stage 1 (p+g)P + K P/n; stage 2 p P + (g+K) P/n;
// stage 3 (p+g+K) P/n (theory/parallel.hpp). Communication: 2P(n-1)/n elements per rank per
// step for stages 1 and 2, 3P(n-1)/n for stage 3 (each unit gathered twice, once per pass).
#pragma once

#include "reference/parallel/data_parallel.hpp"
#include "reference/theory/parallel.hpp"

namespace parity::parallel {

class Zero : public DataParallelTrainer {
 public:
  Zero(Communicator& world, model::Model& model, const model::Optimizer& optimizer, DataParallelConfig config);
  ParameterValues gathered(bool master) override;
  std::int64_t padded_parameters() const override;
  // The units as the communication and memory formulas see them.
  std::vector<theory::ShardedUnit> units() const;

 protected:
  void begin_step() override;
  void begin_micro_batch(bool last) override;
  void finish_gradients() override;
  void finish_step() override;

 private:
  struct Unit {
    std::string name;
    std::vector<model::Parameter*> parameters;
    std::vector<std::int64_t> offsets;  // of each parameter in the flat buffer
    std::vector<Shape> shapes;
    std::int64_t count = 0;             // parameter elements
    std::int64_t padded = 0;            // count rounded up to a multiple of n
    std::int64_t chunk = 0;             // padded / n
    Tensor flat_parameters;             // stages 1-2: the model's storage; stage 3: gathered around a pass
    Tensor parameter_chunk;             // stage 3: the rank's chunk (stages 1-2: a segment of the flat buffer)
    Tensor flat_gradients;              // stage 1: kept; stages 2-3: while backward produces it
    Tensor gradient_chunk;              // stages 2-3
    int users = 0;                      // top-level layers whose forward reads these parameters
    int pending = 0;                    // users whose backward has not run in this micro-batch
    int gathered = 0;                   // stage 3: passes holding the gathered parameters
  };
  void hook(model::Layer& layer, model::HookPoint point);
  void acquire_parameters(Unit& unit);  // stage 3
  void release_parameters(Unit& unit);  // stage 3
  void ensure_gradients(Unit& unit);    // stages 2-3
  void gradients_final(Unit& unit);
  void point_gradients(Unit& unit);     // parameters' grads -> segments of flat_gradients
  std::vector<Unit> units_;
  std::map<const model::Layer*, std::vector<std::size_t>> needs_;  // top-level layer -> units it reads
};

}  // namespace parity::parallel
