// parity bench model: tokens per second and MFU of a GPT training step on every rank.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/cli/session.hpp"
#include "bench/commands/command.hpp"
#include "bench/commands/presets.hpp"
#include "reference/record/table.hpp"

namespace parity::cli {

// The result groups it writes (docs/results-schema.md).
inline const record::TableSpec kModelBenchTable{"/bench/model",
    "training step of GPT models on every rank: tokens/s and MFU (docs/model-accounting.md)",
    {{"model", ColumnType::string}, {"config", ColumnType::string}, {"rank", ColumnType::int64},
     {"host", ColumnType::string}, {"parameters", ColumnType::int64}, {"batch", ColumnType::int64},
     {"sequence", ColumnType::int64}, {"layers", ColumnType::int64}, {"hidden", ColumnType::int64},
     {"step_flops", ColumnType::int64, "FLOP"}, {"megatron_step_flops", ColumnType::float64, "FLOP"},
     {"step_time_s", ColumnType::float64, "s"}, {"tokens_per_s", ColumnType::float64, "1/s"},
     {"achieved_GFLOPs", ColumnType::float64, "GFLOP/s"}, {"matmul_GFLOPs", ColumnType::float64, "GFLOP/s"},
     {"mfu", ColumnType::float64}, {"peak_parameters_bytes", ColumnType::int64, "B"},
     {"peak_gradients_bytes", ColumnType::int64, "B"}, {"peak_optimizer_state_bytes", ColumnType::int64, "B"},
     {"peak_activations_bytes", ColumnType::int64, "B"}, {"peak_communication_bytes", ColumnType::int64, "B"},
     {"peak_workspace_bytes", ColumnType::int64, "B"},
     // Added with the fast path (older files lack them).
     {"path", ColumnType::string, "", false}, {"hardware_step_flops", ColumnType::float64, "FLOP", false},
     {"peak_GFLOPs", ColumnType::float64, "GFLOP/s", false}, {"mfu_of_peak", ColumnType::float64, "", false},
     {"hfu_of_peak", ColumnType::float64, "", false}, {"products_fraction", ColumnType::float64, "", false},
     {"attention_fraction", ColumnType::float64, "", false}, {"other_fraction", ColumnType::float64, "", false},
     {"attention_GFLOPs", ColumnType::float64, "GFLOP/s", false},
     // Added with the calibrated step model (theory/calibration.hpp; older files lack them).
     {"predicted_step_time_s", ColumnType::float64, "s", false}, {"predicted_over_measured", ColumnType::float64, "", false},
     // Added with the fast path's data parallelism (older files lack them).
     {"replicas", ColumnType::int64, "", false}, {"sync_fraction", ColumnType::float64, "", false}}};

struct ModelBenchOptions {
  std::string models = "tiny,small";
  std::int64_t batch = 8;
  int steps = 5;
  int warmup = 1;
  std::string dtype = "float32";
  std::string optimizer = "adamw";
  std::string path = "reference";  // reference (the conformance ops) or fast (reference/fast/, GPUs)
  std::string overlap = "on";      // --path fast on several ranks: gradient sums beside backward (NCCL) or after it
};
struct ModelBenchPlan {
  std::vector<ModelPreset> models;
  std::int64_t batch = 8;
  DataType dtype = DataType::float32;
  bool fast = false;
  bool overlap = true;
};
// Checks every option; throws UsageError naming the bad one.
ModelBenchPlan plan_model_bench(const ModelBenchOptions& options);
// Largest bytes one rank needs for the plan (parameters, gradients, state, activations).
std::size_t model_bench_bytes_per_rank(const ModelBenchPlan& plan);
struct ModelBenchOutcome {
  record::Table table{kModelBenchTable};
};
// Each rank's step is also predicted from the job's calibration in the model's type
// (Job::calibration, theory::reference_gpt_step), beside the measured one.
ModelBenchOutcome run_model_bench(Job& job, const ModelBenchPlan& plan, const ModelBenchOptions& options);
// One rank's row of /bench/model; add_model_row derives tokens/s, achieved GFLOP/s, MFU (over
// matmul_GFLOPs) and MFU and HFU over peak_GFLOPs (NaN where that is).
struct ModelRow {
  std::string model, config, host, path;
  int rank = 0;
  std::int64_t parameters = 0, batch = 0, sequence = 0, layers = 0, hidden = 0, step_flops = 0;
  double megatron_step_flops = 0, hardware_step_flops = 0, step_time_s = 0, matmul_GFLOPs = 0;
  std::vector<std::int64_t> peak_bytes;  // per memory category, in kAllMemoryCategories' order
  double peak_GFLOPs = std::nan(""), products_fraction = std::nan(""), attention_fraction = std::nan(""),
         other_fraction = std::nan(""), attention_GFLOPs = std::nan("");
  // The calibrated prediction, and predicted / measured (NaN where not predicted, or where ranks
  // outnumber cores and the measured time includes waiting for one).
  double predicted_step_time_s = std::nan(""), predicted_over_measured = std::nan("");
  // Data parallelism (fast rows): the replicas whose gradients each step sums, and the share of the
  // profiled step spent waiting for that sum (NaN without one).
  std::int64_t replicas = 1;
  double sync_fraction = std::nan("");
};
void add_model_row(record::Table& table, const ModelRow& row);
// The fields of a row that only the model, the batch and the rank decide (model, config, host,
// rank, sizes, parameters, Megatron's FLOPs).
ModelRow model_row(Session& session, const ModelPreset& preset, std::int64_t batch, int rank);

// --path fast: the same rows from the fast GPT step (reference/fast/gpt.hpp) on the rank's GPU.
ModelBenchOutcome run_fast_model_bench(Session& session, const ModelBenchPlan& plan, const ModelBenchOptions& options);
std::size_t fast_model_bench_bytes(const ModelBenchPlan& plan);
void record_model_bench(Session& session, const ModelBenchOutcome& outcome, const ModelBenchOptions& options);

}  // namespace parity::cli
