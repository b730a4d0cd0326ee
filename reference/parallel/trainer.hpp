// The Trainer: runs a step's parts (step.hpp) for one optimizer step on one rank's share of the
// global batch. Per step it splits the batch over the data-parallel group and into
// micro-batches (batches.hpp), hands the schedule a StepContext, finishes the gradient
// synchronisations in order, asks mixed precision whether the job's gradients are finite
// (precision/precision.hpp) and the loss scaler whether the update runs (precision/
// loss_scaler.hpp), applies the optimizer step, and measures the step's time and traffic.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "reference/parallel/precision/loss_scaler.hpp"
#include "reference/parallel/step.hpp"

namespace parity::parallel {

struct StepStats {
  double loss = 0;                  // the global batch's loss (same on every rank)
  double seconds = 0;               // the whole step on this rank
  double compute_seconds = 0;       // forward and backward of every micro-batch, communication excluded
  // Time this rank's thread spent on communication instead of computing: waiting for the
  // streams (after backward, for ZeRO-3 gathers, for the parameter all-gather), running them
  // from the backward hooks, and blocking collectives of the parts. What overlap hides is the
  // rest: transfers that progressed while the rank computed.
  double exposed_comm_seconds = 0;
  double stream_seconds = 0;        // time the communication streams ran (hidden or not)
  std::uint64_t bytes_sent = 0;     // by the parts' point-to-point calls (reference algorithms)
  std::uint64_t messages_sent = 0;
  double loss_scale = 1;            // what this step's loss was multiplied by (LossScaling)
  bool skipped = false;             // no update: some rank's gradients held inf or NaN
};

// Runs the parts for one optimizer step. `data_parallel` is the group over which the global
// batch is split (its rank picks the rows) and the loss summed: the world for plain data
// parallelism, the dp (x cp) group of a grid otherwise; ranks of one tensor-parallel group take
// the same rows.
class Trainer {
 public:
  Trainer(model::Model& model, Communicator& data_parallel, std::int64_t global_batch, int micro_batches,
          StepParts parts);
  ~Trainer();  // removes the hooks it put on the model's layers
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One optimizer step on step `step`'s global batch (collective: every rank calls it).
  StepStats step(const BatchSource& batches, std::uint64_t step);
  ParameterValues gathered(bool master) { return parts_.optimizer->gathered(master); }

  model::Model& model() { return model_; }
  const StepParts& parts() const { return parts_; }
  // Appends a synchronisation that runs after the parts' own, when the gradients are final: a
  // check, or a fault to inject (the tests make one rank's gradient inf there).
  void add_sync(std::unique_ptr<GradientSync> sync);
  // Loss scaling (mixed precision; validated), and the ranks that agree on skipping a step:
  // every rank that trains the model (with tensor or pipeline parallelism more than the
  // data-parallel group, which is the default).
  void set_loss_scaling(const LossScaling& scaling, Communicator* job = nullptr);
  double loss_scale() const { return scaler_.scale(); }
  const LossScaler& scaler() const { return scaler_; }
  LossScaler& scaler() { return scaler_; }

 private:
  std::vector<StepPart*> all_parts();
  // Whether the step's update runs: with mixed precision, the job's gradients searched for inf
  // and NaN and the loss scaler asked (it throws when they are and the step cannot be skipped).
  bool update_applies(std::uint64_t step);
  model::Model& model_;
  Communicator& data_parallel_;
  std::int64_t global_batch_;
  int micro_batches_;
  StepParts parts_;
  std::vector<std::pair<model::Layer*, model::HookId>> hooks_;
  LossScaler scaler_;
  Communicator* job_;
};

}  // namespace parity::parallel
