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

namespace parity::cli {

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
  record::Table table{"tensor and sequence parallelism against the tp size: step time, communication, bytes, memory, beside the formulas"};
  std::size_t mismatches = 0;  // rows whose bytes, activation or parameter counts differ from the formulas
  PointToPoint p2p;
};
TensorBenchOutcome run_tensor_bench(Session& session, const TensorBenchPlan& plan, const TensorBenchOptions& options,
                                    const PointToPoint& p2p);
void record_tensor_bench(Session& session, const TensorBenchOutcome& outcome, const TensorBenchOptions& options);

}  // namespace parity::cli
