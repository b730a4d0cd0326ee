// A training step in parts, so that a technique replaces one part at a time:
//   - a schedule: the order in which the forward and backward of each micro-batch run (today's
//     schedule runs them one after another, accumulating gradients; a pipeline's schedule is a
//     table of actions);
//   - gradient synchronisations, in order: what makes a rank's gradients those of the global
//     batch (a plain all-reduce, DDP buckets overlapped with backward, ZeRO's reduce-scatter,
//     the tensor-parallel group's sum of sequence-sharded LayerNorm gradients, ...);
//   - an optimizer step: replicated (every rank updates whole parameters) or sharded (a rank
//     updates its shard and the parameters are shared again).
// The Trainer runs them for one optimizer step on one rank's share of the global batch. A
// technique (reference/parallel/techniques/) is a named set of parts with its formulas.
//
// The loss of a rank is its rows' sum divided by the *global* count (Batch::
// normalizer), so its gradient is already weighted by local_rows / global_rows and the
// gradients are summed, not averaged: uneven shards (global batch not divisible by the world)
// give exactly the whole batch's mean. Loss scaling (LossScaling) divides that count by S.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "reference/comm/algorithms.hpp"
#include "reference/comm/stream.hpp"
#include "reference/model/optimizer.hpp"
#include "reference/theory/parallel.hpp"

namespace parity::parallel {

// Rows [first, first + rows) of a batch.
struct RowRange {
  std::int64_t first = 0;
  std::int64_t rows = 0;
};
// Rank `rank`'s rows of a global batch: the first (global mod world) ranks take one row more.
// Throws UsageError when the batch is smaller than the world (a rank would have no rows).
RowRange batch_shard(std::int64_t global_rows, int rank, int world);
// `count` consecutive micro-batches of a shard, sizes differing by at most one. Throws
// UsageError when the shard has fewer rows than micro-batches.
std::vector<RowRange> split_rows(RowRange shard, int count);

// Makes rows [first_row, first_row + rows) of step `step`'s global batch of `global_rows`
// (model::gpt_batch and model::mlp_batch have this form).
using BatchSource = std::function<model::Batch(std::uint64_t step, std::int64_t first_row, std::int64_t rows,
                                               std::int64_t global_rows)>;
// The synthetic task of a model config as a BatchSource.
BatchSource batches_of(const model::GptConfig& config);
BatchSource batches_of(const model::MlpConfig& config);

enum class Precision {
  model,  // parameters, gradients and optimizer state in the model's own type
  mixed,  // 16-bit parameters and gradients; float32 master weights and optimizer state
};
std::string_view name_of(Precision precision);
Precision parse_precision(std::string_view text);  // "model" / "float32" / "float64" -> model, "mixed"

// Loss scaling for 16-bit gradients (Micikevicius et al. 2018): the loss is multiplied by a
// power of two S before backward, so that small gradients keep their digits in float16's range
// instead of flushing to zero, and the optimizer step divides the float32 copy of the
// gradients by S again (exactly, S being a power of two). Dynamic scaling (as PyTorch's
// GradScaler): when the gradients of any rank hold inf or NaN, every rank skips the step and S
// halves; after `growth_interval` clean steps in a row S doubles. Without it, such gradients
// stop training with an error naming the step. Mixed precision always looks for them.
struct LossScaling {
  bool dynamic = false;
  double initial_scale = 65536;  // 2^16
  int growth_interval = 2000;    // clean steps in a row before S doubles
  // Refuses an initial scale that is not a power of two in [2^-24, 2^100] or an interval below
  // 1 (UsageError).
  void validate() const;
  std::string describe() const;
};
// The smallest scale dynamic scaling goes down to: gradients that stay inf or NaN below it hold
// a NaN of their own, not an overflow, and training stops there with an error.
inline constexpr double kSmallestLossScale = 0x1p-24;

// 16-bit gradients travel as 16-bit numbers (2 bytes per element, the paper's count), every
// partial sum rounded to 16 bits as NCCL's bfloat16 reductions do; widening to float32 would
// double the bytes on the wire.
inline constexpr HalfAccumulate kHalfReduction = HalfAccumulate::native;

// How the data-parallel axis runs a step: shared by every technique that has one.
struct DataParallelConfig {
  int zero_stage = 0;               // 0 plain DP (buckets), 1, 2, 3 (zero/zero.hpp)
  std::int64_t global_batch = 8;    // rows per optimizer step, over all data-parallel ranks
  int micro_batches = 1;            // per rank per step (gradient accumulation)
  std::size_t bucket_bytes = 25u << 20;  // stage 0: gradient bytes per all-reduce (DDP's default 25 MiB)
  bool overlap = true;              // start each bucket's collective during backward
  std::string all_reduce = "ring";  // algorithm names (algorithms.hpp); "native" is the backend's
  std::string reduce_scatter = "ring";
  std::string all_gather = "ring";
  Precision precision = Precision::model;
  LossScaling loss_scaling;  // mixed precision only
  // Refuses a stage outside 0-3, a zero bucket size, a batch smaller than the data-parallel
  // world, fewer rows on a rank than micro-batches, unknown algorithms (UsageError).
  void validate(int data_parallel_world) const;
  std::string describe() const;
};
// The configuration, refused before any collective when it or the model does not fit (a
// 16-bit model without mixed precision, mixed precision without float32 optimizer state).
DataParallelConfig checked_config(DataParallelConfig config, int data_parallel_world, const model::Model& model,
                                  const model::Optimizer& optimizer);

// One micro-batch of a rank's step: its index, its rows of the global batch, and whether it
// is the last (after whose backward the gradients are final).
struct MicroBatch {
  int index = 0;
  RowRange rows;
  bool last = false;
};

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

// A slice of parameters a rank updates: value (the model's storage), gradient, optimizer state
// and, with mixed precision, the float32 master copy the update really applies to.
struct Segment {
  std::string name;
  Tensor value;
  Tensor grad;
  Tensor master;
  std::vector<Tensor> state;
};

// Applies the optimizer to the segments a rank updates, then shares what other ranks need.
class OptimizerStep : public StepPart {
 public:
  OptimizerStep(const model::Optimizer& optimizer, Precision precision);
  // Updates every segment (through its master copy with mixed precision, whose float32
  // gradient is multiplied by `unscale` first: 1 / the loss scale), then finish_update().
  void apply(double unscale = 1);
  // Elements of this rank's gradient segments that are inf or NaN.
  std::size_t nonfinite_gradients() const;
  Precision precision() const { return precision_; }
  // Parameters as the single-device model would hold them (master copies with mixed
  // precision), and the optimizer state, whole. Collective over the ranks that share state.
  virtual ParameterValues gathered(bool master) = 0;
  // The units the formulas count (theory/parallel.hpp): parameter elements, padded, users.
  virtual std::vector<theory::ShardedUnit> units() const = 0;
  std::int64_t padded_parameters() const;
  std::int64_t steps_taken() const { return steps_; }

 protected:
  // Makes state (zeros) and, with mixed precision, the master copy for a segment.
  void add_segment(std::string name, Tensor value, Tensor grad);
  // After every segment is updated: share parameters (sharded steps), or nothing.
  virtual void finish_update() {}
  const model::Optimizer& optimizer_;
  Precision precision_;
  std::vector<Segment> segments_;

 private:
  std::int64_t steps_ = 0;
};

// The order of forward and backward over a rank's micro-batches.
class Trainer;
class Schedule : public StepPart {
 public:
  // Runs forward, loss and backward of every micro-batch; returns this rank's loss (a sum of
  // the micro-batches' losses, each normalised by the global batch).
  virtual double run(Trainer& trainer, const std::vector<MicroBatch>& micro_batches, std::uint64_t step) = 0;
};

// Forward then backward of each micro-batch in turn, gradients accumulating (no pipeline).
class SequentialSchedule : public Schedule {
 public:
  std::string describe() const override { return "sequential micro-batches"; }
  double run(Trainer& trainer, const std::vector<MicroBatch>& micro_batches, std::uint64_t step) override;
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
// their gradient (sequence-parallel LayerNorms over the tensor-parallel group).
class AllReduceSync : public GradientSync {
 public:
  AllReduceSync(std::string what, Communicator& group, std::vector<model::Parameter*> parameters,
                std::string algorithm = "ring");
  std::string describe() const override;
  std::vector<Communicator*> communicators() override { return {&group_}; }
  void finish() override;
  const std::vector<model::Parameter*>& parameters() const { return parameters_; }

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
  // The batch of one micro-batch (made on the host, moved to the model's space) and the
  // context of its passes; called by schedules.
  model::Batch batch(const MicroBatch& micro_batch) const;
  model::PassContext context(const MicroBatch& micro_batch) const;
  // Tells the gradient synchronisations a micro-batch's backward starts; called by schedules.
  void begin_backward(const MicroBatch& micro_batch);
  // Loss scaling (mixed precision; validated), and the ranks that agree on skipping a step:
  // every rank that trains the model (with tensor or pipeline parallelism more than the
  // data-parallel group, which is the default).
  void set_loss_scaling(const LossScaling& scaling, Communicator* job = nullptr);
  double loss_scale() const { return scale_; }

 private:
  std::vector<StepPart*> all_parts();
  // With mixed precision, whether every rank's gradients are finite (agreed over the job);
  // throws when they are not and the step cannot be skipped.
  bool gradients_finite(std::uint64_t step);
  model::Model& model_;
  Communicator& data_parallel_;
  std::int64_t global_batch_;
  int micro_batches_;
  StepParts parts_;
  std::vector<std::pair<model::Layer*, model::HookId>> hooks_;
  const BatchSource* batches_ = nullptr;  // during step()
  std::uint64_t step_ = 0;
  LossScaling scaling_;
  Communicator* job_;
  double scale_ = 1;   // the loss scale of the next step
  int clean_steps_ = 0;  // in a row, since the scale last changed
};

}  // namespace parity::parallel
