// parity bench precision: one GPT trained data-parallel in each precision from the same seed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/cli/session.hpp"
#include "reference/model/model.hpp"
#include "reference/parallel/precision/loss_scaler.hpp"
#include "reference/record/table.hpp"

namespace parity::cli {

// The result groups it writes (docs/results-schema.md).
inline const record::TableSpec kPrecisionBenchTable{"/bench/precision",
    "one GPT trained data-parallel in each precision from the same seed on the same batches: every "
    "step's loss, the loss scale it ran with, and whether it was skipped (float16's dynamic scaling)",
    {{"precision", ColumnType::string}, {"step", ColumnType::int64}, {"loss", ColumnType::float64},
     {"loss_scale", ColumnType::float64}, {"skipped", ColumnType::int64}, {"world_size", ColumnType::int64}}};

struct PrecisionBenchOptions {
  std::string model = "tiny";  // a GPT preset
  int layers = 0;              // transformer blocks; 0: the preset's
  std::int64_t batch = 8;      // sequences per step over all ranks
  int steps = 60;
  std::string precisions = "float64,float32,bfloat16,float16";
  double loss_scale = 65536;   // float16's initial loss scale (a power of two)
  int growth_interval = 10;    // clean steps before float16's scale doubles: short, so a run shows growth and halving
};
struct PrecisionBenchPlan {
  std::string model;
  model::GptConfig config;
  std::vector<DataType> precisions;
  parallel::LossScaling scaling;  // float16's
};
// Checks every option (UsageError naming the bad one); the batch against the world is checked
// when the ranks run.
PrecisionBenchPlan plan_precision_bench(const PrecisionBenchOptions& options);
std::size_t precision_bench_bytes_per_rank(const PrecisionBenchPlan& plan, std::int64_t batch);
struct PrecisionBenchOutcome {
  record::Table table{kPrecisionBenchTable};
  std::size_t failures = 0;  // precisions that skipped a step without needing to, or whose loss is not finite
};
PrecisionBenchOutcome run_precision_bench(Session& session, const PrecisionBenchPlan& plan,
                                          const PrecisionBenchOptions& options);
void record_precision_bench(Session& session, const PrecisionBenchOutcome& outcome, const PrecisionBenchPlan& plan,
                            const PrecisionBenchOptions& options);

}  // namespace parity::cli
