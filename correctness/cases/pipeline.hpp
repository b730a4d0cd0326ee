// Conformance cases for pipeline parallelism, written once and run by GoogleTest
// (correctness/test_pipeline.cpp): a GPT split into stages (balanced by parameter count) trains
// for a few optimizer steps with a schedule on every rank of the communicator, and every rank
// compares every step's loss, its stages' first-step gradients (as the optimizer step read them)
// and its parameters and optimizer state after the last step with the same model trained whole
// on one device on the whole batch (dropout on, the tied table's two copies kept equal).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "correctness/cases/family.hpp"
#include "correctness/cases/training.hpp"
#include "reference/comm/communicator.hpp"
#include "reference/parallel/context/context_parallel.hpp"
#include "reference/parallel/grid.hpp"
#include "reference/parallel/pipeline/executor.hpp"
#include "reference/parallel/tensor/tensor_parallel.hpp"
#include "reference/record/table.hpp"

namespace parity::cases {

// The result groups it writes (docs/results-schema.md).
inline const record::TableSpec kPipelineCasesTable = check_table("pipeline",
    "conformance cases of pipeline schedules on real ranks against one device "
    "(docs/results-schema.md)",
    {{"schedule", ColumnType::string}, {"chunks", ColumnType::int64}, {"data_parallel", ColumnType::int64, "", false},
     {"micro_batches", ColumnType::int64}, {"precision", ColumnType::string}, {"device", ColumnType::string},
     {"world_size", ColumnType::int64}, {"steps", ColumnType::int64}, {"error", ColumnType::float64},
     {"bound", ColumnType::float64}, {"gradient_error", ColumnType::float64}, {"gradient_bound", ColumnType::float64},
     {"first_loss", ColumnType::float64}, {"last_loss", ColumnType::float64}});

struct PipelineCase {
  std::string schedule = "1f1b";  // pipeline::schedule_names() the executor runs
  int micro_batches = 2;
  int chunks = 2;                 // per rank, interleaved
  int tensor_parallel = 1;        // each stage split over tp ranks (grid tp x dp x pp, tp fastest)
  int data_parallel = 1;          // replicas of the pipeline
  // Each sequence split over cp ranks (parallel/context; grid tp x cp x dp x pp), the stages'
  // attention by `context_variant`, the gradients summed over dp x cp.
  int context_parallel = 1;
  std::string context_variant = "ring";
  std::string context_fault;  // parallel::ContextParallelConfig::fault
  int zero_stage = 0;             // 0: DDP buckets over the replicas; 1: ZeRO-1 (optimizer state sharded)
  std::string precision = "float64";  // float64, float32, bfloat16, float16 (float32 masters)
  int steps = 3;
  // A schedule given as CSV (pipeline::from_csv) instead of generated: `schedule` is then its
  // name and `micro_batches` its count.
  std::string schedule_csv;
  // Fault injection: this action ("1B2") throws on the rank that holds its stage.
  std::string inject_failure;
  // The model, when not the cases' GPT (pipeline_case_gpt); its dtype is the one trained.
  std::optional<model::GptConfig> model;
  // Rows of each micro-batch; 0: the cases' uneven split of 2m + 1 rows per replica.
  std::int64_t rows_per_micro_batch = 0;
  // Activation checkpointing on each rank's blocks (parallel::parse_checkpoint_policy), its
  // segments within each chunk.
  std::string checkpoint = "none";
  std::string checkpoint_fault;  // parallel::CheckpointPolicy::fault
  // "pipeline/1f1b/m4/float64", "pipeline/1f1b/tp2/dp2/zero1/m4/float64"
  std::string name() const;
};

// Every schedule at p = world size, when it is 1 to 4: gpipe, 1f1b, zb-h1, zb-h2 and zb-v at m
// in {1, p, 2p + 1}, interleaved (2 chunks) at m in {p, 2p}, each in float64 and float32. Then
// the compositions that fit the world: at 4 ranks pp 2 with dp 2 (DDP and ZeRO-1) and with tp 2;
// at 8 ranks pp 2 x tp 2 x dp 2 (DDP and ZeRO-1) and pp 4 x dp 2 with ZeRO-1.
std::vector<PipelineCase> pipeline_grid(int world_size);

// A case set up on this rank, ready to step: the grid, the rank's stages of the model with
// their optimizer, the trainer whose schedule part is the executor. Members in the order they
// are made (and unmade in reverse).
struct PipelineSetup {
  model::GptConfig config;
  std::int64_t global_batch = 0;
  std::unique_ptr<parallel::Grid> grid;
  std::unique_ptr<parallel::TensorParallel> tensor_parallel;
  std::unique_ptr<parallel::ContextParallel> context;  // with context_parallel > 1
  std::unique_ptr<model::Model> model;  // this rank's stages
  std::unique_ptr<model::Optimizer> optimizer;
  std::unique_ptr<Communicator> tied;   // the ranks holding the tied table's two copies
  parallel::pipeline::Executor* executor = nullptr;  // owned by the trainer
  std::unique_ptr<parallel::Trainer> trainer;
  std::vector<std::int64_t> layer_parameters;  // of the whole model's top-level layers
};
// Collective over comm: the grid tp x dp x pp over it, the schedule on each pp group, each
// stage's layers split over its tp group (stages balanced by parameter count), data
// parallelism (DDP buckets or ZeRO-1) over each dp group. Throws UsageError for a case the
// world or the model cannot hold.
std::unique_ptr<PipelineSetup> setup_pipeline_case(Communicator& comm, const PipelineCase& c);
// The case trained against one device (its setup, then c.steps steps).
TrainingResult run_pipeline_case(Communicator& comm, const PipelineCase& c);
// The pipeline family's run and columns over cases chosen elsewhere (`parity pipeline run`).
std::unique_ptr<CaseList> pipeline_cases(std::vector<PipelineCase> chosen);

}  // namespace parity::cases
