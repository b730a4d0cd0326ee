// The subcommands. Each measuring step returns tables so that `parity run` can put the
// conformance suite and the benchmarks into one result file.
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "bench/cli/session.hpp"
#include "bench/cli/sizes.hpp"
#include "correctness/cases/pipeline.hpp"
#include "reference/model/model.hpp"
#include "reference/parallel/checkpoint/checkpoint.hpp"
#include "reference/parallel/pipeline/schedule.hpp"
#include "reference/parallel/techniques/techniques.hpp"
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
  record::Table training{"conformance cases of data parallelism, ZeRO and the parameter server (docs/results-schema.md)"};
  record::Table tensor{"conformance cases of tensor and sequence parallelism composed with DP and ZeRO (docs/results-schema.md)"};
  record::Table pipeline{"conformance cases of pipeline schedules on real ranks against one device (docs/results-schema.md)"};
  record::Table moe{"conformance cases of mixture of experts and expert parallelism against one device (docs/results-schema.md)"};
  record::Table checkpoint{"conformance cases of activation checkpointing against the run without it (docs/results-schema.md)"};
  std::size_t failed = 0;
};
// Runs pipeline cases and adds their rows to outcome.pipeline (each journaled as it ends).
void run_pipeline_cases(Session& session, const std::vector<cases::PipelineCase>& selected, CheckOutcome& outcome);
// /check/collectives and /check/training (when any training case ran), on rank 0.
void write_check_tables(Session& session, const CheckOutcome& outcome);
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
// About how many bytes the result file of `plan` takes (checked against free space first).
std::uint64_t bench_result_bytes(const BenchPlan& plan);

// Refuses (UsageError) a -r/--root outside the world; called before any work, so that a
// refusal leaves no partial file.
void check_bench_root(const BenchOptions& options, int world_size);

struct HostCopy {
  record::Table table{"host memcpy bandwidth, first rank of each host alone"};
  double best_GBps = 0;
  // --device cuda: device-to-device copy against the reduction kernel of the reference
  // algorithms, first rank of each host alone on its GPU.
  record::Table device_kernels{"GPU copy and reduction kernel bandwidth (bytes read + written per second)"};
};
HostCopy measure_host_copy(Session& session);

struct PointToPoint {
  record::Table table{"ping-pong between rank 0 and rank 1: half round-trip time"};
  theory::AlphaBeta model;
  bool measured = false;
};
PointToPoint measure_point_to_point(Session& session, std::size_t max_bytes);
// Writes /bench/point_to_point with its alpha and beta (rank 0; nothing at one rank).
void record_point_to_point(Session& session, const PointToPoint& p2p);

struct BenchOutcome {
  record::Table rows{"collective benchmark, nccl-tests conventions (docs/busbw.md)"};
  record::Table rank_times{"each rank's mean time per row of /bench/collectives"};
  record::Table harness{"the harness's cost per call: a native float32 sum all_reduce on host memory through parity's "
                        "wrapper (checks and watchdog) and as a direct MPI_Allreduce, call by call in alternating order, on "
                        "the world and (own_*) on a one-rank communicator, the wrapper's own cost"};
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
// The preset of that name; throws UsageError listing the known ones.
const ModelPreset& find_model_preset(const std::string& name);
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

// ---- parity bench memory, parity bench scaling ----
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
void record_parallel_bench(Session& session, const MemoryBenchOutcome* memory, const ScalingBenchOutcome* scaling);

// ---- parity bench tensor ----
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

// ---- parity bench pipeline ----
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

// ---- parity bench moe ----
struct MoeBenchOptions {
  std::string model = "tiny";           // a GPT preset
  int experts = 8;
  int top_k = 2;
  double capacity_factor = 1.25;        // of the ep sweep and the router runs
  std::string capacity_factors = "0.5,1,1.25,2,inf";  // the dropped-fraction sweep (top_k router)
  std::string routers = "top_k,expert_choice,aux_free";
  std::string ep_sizes;                 // comma-separated; empty: every size dividing the world and E
  int moe_every = 2;                    // an MoE FFN in every k-th block ...
  std::string moe_layers;               // ... or in these blocks
  bool shared_expert = false;
  std::int64_t batch = 8;               // sequences per step (the global batch)
  int steps = 5;
  int warmup = 1;
  std::string dtype = "float32";
  std::string all_to_all = "native";
};
struct MoeBenchRun {
  int ep = 1;
  std::string router;
  double capacity_factor = 1;
  // Which measurement the run serves (one run may serve several): time against ep, load
  // imbalance per router, dropped fraction against cf.
  bool ep_sweep = false, router_sweep = false, cf_sweep = false;
};
struct MoeBenchPlan {
  std::string model;
  model::GptConfig config;  // with the MoE layers; each run sets its router and cf
  std::vector<MoeBenchRun> runs;
};
// Checks the options that do not depend on the world (UsageError naming the bad one).
void check_moe_bench_options(const MoeBenchOptions& options);
// The runs on `world` ranks (each on every rank: ep x dp = world); refuses an ep that does not
// divide the world or the experts, a batch smaller than the world.
MoeBenchPlan plan_moe_bench(const MoeBenchOptions& options, int world);
std::size_t moe_bench_bytes_per_rank(const MoeBenchPlan& plan, const MoeBenchOptions& options, int world);
struct MoeBenchOutcome {
  record::Table runs{"mixture of experts against the expert-parallel size, router and capacity factor: step time split, "
                     "all-to-all bytes beside the formula, load imbalance and dropped tokens"};
  record::Table steps{"each run's MoE layers at every step: load imbalance, dropped and unrouted tokens, balancing and "
                      "z-losses (summed over the data ranks)"};
  record::Table load{"each run's tokens per expert at every step and MoE layer, chosen and admitted (summed over the "
                     "data ranks)"};
  std::size_t mismatches = 0;  // runs whose all-to-all bytes differ from the formula
};
MoeBenchOutcome run_moe_bench(Session& session, const MoeBenchPlan& plan, const MoeBenchOptions& options);
void record_moe_bench(Session& session, const MoeBenchOutcome& outcome, const MoeBenchOptions& options);

// ---- parity bench checkpoint ----
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

// ---- parity bench precision ----
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
  record::Table table{"one GPT trained data-parallel in each precision from the same seed on the same batches: every "
                      "step's loss, the loss scale it ran with, and whether it was skipped (float16's dynamic scaling)"};
  std::size_t failures = 0;  // precisions that skipped a step without needing to, or whose loss is not finite
};
PrecisionBenchOutcome run_precision_bench(Session& session, const PrecisionBenchPlan& plan,
                                          const PrecisionBenchOptions& options);
void record_precision_bench(Session& session, const PrecisionBenchOutcome& outcome, const PrecisionBenchPlan& plan,
                            const PrecisionBenchOptions& options);

// ---- parity pipeline validate|simulate ----
struct PipelineOptions {
  std::string schedule_file;  // a CSV, one row per rank; else a generated schedule:
  std::string name = "1f1b";
  int stages = 4;
  int micro_batches = 8;
  int chunks = 2;  // per rank, interleaved
  std::string write_csv;
  // simulate: seconds per action, and the link (alpha + bytes / bandwidth per message)
  double forward = 1, backward = 2, input_grad = 1, weight_grad = 1;
  double alpha_us = 0, bandwidth_GBps = 1e9, message_bytes = 0;
  bool timeline = false;
  int columns = 96;
  // run: training steps on real ranks against one device, in this precision
  int steps = 3;
  std::string dtype = "float64";
  std::string inject_failure;  // an action ("1B2") that throws instead of running
};
// Throws UsageError for a cost that is negative or not finite, a bandwidth <= 0.
void check_pipeline_options(const PipelineOptions& options);
int pipeline_validate(const PipelineOptions& options);
int pipeline_simulate(const PipelineOptions& options);
// The schedule `pipeline run` trains on `world` ranks: generated for them, or read and required
// to have that many; validated. Throws UsageError naming what is wrong.
parallel::pipeline::Schedule load_pipeline_schedule(const PipelineOptions& options, int world);
// The closed form of a generated schedule's bubble over the ideal (theory/pipeline.hpp), with
// forward, input-gradient and weight-gradient costs f, i, w (ZB-H1); NaN where there is none.
struct PipelineClosedForm {
  double over_ideal = std::numeric_limits<double>::quiet_NaN();
  const char* expression = "";
  const char* holds_for = "";
};
PipelineClosedForm pipeline_closed_form(const parallel::pipeline::Schedule& schedule, int chunks, double f, double i, double w);
// `parity pipeline run`: the options' schedule (generated for every rank of the world, or read)
// trains the conformance cases' GPT for --steps steps against one device; one row of
// /check/pipeline. Returns the exit status.
int pipeline_run(Session& session, const PipelineOptions& options);

}  // namespace parity::cli
