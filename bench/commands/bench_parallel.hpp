// parity bench memory and parity bench scaling: data parallelism and ZeRO on the ranks given,
// at every world size from 1 to the job's, beside the formulas of theory/parallel.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/cli/session.hpp"
#include "bench/commands/point_to_point.hpp"
#include "reference/parallel/techniques/techniques.hpp"
#include "reference/record/table.hpp"
#include "reference/theory/calibration.hpp"

namespace parity::cli {

// The result groups it writes (docs/results-schema.md).
inline const record::TableSpec kMemoryBenchTable{"/bench/memory",
    "peak bytes per category per rank for DP and ZeRO stages, beside the model-state formulas",
    {{"strategy", ColumnType::string}, {"zero_stage", ColumnType::int64}, {"precision", ColumnType::string},
     {"model", ColumnType::string}, {"config", ColumnType::string}, {"world_size", ColumnType::int64},
     {"rank", ColumnType::int64}, {"parameters", ColumnType::int64}, {"padded_parameters", ColumnType::int64},
     {"parameters_bytes", ColumnType::int64, "B"}, {"gradients_bytes", ColumnType::int64, "B"},
     {"optimizer_state_bytes", ColumnType::int64, "B"}, {"activations_bytes", ColumnType::int64, "B"},
     {"communication_bytes", ColumnType::int64, "B"}, {"workspace_bytes", ColumnType::int64, "B"},
     {"model_state_bytes", ColumnType::int64, "B"}, {"formula_parameters_bytes", ColumnType::float64, "B"},
     {"formula_gradients_bytes", ColumnType::float64, "B"},
     {"formula_optimizer_state_bytes", ColumnType::float64, "B"},
     {"formula_model_state_bytes", ColumnType::float64, "B"}, {"paper_model_state_bytes", ColumnType::float64, "B"},
     {"bytes_per_parameter_p", ColumnType::float64, "B"}, {"bytes_per_gradient_g", ColumnType::float64, "B"},
     {"optimizer_bytes_K", ColumnType::float64, "B"}, {"matches_formula", ColumnType::int64},
     {"bytes_sent", ColumnType::int64, "B"}, {"formula_bytes_sent", ColumnType::float64, "B"},
     {"step_seconds", ColumnType::float64, "s"}}};
inline const record::TableSpec kScalingBenchTable{"/bench/scaling",
    "strong and weak scaling of a data-parallel training step, Amdahl fit, alpha-beta prediction",
    {{"mode", ColumnType::string}, {"model", ColumnType::string}, {"config", ColumnType::string},
     {"world_size", ColumnType::int64}, {"global_batch", ColumnType::int64}, {"rank_batch", ColumnType::int64},
     {"step_seconds", ColumnType::float64, "s"}, {"speedup", ColumnType::float64},
     {"efficiency", ColumnType::float64}, {"amdahl_serial_fraction", ColumnType::float64},
     {"amdahl_speedup", ColumnType::float64}, {"exposed_comm_seconds", ColumnType::float64, "s"},
     {"predicted_comm_seconds", ColumnType::float64, "s"}, {"bytes_sent", ColumnType::int64, "B"},
     // Added with the calibrated step model (older files lack them).
     {"predicted_step_seconds", ColumnType::float64, "s", false}, {"predicted_over_measured", ColumnType::float64, "", false}}};
inline const record::TableSpec kOverlapBenchTable{"/bench/overlap",
    "gradient buckets: communication exposed with and without overlap with backward",
    {{"world_size", ColumnType::int64}, {"model", ColumnType::string}, {"bucket_bytes", ColumnType::int64, "B"},
     {"buckets", ColumnType::int64}, {"overlap", ColumnType::int64}, {"step_seconds", ColumnType::float64, "s"},
     {"compute_seconds", ColumnType::float64, "s"}, {"exposed_comm_seconds", ColumnType::float64, "s"},
     {"stream_seconds", ColumnType::float64, "s"}, {"comm_seconds_alone", ColumnType::float64, "s"},
     {"hidden_fraction", ColumnType::float64}}};

struct ParallelBenchOptions {
  std::string model = "mlp";                    // mlp, or a GPT preset (tiny, small, ...)
  std::string strategies = "dp,zero1,zero2,zero3";
  std::string precisions = "mixed,float32";     // mixed needs the MLP
  std::int64_t batch = 16;       // memory: rows per rank; scaling: the strong-scaling global batch
  std::int64_t weak_batch = 4;   // scaling: rows per rank in weak scaling
  int steps = 3;
  int warmup = 1;
  std::string bucket_sizes = "64K,1M,25M";  // scaling: the overlap measurement's bucket sizes
  std::string path = "reference";  // scaling: reference (float32, the conformance ops) or fast (a GPT on GPUs)
  std::string dtype;               // scaling --path fast: bfloat16 (the default) or float16
};
struct ParallelBenchPlan {
  std::vector<const parallel::Technique*> strategies;  // dp and ZeRO stages, from the registry
  std::vector<std::string> precisions;
  std::vector<std::size_t> bucket_sizes;
  bool fast = false;                 // bench scaling --path fast
  DataType dtype = DataType::bfloat16;  // its storage type
};
ParallelBenchPlan plan_parallel_bench(const ParallelBenchOptions& options);
std::size_t parallel_bench_bytes_per_rank(const ParallelBenchOptions& options);
// Refuses a strong-scaling batch smaller than the world (every rank needs a row).
void check_scaling_batch(Session& session, const ParallelBenchOptions& options);
struct MemoryBenchOutcome {
  record::Table table{kMemoryBenchTable};
  std::size_t mismatches = 0;  // rows whose model-state bytes differ from the formula
};
MemoryBenchOutcome run_memory_bench(Session& session, const ParallelBenchPlan& plan, const ParallelBenchOptions& options);
struct ScalingBenchOutcome {
  record::Table scaling{kScalingBenchTable};
  record::Table overlap{kOverlapBenchTable};
  PointToPoint p2p;
};
// `calibration` (float32, this rank's) predicts each world size's step: the largest rank's
// batch shard op by op, and the bucketed all-reduces on the ping-pong's link overlapped with
// backward (theory/calibration.hpp).
ScalingBenchOutcome run_scaling_bench(Session& session, const ParallelBenchPlan& plan, const ParallelBenchOptions& options,
                                      const PointToPoint& p2p, const theory::Calibration& calibration);
// --path fast: the same modes with the fast GPT step (fast_data_parallel.hpp) on the ranks'
// GPUs, each rank stepping on its own sequences (strong scaling: --batch / N each, at the world
// sizes N that divide --batch; weak: --weak-batch each), and /bench/overlap at the full world
// with the gradients' sums overlapped with backward and not. No calibrated step prediction
// (predicted_step_seconds NaN: the calibration costs the reference ops).
ScalingBenchOutcome run_fast_scaling_bench(Session& session, const ParallelBenchPlan& plan,
                                           const ParallelBenchOptions& options, const PointToPoint& p2p,
                                           const theory::Calibration& calibration);
std::size_t fast_scaling_bench_bytes(const ParallelBenchPlan& plan, const ParallelBenchOptions& options);

// One measured world size of a scaling mode, and the rows of a mode from them (speedup,
// efficiency and, for strong scaling, the Amdahl fit over them; the first point is the one-rank
// baseline).
struct ScalingPoint {
  int world_size = 1;
  std::int64_t global_batch = 0, rank_batch = 0;
  double step_seconds = 0, exposed_comm_seconds = 0, predicted_comm_seconds = 0;
  std::int64_t bytes_sent = 0;
  double predicted_step_seconds = 0;
};
void add_scaling_rows(record::Table& table, const std::string& mode, const std::string& model, const std::string& config,
                      const std::vector<ScalingPoint>& points, bool oversubscribed);
// One row of /bench/overlap: a bucket size with the sums overlapped with backward or not, times
// the slowest rank's; hidden_fraction is derived (1 - exposed / alone on overlapped rows).
struct OverlapPoint {
  int world_size = 1;
  std::int64_t bucket_bytes = 0, buckets = 0;
  bool overlapped = false;
  double step_seconds = 0, compute_seconds = 0, exposed_comm_seconds = 0, stream_seconds = 0, comm_seconds_alone = 0;
};
void add_overlap_row(record::Table& table, const std::string& model, const OverlapPoint& p);
// "[bench scaling] MODE: speedup ... at N ranks" for the rows of a mode from first_row on.
void print_scaling_summary(const record::Table& table, std::size_t first_row);
double max_over(Communicator& world, double x);

void record_memory_bench(Session& session, const MemoryBenchOutcome& outcome);
void record_scaling_bench(Session& session, const ScalingBenchOutcome& outcome);

}  // namespace parity::cli
