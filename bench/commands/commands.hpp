// The subcommands. Each measuring step returns tables so that `parity run` can put the
// conformance suite and the benchmarks into one result file.
#pragma once

#include <string>
#include <vector>

#include "bench/cli/session.hpp"
#include "bench/cli/sizes.hpp"
#include "reference/model/model.hpp"
#include "reference/record/results_file.hpp"
#include "reference/theory/collectives.hpp"

namespace parity::cli {

// ---- parity check ----
struct CheckOptions {
  std::string filter = "*";
  bool include_large = true;
  bool list_only = false;
};
struct CheckOutcome {
  record::Table cases{"conformance cases of the collectives (docs/results-schema.md)"};
  std::size_t failed = 0;
};
CheckOutcome run_check(Session& session, const CheckOptions& options);
// Case names matching the filter at a world size (for --list and for validation).
std::vector<std::string> check_case_names(int world_size, const CheckOptions& options);

// ---- parity bench collectives ----
struct BenchOptions {
  SizeSweep sweep;
  std::string min_bytes = "8", max_bytes = "64M", step_bytes = "1M";
  int iterations = 20;
  int warmup = 5;
  int check_iterations = 1;
  std::string datatypes = "float32";
  std::string ops = "sum";
  int root = 0;
  int average = 1;  // nccl-tests -a: 0 rank 0, 1 mean over ranks, 2 min, 3 max
  std::string collectives = "all_reduce";
  std::string algorithms = "all";
};
struct BenchPlanEntry {
  Collective collective;
  std::vector<const AlgorithmDescriptor*> algorithms;  // native first
};
struct BenchPlan {
  std::vector<BenchPlanEntry> entries;
  std::vector<DataType> datatypes;
  std::vector<ReduceOp> ops;
  std::vector<std::size_t> sizes;
};
// Parses and checks every option; throws UsageError for bad names, sizes or counts.
BenchPlan plan_bench(BenchOptions& options);
// Largest bytes one rank allocates for the plan at world size n.
std::size_t bench_bytes_per_rank(const BenchPlan& plan, int n);

struct HostCopy {
  record::Table table{"host memcpy bandwidth, first rank of each host alone"};
  double best_GBps = 0;
};
HostCopy measure_host_copy(Session& session);

struct PointToPoint {
  record::Table table{"ping-pong between rank 0 and rank 1: half round-trip time"};
  theory::AlphaBeta model;
  bool measured = false;
};
PointToPoint measure_point_to_point(Session& session, std::size_t max_bytes);

struct BenchOutcome {
  record::Table rows{"collective benchmark, nccl-tests conventions (docs/busbw.md)"};
  record::Table rank_times{"each rank's mean time per row of /bench/collectives"};
};
BenchOutcome run_bench(Session& session, const BenchPlan& plan, const BenchOptions& options,
                       const PointToPoint& p2p, double copy_GBps);

// Writes everything a bench run measured into the result file (rank 0).
void record_bench(Session& session, const HostCopy& copy, const PointToPoint& p2p, const BenchOutcome& bench,
                  const BenchOptions& options);

// ---- parity bench model ----
struct ModelBenchOptions {
  std::string models = "tiny,small";
  std::int64_t batch = 8;
  int steps = 5;
  int warmup = 1;
  std::string dtype = "float32";
  std::string optimizer = "adamw";
};
struct ModelPreset {
  std::string name;
  model::GptConfig config;
};
const std::vector<ModelPreset>& model_presets();
struct ModelBenchPlan {
  std::vector<ModelPreset> models;
  std::int64_t batch = 8;
  DataType dtype = DataType::float32;
};
// Checks every option; throws UsageError naming the bad one.
ModelBenchPlan plan_model_bench(const ModelBenchOptions& options);
// Largest bytes one rank needs for the plan (parameters, gradients, state, activations).
std::size_t model_bench_bytes_per_rank(const ModelBenchPlan& plan);
struct ModelBenchOutcome {
  record::Table table{"training step of GPT models on every rank: tokens/s and MFU (docs/model-accounting.md)"};
};
ModelBenchOutcome run_model_bench(Session& session, const ModelBenchPlan& plan, const ModelBenchOptions& options);
void record_model_bench(Session& session, const ModelBenchOutcome& outcome, const ModelBenchOptions& options);

}  // namespace parity::cli
