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

namespace parity::cli {

struct ParallelBenchOptions {
  std::string model = "mlp";                    // mlp, or a GPT preset (tiny, small, ...)
  std::string strategies = "dp,zero1,zero2,zero3";
  std::string precisions = "mixed,float32";     // mixed needs the MLP
  std::int64_t batch = 16;       // memory: rows per rank; scaling: the strong-scaling global batch
  std::int64_t weak_batch = 4;   // scaling: rows per rank in weak scaling
  int steps = 3;
  int warmup = 1;
  std::string bucket_sizes = "64K,1M,25M";  // scaling: the overlap measurement's bucket sizes
};
struct ParallelBenchPlan {
  std::vector<const parallel::Technique*> strategies;  // dp and ZeRO stages, from the registry
  std::vector<std::string> precisions;
  std::vector<std::size_t> bucket_sizes;
};
ParallelBenchPlan plan_parallel_bench(const ParallelBenchOptions& options);
std::size_t parallel_bench_bytes_per_rank(const ParallelBenchOptions& options);
// Refuses a strong-scaling batch smaller than the world (every rank needs a row).
void check_scaling_batch(Session& session, const ParallelBenchOptions& options);
struct MemoryBenchOutcome {
  record::Table table{"peak bytes per category per rank for DP and ZeRO stages, beside the model-state formulas"};
  std::size_t mismatches = 0;  // rows whose model-state bytes differ from the formula
};
MemoryBenchOutcome run_memory_bench(Session& session, const ParallelBenchPlan& plan, const ParallelBenchOptions& options);
struct ScalingBenchOutcome {
  record::Table scaling{"strong and weak scaling of a data-parallel training step, Amdahl fit, alpha-beta prediction"};
  record::Table overlap{"gradient buckets: communication exposed with and without overlap with backward"};
  PointToPoint p2p;
};
ScalingBenchOutcome run_scaling_bench(Session& session, const ParallelBenchPlan& plan, const ParallelBenchOptions& options,
                                      const PointToPoint& p2p);
void record_memory_bench(Session& session, const MemoryBenchOutcome& outcome);
void record_scaling_bench(Session& session, const ScalingBenchOutcome& outcome);

}  // namespace parity::cli
