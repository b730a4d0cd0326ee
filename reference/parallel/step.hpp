// A training step in parts, so that a technique replaces one part at a time:
//   - a schedule: the order in which the forward and backward of each micro-batch run (the
//     sequential schedule runs them one after another, accumulating gradients; a pipeline's
//     schedule is a table of actions). It sees the step through a StepContext only;
//   - gradient synchronisations, in order: what makes a rank's gradients those of the global
//     batch (a plain all-reduce, DDP buckets overlapped with backward, ZeRO's reduce-scatter,
//     the tensor-parallel group's sum of sequence-sharded LayerNorm gradients, ...);
//   - an optimizer step: replicated (every rank updates whole parameters) or sharded (a rank
//     updates its shard and the parameters are shared again), through float32 master copies
//     with mixed precision (precision/precision.hpp).
// The Trainer (trainer.hpp) runs them for one optimizer step on one rank's share of the global
// batch. A technique (reference/parallel/techniques/) is a named set of parts with its formulas.
//
// The loss of a rank is its rows' sum divided by the *global* count (Batch::normalizer), so its
// gradient is already weighted by local_rows / global_rows and the gradients are summed, not
// averaged: uneven shards (global batch not divisible by the world) give exactly the whole
// batch's mean. Loss scaling (precision/loss_scaler.hpp) divides that count by S.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reference/comm/algorithms.hpp"
#include "reference/comm/stream.hpp"
#include "reference/model/optimizer.hpp"
#include "reference/parallel/batches.hpp"
#include "reference/parallel/precision/precision.hpp"
#include "reference/theory/parallel.hpp"

namespace parity::parallel {

// Values of every parameter (and its optimizer state) in model order, as float64: what a
// conformance test compares. Sharded optimizer steps gather them.
struct ParameterValues {
  std::vector<std::string> names;
  std::vector<std::vector<double>> values;
  std::vector<std::vector<std::vector<double>>> state;  // [parameter][state tensor][element]
};

// What every part shares: a description, the communication it does (for the step's
// statistics) and the time the rank waited for it in the current step.
class StepPart {
 public:
  virtual ~StepPart() = default;
  virtual std::string describe() const = 0;
  // Streams the part queues work on, and communicators it calls directly (blocking).
  virtual std::vector<CommStream*> streams() { return {}; }
  virtual std::vector<Communicator*> communicators() { return {}; }
  double exposed_seconds = 0;  // reset by the trainer at the start of every step
};

// Wall seconds from `start` to now.
double seconds_since(std::chrono::steady_clock::time_point start);

// Makes a rank's gradients those of the global batch (on the elements the rank updates).
class GradientSync : public StepPart {
 public:
  // Called for every layer of the model around its passes (hooks the trainer installs).
  virtual void on_layer(model::Layer& layer, model::HookPoint point, const model::PassContext& context) {
    (void)layer, (void)point, (void)context;
  }
  virtual void begin_step() {}
  // Before each micro-batch's backward.
  virtual void begin_backward(const MicroBatch& micro_batch) { (void)micro_batch; }
  // After the last backward: the gradients the optimizer step reads are final on return.
  virtual void finish() = 0;
};

// Which parameter elements a stretch of a segment holds: `count` elements from `in_segment` on
// are the parameter's (local) elements from `in_parameter` on, in its row-major order. `shape`
// is the parameter's local shape (ZeRO-3 drops its value between passes).
struct SegmentPart {
  const model::Parameter* parameter = nullptr;
  Shape shape;
  std::int64_t in_segment = 0, in_parameter = 0, count = 0;
};

// A slice of parameters a rank updates: value (the model's storage), gradient, optimizer state
// and, with mixed precision, the float32 master copy the update really applies to; `parts` say
// whose elements it holds (the rest is padding).
struct Segment {
  std::string name;
  Tensor value;
  Tensor grad;
  Tensor master;
  std::vector<Tensor> state;
  std::vector<SegmentPart> parts;
};

// Applies the optimizer to the segments a rank updates, then shares what other ranks need.
class OptimizerStep : public StepPart {
 public:
  OptimizerStep(const model::Optimizer& optimizer, Precision precision);
  // Updates every segment (through its master copy with mixed precision, whose float32
  // gradient is multiplied by `unscale` first: 1 / the loss scale), then finish_update().
  void apply(double unscale = 1);
  // This rank's gradient segments (what mixed precision searches for inf and NaN).
  std::vector<BufferView> gradients() const;
  Precision precision() const { return precision_; }
  // Parameters as the single-device model would hold them (master copies with mixed
  // precision), and the optimizer state, whole. Collective over the ranks that share state.
  virtual ParameterValues gathered(bool master) = 0;
  // The units the formulas count (theory/parallel.hpp): parameter elements, padded, users.
  virtual std::vector<theory::ShardedUnit> units() const = 0;
  std::int64_t padded_parameters() const;
  std::int64_t steps_taken() const { return steps_; }
  // The segments this rank updates, and the optimizer (the training state saves them).
  const std::vector<Segment>& segments() const { return segments_; }
  const model::Optimizer& optimizer() const { return optimizer_; }
  // Takes up a saved step count (the next update is step `steps` + 1 of the bias correction).
  void restore_steps(std::int64_t steps);

 protected:
  // Makes state (zeros) and, with mixed precision, the master copy for a segment.
  void add_segment(std::string name, Tensor value, Tensor grad, std::vector<SegmentPart> parts);
  // After every segment is updated: share parameters (sharded steps), or nothing.
  virtual void finish_update() {}
  const model::Optimizer& optimizer_;
  Precision precision_;
  std::vector<Segment> segments_;

 private:
  std::int64_t steps_ = 0;
};

// What a schedule sees of one step, and no more: the model, the step's index, this rank's
// micro-batches, each one's batch and pass context, and the call that tells the gradient
// synchronisations a micro-batch's backward starts. The Trainer makes one per step from
// step()'s arguments; it refers to the batch source and the synchronisations, and lives as
// long as that step.
class StepContext {
 public:
  StepContext(model::Model& model, std::uint64_t step, std::vector<MicroBatch> micro_batches, const BatchSource& batches,
              std::int64_t global_rows, double loss_scale, std::vector<GradientSync*> syncs);
  model::Model& model() const { return model_; }
  std::uint64_t step() const { return step_; }
  const std::vector<MicroBatch>& micro_batches() const { return micro_batches_; }
  // The micro-batch's rows, made on the host and moved to the model's memory space, their
  // normalizer divided by the loss scale (so the loss comes out times S, exactly: S is a power
  // of two).
  model::Batch batch(const MicroBatch& micro_batch) const;
  // The context of the micro-batch's passes (step, index, first row, global rows, loss scale).
  model::PassContext pass_context(const MicroBatch& micro_batch) const;
  // Tells the gradient synchronisations, in order, that the micro-batch's backward starts.
  void begin_backward(const MicroBatch& micro_batch) const;

 private:
  model::Model& model_;
  std::uint64_t step_;
  std::vector<MicroBatch> micro_batches_;
  const BatchSource& batches_;
  std::int64_t global_rows_;
  double loss_scale_;
  std::vector<GradientSync*> syncs_;
};

// The order of forward and backward over a rank's micro-batches.
class Schedule : public StepPart {
 public:
  // Runs forward, loss and backward of every micro-batch of the step; returns this rank's loss
  // (a sum of the micro-batches' losses, each normalised by the global batch and scaled).
  virtual double run(const StepContext& step) = 0;
};

// Forward then backward of each micro-batch in turn, gradients accumulating (no pipeline).
class SequentialSchedule : public Schedule {
 public:
  std::string describe() const override { return "sequential micro-batches"; }
  double run(const StepContext& step) override;
};

// Every parameter updated whole on every rank (data parallelism without sharding, tensor
// parallelism's own shards).
class ReplicatedOptimizer : public OptimizerStep {
 public:
  ReplicatedOptimizer(model::Model& model, const model::Optimizer& optimizer, Precision precision);
  std::string describe() const override { return "replicated optimizer step"; }
  ParameterValues gathered(bool master) override;
  std::vector<theory::ShardedUnit> units() const override;

 private:
  std::int64_t parameters_ = 0;
};

// A blocking all-reduce (sum) of the gradients of chosen parameters on a communicator after
// the last backward: parameters replicated over a group whose ranks each computed part of
// their gradient (sequence-parallel LayerNorms over the tensor-parallel group, experts over
// the dp ranks that hold them).
class AllReduceSync : public GradientSync {
 public:
  AllReduceSync(std::string what, Communicator& group, std::vector<model::Parameter*> parameters,
                std::string algorithm = "ring");
  std::string describe() const override;
  std::vector<Communicator*> communicators() override { return {&group_}; }
  void finish() override;
  const std::vector<model::Parameter*>& parameters() const { return parameters_; }

 protected:
  Communicator& group() const { return group_; }
  const AlgorithmDescriptor& algorithm() const { return *algorithm_; }

 private:
  std::string what_;
  Communicator& group_;
  std::vector<model::Parameter*> parameters_;
  const AlgorithmDescriptor* algorithm_;
};

struct StepParts {
  std::unique_ptr<Schedule> schedule;
  std::vector<std::unique_ptr<GradientSync>> syncs;  // run in this order
  std::unique_ptr<OptimizerStep> optimizer;
};

}  // namespace parity::parallel
