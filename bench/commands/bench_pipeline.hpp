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

namespace parity::cli {

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
  record::Table runs{"pipeline schedules on real ranks against m and p: step time, measured bubble beside the simulator "
                     "fed with the measured action costs and the closed form, activation bytes beside the in-flight formula"};
  record::Table ranks{"each pipeline rank of each run of /bench/pipeline: busy and idle time, action costs, clock offset, "
                      "activations in flight and their bytes"};
  record::Table timeline{"each run's recorded step: every action and wait per rank on aligned clocks, and the simulated "
                         "timeline with the measured costs"};
  PointToPoint p2p;
  int cores_per_host = 0, ranks_per_host = 0;  // fewest cores on a host; most ranks on one
  bool oversubscribed = false;                   // some host has more ranks than cores
};
PipelineBenchOutcome run_pipeline_bench(Session& session, const PipelineBenchPlan& plan, const PipelineBenchOptions& options,
                                        const PointToPoint& p2p);
void record_pipeline_bench(Session& session, const PipelineBenchOutcome& outcome, const PipelineBenchOptions& options);

}  // namespace parity::cli
