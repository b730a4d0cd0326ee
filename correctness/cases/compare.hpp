// What the training cases share: a model's parameters and optimizer state as float64 lists, the
// relative difference of two such lists, and small reductions over ranks.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "reference/comm/communicator.hpp"
#include "reference/model/optimizer.hpp"
#include "reference/parallel/batches.hpp"
#include "reference/parallel/step.hpp"
#include "reference/parallel/tensor/regions.hpp"
#include "reference/parallel/trainer.hpp"

namespace parity::cases {

// Parameters and optimizer state of a single-device model, in model order (state from the
// optimizer, or from `state` and `master` copies when given).
parallel::ParameterValues values_of(model::Model& m, const model::Optimizer* optimizer,
                                    const std::map<std::string, std::vector<Tensor>>* state = nullptr,
                                    const std::map<std::string, Tensor>* master = nullptr);
// The model's gradients as values (no state), in model order.
parallel::ParameterValues gradients_of(model::Model& m);
// The same names and sizes, all zero (an origin for differences relative to b itself).
parallel::ParameterValues zeros_like(const parallel::ParameterValues& values);

// ||a - b|| / ||b - origin|| over all parameters (the difference relative to what training
// changed), and ||state_a - state_b|| / ||state_b|| over all optimizer state.
struct Difference {
  double parameters = 0;
  double state = 0;
  std::string where;  // the parameter with the largest difference
};
Difference compare(const parallel::ParameterValues& a, const parallel::ParameterValues& b,
                   const parallel::ParameterValues& origin);

// Single-device training in mixed precision, the reference of the 16-bit cases: the model's
// 16-bit parameters and gradients, float32 master weights and optimizer state; the loss
// multiplied by `loss_scale` (a power of two) and the float32 gradients divided by it. Each
// step's loss, the first step's gradients (divided by the scale), and the masters with their
// state after the last step.
struct MixedRun {
  std::vector<double> losses;
  parallel::ParameterValues first_gradients, values;
};
MixedRun train_mixed_single_device(model::Model& m, model::Optimizer& optimizer, const parallel::BatchSource& source,
                                   std::int64_t rows, int steps, double loss_scale);

// One step's forward and backward of `m` on one device over the `rows` of step `step`'s batch,
// each data rank's share a pass of its own (as a data-parallel MoE step routes them: a pass's
// capacity and load follow its rows); the loss summed over the passes. No optimizer step.
double forward_backward_per_data_rank(model::Model& m, const parallel::BatchSource& source, int step, std::int64_t rows,
                                      int data_ranks);

// The first step's loss and gradients of `m` alone (no optimizer step): this rank's `mine` rows
// of the step-0 batch of `rows`, the loss multiplied by `loss_scale`; the gradients summed over
// `summed` (and, with tp's sequence parallelism, the sequence-sharded ones over tp), the tp shards
// gathered whole (`disagreeing`, when given, names whole parameters the tp ranks hold apart), and
// both divided back by the scale. The loss is summed over `loss_ranks`. Collective.
struct FirstStep {
  double loss = 0;
  parallel::ParameterValues gradients;
};
FirstStep first_step(model::Model& m, const parallel::BatchSource& source, parallel::RowRange mine, std::int64_t rows,
                     Communicator& summed, Communicator& loss_ranks, const parallel::TensorParallel* tp,
                     double loss_scale, std::vector<std::string>* disagreeing = nullptr);

// The gradients a trainer's optimizer step reads in its next step, kept as they were when the
// synchronisations finished (a sync appended to the trainer's). `whole` gives them per parameter
// of the rank's model, in model order, times `unscale` (1 / the step's loss scale): every
// segment's elements put back in their parameters and averaged over `sharing`, the ranks among
// which the optimizer's segments are spread (ZeRO's shard holders; replicated parameters agree
// on every rank). Collective over `sharing`.
class UpdateGradients {
 public:
  explicit UpdateGradients(parallel::Trainer& trainer);
  bool taken() const { return !segments_->empty(); }
  parallel::ParameterValues whole(model::Model& m, Communicator& sharing, double unscale) const;

 private:
  const parallel::OptimizerStep& optimizer_;
  std::shared_ptr<std::vector<std::vector<double>>> segments_;
};

// What differs of parameters and state after training (`d` against `bound`) and of whole
// parameters the ranks of a group hold apart (`disagreeing`, `between`: "tp ranks"), as failure
// text ("" when nothing).
std::string training_failures(const Difference& d, double bound, const std::vector<std::string>& disagreeing,
                              const std::string& between = "tp ranks");

// Rank 0's list on every rank of `comm` (the others' replaced). The single-device reference is
// trained on rank 0 alone and sent so: n ranks on one host would otherwise each train the same
// float64 model, most of a case's time at 8 ranks on 2 cores. Collective.
void broadcast_from_first(Communicator& comm, std::vector<double>& values);
void broadcast_from_first(Communicator& comm, parallel::ParameterValues& values);
double sum_over_ranks(Communicator& comm, double x);
double max_over_ranks(Communicator& comm, double x);
// "%.3g".
std::string format(double x);

// A check every rank makes on its own: "" when it held everywhere, else "`what`: `here`; " on the
// ranks where it failed (`here` saying how) and "`what` on another rank; " on the others.
// Collective.
std::string failed_on_any_rank(Communicator& comm, const std::string& what, const std::string& here);
// The verdict every rank agrees on: passed when no rank has `failures`; `message` is `compared`,
// after this rank's failures (or "failed on another rank; ") when not. Collective.
bool agreed_verdict(Communicator& comm, const std::string& failures, const std::string& compared, std::string& message);

// The verdict every rank agrees on (agreed_verdict) with the result's errors, the largest over
// ranks. Collective.
template <typename Result>
void agree_on(Communicator& comm, const std::string& failures, const std::string& compared, Result& r) {
  r.passed = agreed_verdict(comm, failures, compared, r.message);
  r.error = max_over_ranks(comm, r.error);
  r.loss_error = max_over_ranks(comm, r.loss_error);
  r.gradient_error = max_over_ranks(comm, r.gradient_error);
}

}  // namespace parity::cases
