// Synchronous data parallelism: every rank holds the model, takes its rows of the global
// batch, and the gradients are combined so that one optimizer step equals the single-device
// step on the whole batch. Gradient accumulation splits a rank's rows into micro-batches.
//
// This file holds what every data-parallel trainer shares (batch shards, the step loop, the
// optimizer applied to whatever slice of the state a rank owns, mixed precision) and the
// stage-0 trainer: DDP-style buckets of gradients, each all-reduced on a communication stream
// as soon as the last gradient in it is produced by backward. ZeRO stages 1-3 are in zero.hpp.
//
// Loss scaling: a rank's loss is its rows' sum divided by the *global* count (Batch::
// normalizer), so its gradient is already weighted by local_rows / global_rows and the
// gradients are summed, not averaged: uneven shards (global batch not divisible by the world)
// give exactly the whole batch's mean (REFERENCE.md, data parallelism).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "reference/comm/algorithms.hpp"
#include "reference/comm/stream.hpp"
#include "reference/model/optimizer.hpp"

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

// 16-bit gradients travel as 16-bit numbers (2 bytes per element, the paper's count), every
// partial sum rounded to 16 bits as NCCL's bfloat16 reductions do; widening to float32 would
// double the bytes on the wire.
inline constexpr HalfAccumulate kHalfReduction = HalfAccumulate::native;

struct DataParallelConfig {
  int zero_stage = 0;               // 0 plain DP (buckets), 1, 2, 3 (zero.hpp)
  std::int64_t global_batch = 8;    // rows per optimizer step, over all ranks
  int micro_batches = 1;            // per rank per step (gradient accumulation)
  std::size_t bucket_bytes = 25u << 20;  // stage 0: gradient bytes per all-reduce (DDP's default 25 MiB)
  bool overlap = true;              // start each bucket's collective during backward
  std::string all_reduce = "ring";  // algorithm names (algorithms.hpp); "native" is the backend's
  std::string reduce_scatter = "ring";
  std::string all_gather = "ring";
  Precision precision = Precision::model;
  // Refuses a stage outside 0-3, a zero bucket size, a batch smaller than the world, fewer
  // rows on a rank than micro-batches, unknown algorithms (UsageError, naming the value).
  void validate(int world) const;
  std::string describe() const;
};

struct StepStats {
  double loss = 0;                  // the global batch's loss (same on every rank)
  double seconds = 0;               // the whole step on this rank
  double compute_seconds = 0;       // forward and backward of every micro-batch, communication excluded
  // Time this rank's thread spent on communication instead of computing: waiting for the
  // stream (after backward, for ZeRO-3 gathers, for the parameter all-gather) and running it
  // from the backward hooks. What overlap hides is the rest: transfers that progressed while
  // the rank computed.
  double exposed_comm_seconds = 0;
  double stream_seconds = 0;        // time the communication stream ran (hidden or not)
  std::uint64_t bytes_sent = 0;     // by this rank's point-to-point calls (reference algorithms)
  std::uint64_t messages_sent = 0;
};

// Values of every parameter (and its optimizer state) in model order, as float64: what a
// conformance test compares. Sharded trainers gather them.
struct ParameterValues {
  std::vector<std::string> names;
  std::vector<std::vector<double>> values;
  std::vector<std::vector<std::vector<double>>> state;  // [parameter][state tensor][element]
};

// The shared step loop. A trainer owns a communication stream (its collectives), the
// optimizer's state for the elements this rank updates, and, with mixed precision, their
// float32 master copies.
class DataParallelTrainer {
 public:
  DataParallelTrainer(Communicator& world, model::Model& model, const model::Optimizer& optimizer,
                      DataParallelConfig config);
  virtual ~DataParallelTrainer();
  DataParallelTrainer(const DataParallelTrainer&) = delete;
  DataParallelTrainer& operator=(const DataParallelTrainer&) = delete;

  // One optimizer step on step `step`'s global batch (collective: every rank calls it).
  StepStats step(const BatchSource& batches, std::uint64_t step);
  // Parameters as the single-device model would hold them (master copies with mixed
  // precision), and the optimizer state, whole. Collective.
  virtual ParameterValues gathered(bool master) = 0;

  const DataParallelConfig& config() const { return config_; }
  Communicator& stream_communicator() { return stream_.communicator(); }
  // Parameter elements after padding to a multiple of the world (stage 0: no padding).
  virtual std::int64_t padded_parameters() const = 0;

 protected:
  // A slice of parameters this rank updates: value (the model's storage), gradient, optimizer
  // state and, with mixed precision, the float32 master copy the update really applies to.
  struct Segment {
    std::string name;
    Tensor value;
    Tensor grad;
    Tensor master;
    std::vector<Tensor> state;
  };
  // Makes state (and master) for a segment whose value and grad are set.
  void add_segment(std::string name, Tensor value, Tensor grad);

  // Called in order by step(): before the first micro-batch, before each micro-batch's
  // forward (last = the one after which gradients are final), after backward of the last
  // (finish the gradients), after the optimizer (share the new parameters).
  virtual void begin_step() = 0;
  virtual void begin_micro_batch(bool last) = 0;
  virtual void finish_gradients() = 0;
  virtual void finish_step() = 0;

  static double seconds_since(std::chrono::steady_clock::time_point start);
  // Registers `hook` on every layer of the model's tree.
  void add_hooks(const model::Hook& hook);
  // Runs a collective on the stream; returns at once when overlap is on (progress() later).
  CommStream::Ticket enqueue(std::string what, Collective collective, const std::string& algorithm, BufferView send,
                             BufferView recv);

  Communicator& world_;
  model::Model& model_;
  const model::Optimizer& optimizer_;
  DataParallelConfig config_;  // checked before the stream (a collective split) is made
  CommStream stream_;
  std::vector<Segment> segments_;
  int micro_batch_ = 0;  // index of the micro-batch being run
  bool last_micro_batch_ = false;
  double exposed_ = 0;   // accumulated by the stages while they wait on the stream

 private:
  void apply_optimizer();
  std::int64_t steps_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // hooks outlive the trainer
};

// Stage 0: gradients in buckets of about bucket_bytes, filled in backward order (parameters
// in reverse model order); a bucket's all-reduce is queued the moment its last gradient is
// final (after the backward of every layer that reads the parameter: a tied table waits for
// the embedding's backward), and only after the last micro-batch (earlier micro-batches
// accumulate locally, DDP's no_sync).
class DataParallel : public DataParallelTrainer {
 public:
  DataParallel(Communicator& world, model::Model& model, const model::Optimizer& optimizer, DataParallelConfig config);
  ParameterValues gathered(bool master) override;
  std::int64_t padded_parameters() const override { return parameters_; }
  // Parameters per bucket, in the order the buckets are reduced.
  std::vector<std::vector<std::string>> bucket_parameters() const;

 protected:
  void begin_step() override;
  void begin_micro_batch(bool last) override;
  void finish_gradients() override;
  void finish_step() override {}

 private:
  struct Bucket {
    Tensor grads;  // flat; parameters' gradients are segments of it
    std::vector<model::Parameter*> parameters;
    int pending = 0;
    bool launched = false;
  };
  void parameter_final(model::Parameter* p);
  void launch(Bucket& bucket);
  std::vector<Bucket> buckets_;
  std::map<model::Parameter*, std::size_t> bucket_of_;
  std::map<model::Parameter*, int> users_;  // layers whose backward produces the gradient
  std::map<model::Parameter*, int> pending_;
  std::int64_t parameters_ = 0;
};

// The trainer for config.zero_stage (0: DataParallel, 1-3: Zero).
std::unique_ptr<DataParallelTrainer> make_trainer(Communicator& world, model::Model& model,
                                                  const model::Optimizer& optimizer, const DataParallelConfig& config);

}  // namespace parity::parallel
