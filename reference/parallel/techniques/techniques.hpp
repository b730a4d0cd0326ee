// The techniques: each a typed descriptor (its name, what kind of technique it is, the parts
// its step is made of, and the formulas its measurements are set beside), listed once here.
// Conformance cases, benchmarks and `parity list` find techniques by name in this registry; a
// new technique is a folder in parallel/ and one entry here.
//
// Every technique folder of parallel/ has its entry: the data-parallel techniques (plain, with
// accumulation, ZeRO 1-3), the parameter server, tensor parallelism (with and without sequence
// parallelism), pipeline parallelism, expert parallelism, activation checkpointing and mixed
// precision. The kind says how an entry composes, so that a consumer takes only the kinds it
// can run (the memory benchmark's strategies are the data-parallel kind alone). The last four
// run on top of a data-parallel technique, built by their own folders (pipeline/executor.hpp,
// expert/expert_parallel.hpp, checkpoint/checkpoint.hpp) or set in its configuration (mixed
// precision: DataParallelConfig::precision and loss_scaling, precision/), and their variants
// (schedules, routers, policies, loss scaling) are named there; their entries carry the name,
// the summary and the parts for `parity list`, and no formulas here (theory/pipeline.hpp,
// theory/moe.hpp, theory/checkpoint.hpp hold them).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reference/parallel/data/config.hpp"
#include "reference/parallel/grid.hpp"
#include "reference/parallel/trainer.hpp"
#include "reference/parallel/tensor/regions.hpp"
#include "reference/theory/tensor.hpp"

namespace parity::parallel {

struct Technique {
  enum class Kind {
    data_parallel,             // the step of the data-parallel axis: dp, dp_accumulation, zero1-3
    parameter_server,          // no synchronous step
    tensor_parallel,           // the model split over the tp ranks, composed with a data-parallel technique
    pipeline,                  // the model's layers in stages over the pp ranks, composed likewise
    expert_parallel,           // the experts over the ep ranks, composed with plain data parallelism
    activation_checkpointing,  // what backward recomputes, under any of the above
    mixed_precision,           // 16-bit passes and float32 updates, under any of the above
  };
  std::string name;            // "zero2": case names, --strategies
  Kind kind = Kind::data_parallel;
  std::string summary;         // one line, for parity list
  // The parts of its step, in words (the objects come from make_data_parallel_parts or the
  // technique's own builder; "the composed technique's": the data-parallel one it runs on).
  std::string schedule, gradient_sync, optimizer_step;
  int zero_stage = 0;          // state sharded over the data-parallel ranks: 0 none .. 3 parameters too
  int micro_batches = 1;       // gradient accumulation in the technique's conformance cases
  // The two kinds the cases and benchmarks test by name: kind == parameter_server and kind ==
  // tensor_parallel.
  bool asynchronous = false;   // no synchronous step (the parameter server)
  bool tensor_parallel = false;     // the model split over the grid's tp ranks (composed with a data-parallel technique)
  bool sequence_parallel = false;
  // Bytes one rank sends per optimizer step: the units its optimizer step reports, `ranks`
  // data-parallel ranks, `element_bytes` per gradient element, `micro_batches` per step.
  std::function<double(const std::vector<theory::ShardedUnit>& units, int ranks, double element_bytes,
                       int micro_batches)>
      bytes_sent_per_rank;
  // Model-state bytes per rank (theory::zero_model_state_bytes for its stage).
  std::function<theory::ModelStateBytes(std::int64_t parameters, std::int64_t padded, int ranks,
                                        theory::StateBytes bytes)>
      model_state_bytes;
  // Tensor-parallel techniques: bytes a rank of the tp group sends per step for `rows` sequences,
  // and the activation bytes it keeps per transformer layer (theory/tensor.hpp).
  std::function<theory::TensorParallelBytes(const model::GptConfig& config, std::int64_t rows, int t,
                                            double element_bytes, double statistic_bytes)>
      tensor_bytes_per_rank;
  std::function<std::int64_t(const model::GptConfig& config, std::int64_t rows, int t)> activation_bytes_per_layer;
};

const std::vector<Technique>& techniques();
// Throws UsageError naming the known techniques (and, for zeroN, that N is outside 0-3).
const Technique& find_technique(std::string_view name);

// The gradient synchronisation and optimizer step of data parallelism over `group` (the
// data-parallel ranks): DDP buckets and a replicated step for stage 0, ZeRO's shared shards
// for stages 1-3; with the sequential schedule.
StepParts make_data_parallel_parts(Communicator& group, model::Model& model, const model::Optimizer& optimizer,
                                   const DataParallelConfig& config);
// A trainer of a tensor-parallel model (built on `tp`, the grid's tp group) composed with data
// parallelism or ZeRO (config.zero_stage) over the grid's dp group: the tensor-parallel part of
// the step first, then the data-parallel one; the batch split over dp. Refuses (UsageError) a
// configuration that does not fit before any collective.
std::unique_ptr<Trainer> make_tensor_parallel_trainer(Grid& grid, const TensorParallel& tp, model::Model& model,
                                                      const model::Optimizer& optimizer,
                                                      const DataParallelConfig& config);
// A trainer of data parallelism or ZeRO (config.zero_stage) over every rank of `group`;
// refuses (UsageError) a configuration that does not fit before any collective.
std::unique_ptr<Trainer> make_trainer(Communicator& group, model::Model& model, const model::Optimizer& optimizer,
                                      const DataParallelConfig& config);

}  // namespace parity::parallel
