// parity bench pipeline: pipeline schedules on real ranks against m and p, beside the simulator
// and the closed forms.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "bench/cli/session.hpp"
#include "bench/commands/point_to_point.hpp"
#include "reference/model/model.hpp"
#include "reference/record/table.hpp"
#include "reference/theory/calibration.hpp"

namespace parity::cli {

// The result groups it writes (docs/results-schema.md).
inline const record::TableSpec kPipelineBenchTable{"/bench/pipeline",
    "pipeline schedules on real ranks against m and p: step time, measured bubble beside the "
    "simulator fed with the measured action costs and the closed form, activation bytes beside the "
    "in-flight formula",
    {{"schedule", ColumnType::string}, {"model", ColumnType::string}, {"config", ColumnType::string},
     {"stages", ColumnType::int64}, {"chunks", ColumnType::int64}, {"micro_batches", ColumnType::int64},
     {"rows_per_micro_batch", ColumnType::int64}, {"world_size", ColumnType::int64},
     {"step_seconds", ColumnType::float64, "s"}, {"makespan_seconds", ColumnType::float64, "s"},
     {"simulated_makespan_seconds", ColumnType::float64, "s"}, {"measured_bubble", ColumnType::float64},
     {"simulated_bubble", ColumnType::float64}, {"closed_form_bubble", ColumnType::float64},
     {"clock_uncertainty_seconds", ColumnType::float64, "s"}, {"forward_seconds", ColumnType::float64, "s"},
     {"backward_seconds", ColumnType::float64, "s"}, {"input_grad_seconds", ColumnType::float64, "s"},
     {"weight_grad_seconds", ColumnType::float64, "s"}, {"message_seconds", ColumnType::float64, "s"},
     {"activation_message_bytes", ColumnType::float64, "B"}, {"peak_activation_bytes", ColumnType::int64, "B"},
     {"formula_activation_bytes", ColumnType::int64, "B"},
     // Added with the calibrated step model (older files lack them).
     {"predicted_makespan_seconds", ColumnType::float64, "s", false},
     {"predicted_over_measured", ColumnType::float64, "", false}}};
inline const record::TableSpec kPipelineRanksTable{"/bench/pipeline_ranks",
    "each pipeline rank of each run of /bench/pipeline: busy and idle time, action costs, clock "
    "offset, activations in flight and their bytes",
    {{"run", ColumnType::int64}, {"rank", ColumnType::int64}, {"stages_held", ColumnType::int64},
     {"in_flight", ColumnType::int64}, {"formula_in_flight", ColumnType::int64},
     {"peak_activation_bytes", ColumnType::int64, "B"}, {"formula_activation_bytes", ColumnType::int64, "B"},
     {"busy_seconds", ColumnType::float64, "s"}, {"idle_seconds", ColumnType::float64, "s"},
     {"measured_bubble", ColumnType::float64}, {"simulated_bubble", ColumnType::float64},
     {"forward_seconds", ColumnType::float64, "s"}, {"backward_seconds", ColumnType::float64, "s"},
     {"input_grad_seconds", ColumnType::float64, "s"}, {"weight_grad_seconds", ColumnType::float64, "s"},
     {"clock_offset_seconds", ColumnType::float64, "s"}, {"clock_uncertainty_seconds", ColumnType::float64, "s"}}};
inline const record::TableSpec kPipelineTimelineTable{"/bench/pipeline_timeline",
    "each run's recorded step: every action and wait per rank on aligned clocks, and the simulated "
    "timeline with the measured costs",
    {{"run", ColumnType::int64}, {"source", ColumnType::string}, {"rank", ColumnType::int64},
     {"stage", ColumnType::int64}, {"work", ColumnType::string}, {"micro_batch", ColumnType::int64},
     {"start_seconds", ColumnType::float64, "s"}, {"end_seconds", ColumnType::float64, "s"}}};

struct PipelineBenchOptions {
  std::string schedules = "gpipe,1f1b,interleaved,zb-h1,zb-h2,zb-v";
  std::string stages;          // p, comma-separated; empty: 2, 4, 8, ... below the world, and the world
  std::string micro_batches;   // m, comma-separated; empty: p, 2p and 4p
  int chunks = 2;              // v of interleaved
  std::string model = "tiny";  // a GPT preset
  int layers = 0;              // transformer blocks; 0: the preset's, at least as many as the most stages
  std::int64_t rows = 1;       // rows (sequences) per micro-batch
  int steps = 3;
  int warmup = 1;
  std::string dtype = "float32";
};
struct PipelineBenchRun {
  std::string schedule;
  int stages = 1, micro_batches = 1;  // p, m
};
struct PipelineBenchPlan {
  std::string model;
  model::GptConfig config;
  std::vector<PipelineBenchRun> runs;
  std::size_t skipped = 0;  // (schedule, p, m) the schedule cannot take (m < p, m not a multiple of p)
};
// Checks every option against the world (UsageError naming the bad one).
PipelineBenchPlan plan_pipeline_bench(const PipelineBenchOptions& options, int world);
std::size_t pipeline_bench_bytes_per_rank(const PipelineBenchPlan& plan, const PipelineBenchOptions& options);
struct PipelineBenchOutcome {
  record::Table runs{kPipelineBenchTable};
  record::Table ranks{kPipelineRanksTable};
  record::Table timeline{kPipelineTimelineTable};
  PointToPoint p2p;
  int cores_per_host = 0, ranks_per_host = 0;  // fewest cores on a host; most ranks on one
  bool oversubscribed = false;                   // some host has more ranks than cores
};
// `calibration` (rank 0's, the model's type) predicts each run's makespan: the same schedule
// simulated with every rank's actions costed from the calibration (theory/calibration.hpp: the
// top-level layers of its stages, balanced as the run balances them) and the ping-pong's messages.
PipelineBenchOutcome run_pipeline_bench(Session& session, const PipelineBenchPlan& plan, const PipelineBenchOptions& options,
                                        const PointToPoint& p2p, const theory::Calibration& calibration);
void record_pipeline_bench(Session& session, const PipelineBenchOutcome& outcome, const PipelineBenchOptions& options);

}  // namespace parity::cli
