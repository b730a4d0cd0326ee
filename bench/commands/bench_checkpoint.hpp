// parity bench checkpoint: activation checkpointing policies against the run without recompute.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/cli/session.hpp"
#include "bench/commands/command.hpp"
#include "reference/model/model.hpp"
#include "reference/parallel/checkpoint/checkpoint.hpp"
#include "reference/record/table.hpp"

namespace parity::cli {

// The result groups it writes (docs/results-schema.md).
inline const record::TableSpec kCheckpointBenchTable{"/bench/checkpoint",
    "activation checkpointing policies against the run without recompute: activation bytes stored "
    "and at the peak beside the formulas, recompute FLOPs, step time ratio measured in the same run",
    {{"policy", ColumnType::string}, {"kind", ColumnType::string}, {"every_k", ColumnType::int64},
     {"budget_bytes", ColumnType::int64, "B"}, {"layout", ColumnType::string},
     {"recomputed_blocks", ColumnType::int64}, {"segments", ColumnType::int64}, {"selective", ColumnType::int64},
     {"layers", ColumnType::int64}, {"batch", ColumnType::int64}, {"sequence", ColumnType::int64},
     {"hidden", ColumnType::int64}, {"heads", ColumnType::int64}, {"dtype", ColumnType::string},
     {"stored_bytes", ColumnType::int64, "B"}, {"formula_stored_bytes", ColumnType::int64, "B"},
     {"peak_bytes", ColumnType::int64, "B"}, {"formula_peak_bytes", ColumnType::int64, "B"},
     {"step_flops", ColumnType::int64, "FLOP"}, {"baseline_step_flops", ColumnType::int64, "FLOP"},
     {"recompute_flops", ColumnType::int64, "FLOP"}, {"formula_recompute_flops", ColumnType::int64, "FLOP"},
     {"recomputed_forwards", ColumnType::int64}, {"step_time_s", ColumnType::float64, "s"},
     {"baseline_step_time_s", ColumnType::float64, "s"}, {"time_ratio", ColumnType::float64},
     {"time_ratio_rank_min", ColumnType::float64}, {"time_ratio_rank_max", ColumnType::float64},
     {"timed_pairs", ColumnType::int64}, {"ranks", ColumnType::int64}, {"losses_equal", ColumnType::int64},
     {"matches_formula", ColumnType::int64},
     // Added with the calibrated step model (older files lack them; NaN in 16-bit runs).
     {"predicted_step_time_s", ColumnType::float64, "s", false}, {"predicted_time_ratio", ColumnType::float64, "", false},
     {"predicted_over_measured", ColumnType::float64, "", false}}};

struct CheckpointBenchOptions {
  std::string model = "tiny";  // a GPT preset
  int layers = 8;              // transformer blocks; 0: the preset's
  std::string policies;        // comma-separated; empty: none, full, every k for k = 2..L, sqrt, selective, 3 budgets
  std::int64_t batch = 4;      // sequences per step
  double dropout = 0.1;        // so that recompute must replay the masks
  int steps = 5;               // timed pairs of steps (the policy's and the baseline's)
  int warmup = 1;
  std::string dtype = "float32";
};
struct CheckpointBenchPlan {
  std::string model;
  model::GptConfig config;
  std::int64_t batch = 4;
  std::vector<parallel::CheckpointPolicy> policies;  // none (the baseline) first
};
// Checks every option and every policy against the model (UsageError naming the bad one:
// k outside 1..L, a budget below one block's working set or below full recompute's peak).
CheckpointBenchPlan plan_checkpoint_bench(const CheckpointBenchOptions& options);
std::size_t checkpoint_bench_bytes_per_rank(const CheckpointBenchPlan& plan);
struct CheckpointBenchOutcome {
  record::Table table{kCheckpointBenchTable};
  std::size_t mismatches = 0;  // policies whose losses differ from no recompute, or bytes or FLOPs from the formulas
};
// In float32 and float64 each policy's step is also predicted from the job's calibration
// (theory/calibration.hpp): the step without recompute, plus one block's forward per recomputed
// block, plus the attention core's forward per selective block.
CheckpointBenchOutcome run_checkpoint_bench(Job& job, const CheckpointBenchPlan& plan, const CheckpointBenchOptions& options);
void record_checkpoint_bench(Session& session, const CheckpointBenchOutcome& outcome, const CheckpointBenchPlan& plan,
                             const CheckpointBenchOptions& options);

}  // namespace parity::cli
