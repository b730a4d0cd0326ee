// parity bench checkpoint: activation checkpointing policies against the run without recompute.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/cli/session.hpp"
#include "reference/model/model.hpp"
#include "reference/parallel/checkpoint/checkpoint.hpp"
#include "reference/record/table.hpp"

namespace parity::cli {

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
  record::Table table{"activation checkpointing policies against the run without recompute: activation bytes stored and "
                      "at the peak beside the formulas, recompute FLOPs, step time ratio measured in the same run"};
  std::size_t mismatches = 0;  // policies whose losses differ from no recompute, or bytes or FLOPs from the formulas
};
CheckpointBenchOutcome run_checkpoint_bench(Session& session, const CheckpointBenchPlan& plan,
                                            const CheckpointBenchOptions& options);
void record_checkpoint_bench(Session& session, const CheckpointBenchOutcome& outcome, const CheckpointBenchPlan& plan,
                             const CheckpointBenchOptions& options);

}  // namespace parity::cli
