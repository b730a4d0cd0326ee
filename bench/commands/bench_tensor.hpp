// parity bench tensor: tensor parallelism (Megatron) with and without sequence parallelism
// against the tensor-parallel size, beside the formulas.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/cli/session.hpp"
#include "bench/commands/point_to_point.hpp"
#include "reference/model/model.hpp"
#include "reference/record/table.hpp"
#include "reference/theory/calibration.hpp"

namespace parity::cli {

// The result groups it writes (docs/results-schema.md).
inline const record::TableSpec kTensorBenchTable{"/bench/tensor",
    "tensor and sequence parallelism against the tp size: step time, communication, bytes, memory, "
    "beside the formulas",
    {{"model", ColumnType::string}, {"config", ColumnType::string}, {"tp", ColumnType::int64},
     {"dp", ColumnType::int64}, {"sequence_parallel", ColumnType::int64}, {"world_size", ColumnType::int64},
     {"batch", ColumnType::int64}, {"rank_batch", ColumnType::int64}, {"step_seconds", ColumnType::float64, "s"},
     {"tokens_per_second", ColumnType::float64, "1/s"}, {"tp_comm_seconds", ColumnType::float64, "s"},
     {"compute_seconds", ColumnType::float64, "s"}, {"comm_share", ColumnType::float64},
     {"predicted_comm_seconds", ColumnType::float64, "s"}, {"bytes_embedding", ColumnType::float64, "B"},
     {"bytes_block", ColumnType::float64, "B"}, {"bytes_head", ColumnType::float64, "B"},
     {"bytes_loss", ColumnType::float64, "B"}, {"bytes_total", ColumnType::float64, "B"},
     {"formula_bytes_embedding", ColumnType::float64, "B"}, {"formula_bytes_block", ColumnType::float64, "B"},
     {"formula_bytes_head", ColumnType::float64, "B"}, {"formula_bytes_loss", ColumnType::float64, "B"},
     {"formula_bytes_total", ColumnType::float64, "B"}, {"bytes_match", ColumnType::int64},
     {"activation_bytes_per_block", ColumnType::int64, "B"},
     {"formula_activation_bytes_per_block", ColumnType::int64, "B"},
     {"korthikanti_activation_bytes_per_block", ColumnType::float64, "B"},
     {"parameters_per_rank", ColumnType::int64}, {"formula_parameters_per_rank", ColumnType::int64},
     {"optimizer_state_bytes", ColumnType::int64, "B"}, {"formula_optimizer_state_bytes", ColumnType::int64, "B"},
     {"memory_match", ColumnType::int64},
     // Added with the calibrated step model (older files lack them).
     {"predicted_step_seconds", ColumnType::float64, "s", false}, {"predicted_over_measured", ColumnType::float64, "", false}}};

struct TensorBenchOptions {
  std::string model = "tiny";      // a GPT preset
  std::string sizes;               // tensor-parallel sizes, comma-separated; empty: every one that fits
  std::string sequence_parallel = "off,on";
  std::string grid;                // "tp=2,dp=2": one grid over every rank instead of the sweep
  std::int64_t batch = 4;          // sequences per step (the global batch)
  int steps = 3;
  int warmup = 1;
  std::string dtype = "float32";
};
struct TensorBenchRun {
  int tp = 1, dp = 1;
  bool sequence_parallel = false;
};
struct TensorBenchPlan {
  model::GptConfig config;
  std::string model;
  std::vector<TensorBenchRun> runs;
};
// Checks the options that do not depend on the world (UsageError naming the bad one).
void check_tensor_bench_options(const TensorBenchOptions& options);
// The runs at this world size: the sweep (each size on the first t ranks, dp 1) or the grid;
// refuses sizes that do not divide the model or exceed the world, a grid that is not the world,
// sequence parallelism without tensor parallelism (UsageError).
TensorBenchPlan plan_tensor_bench(const TensorBenchOptions& options, int world);
std::size_t tensor_bench_bytes_per_rank(const TensorBenchPlan& plan, std::int64_t batch);
struct TensorBenchOutcome {
  record::Table table{kTensorBenchTable};
  std::size_t mismatches = 0;  // rows whose bytes, activation or parameter counts differ from the formulas
  PointToPoint p2p;
};
// `calibration` (rank 0's, the model's type) predicts each run's step: a rank's share op by op
// (theory/calibration.hpp), its tensor-parallel collectives on the ping-pong's link
// (theory/tensor.hpp), and with dp > 1 the gradients' ring all-reduce.
TensorBenchOutcome run_tensor_bench(Session& session, const TensorBenchPlan& plan, const TensorBenchOptions& options,
                                    const PointToPoint& p2p, const theory::Calibration& calibration);
void record_tensor_bench(Session& session, const TensorBenchOutcome& outcome, const TensorBenchOptions& options);

}  // namespace parity::cli
