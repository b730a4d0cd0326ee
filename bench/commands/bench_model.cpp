// parity bench model: tokens per second and model FLOPs utilisation of a single-device training
// step (forward, backward, optimizer) for a few GPT sizes. Every rank trains its own replica at
// the same time (a health check of every core or device in the job); the denominator of MFU is
// the matrix-multiply rate each rank measures in the same run, in the model's data type.
#include "bench/commands/bench_model.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "bench/cli/progress.hpp"
#include "bench/cli/shared.hpp"
#include "bench/commands/command.hpp"
#include "reference/core/error.hpp"
#include "reference/model/optimizer.hpp"
#include "reference/ops/cpu.hpp"
#include "reference/ops/flops.hpp"
#include "reference/theory/calibration.hpp"
#include "reference/theory/model.hpp"

namespace parity::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The matrix-multiply rate (GFLOP/s) of square n x n products in `space`, best of 5.
double measure_matmul_GFLOPs(DataType dtype, std::int64_t n, MemorySpace space) {
  Tensor a = Tensor::empty("bench.a", {n, n}, dtype, MemoryCategory::workspace);
  Tensor b = Tensor::empty("bench.b", {n, n}, dtype, MemoryCategory::workspace);
  initialize(a, Init::normal(0, 1), 1);
  initialize(b, Init::normal(0, 1), 1);
  a = a.to(space, "bench.a", MemoryCategory::workspace);
  b = b.to(space, "bench.b", MemoryCategory::workspace);
  Tensor c = Tensor::empty("bench.c", {n, n}, dtype, MemoryCategory::workspace, space);
  ops::matmul(a, false, b, false, c, false);  // warm-up
  wait_for_device(space);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    ops::matmul(a, false, b, false, c, false);
    wait_for_device(space);
    best = std::max(best, 2.0 * static_cast<double>(n * n * n) / seconds_since(t0) / 1e9);
  }
  return best;
}

// Square size of the MFU denominator: large enough to reach the unit's rate.
std::int64_t matmul_size(MemorySpace space) { return space == MemorySpace::cuda ? 4096 : 512; }

}  // namespace

ModelBenchPlan plan_model_bench(const ModelBenchOptions& options) {
  ModelBenchPlan plan;
  if (options.batch < 1) throw UsageError("--batch must be at least 1");
  if (options.steps < 1) throw UsageError("--steps must be at least 1");
  if (options.warmup < 0) throw UsageError("--warmup must not be negative");
  if (options.optimizer != "adamw" && options.optimizer != "sgd")
    throw UsageError("--optimizer '" + options.optimizer + "' is not known (adamw, sgd)");
  const DataType dtype = parse_data_type(options.dtype);
  if (options.path != "reference" && options.path != "fast")
    throw UsageError("--path '" + options.path + "' is not known (reference, fast)");
  plan.fast = options.path == "fast";
  if (plan.fast && dtype != DataType::bfloat16 && dtype != DataType::float16)
    throw UsageError("--dtype " + options.dtype + ": --path fast trains in bfloat16 or float16");
  if (plan.fast && options.optimizer != "adamw") throw UsageError("--path fast has AdamW only (--optimizer adamw)");
  if (options.overlap != "on" && options.overlap != "off")
    throw UsageError("--overlap '" + options.overlap + "' is not known (on, off)");
  if (!plan.fast && options.overlap != "on") throw UsageError("--overlap is for --path fast (data parallelism of the fast step)");
  plan.overlap = options.overlap == "on";
  if (!plan.fast && dtype != DataType::float32 && dtype != DataType::float64)
    throw UsageError("--dtype " + options.dtype + ": models train in float32 or float64 (16-bit types: --path fast)");
  for (const std::string& name : split_names(options.models, "--models")) {
    ModelPreset preset;
    try {
      preset = find_model_preset(name);
    } catch (const UsageError& e) {
      throw UsageError(std::string("--models: ") + e.what());
    }
    preset.config.dtype = plan.fast ? DataType::float32 : dtype;  // the fast path's type is its own
    preset.config.validate();
    plan.models.push_back(preset);
  }
  if (plan.models.empty()) throw UsageError("--models names no model");
  plan.batch = options.batch;
  plan.dtype = dtype;
  return plan;
}

ModelRow model_row(Session& session, const ModelPreset& preset, std::int64_t batch, int rank) {
  const model::GptConfig& c = preset.config;
  return {.model = preset.name,
          .config = c.describe(),
          .host = session.hosts()[static_cast<std::size_t>(rank)],
          .rank = rank,
          .parameters = theory::gpt_parameters(c),
          .batch = batch,
          .sequence = c.sequence,
          .layers = c.layers,
          .hidden = c.hidden,
          .megatron_step_flops = theory::megatron_step_flops(c, batch)};
}

void add_model_row(record::Table& table, const ModelRow& row) {
  const double achieved = static_cast<double>(row.step_flops) / row.step_time_s / 1e9;
  table.put({{"model", row.model}, {"config", row.config}, {"rank", row.rank}, {"host", row.host},
             {"parameters", row.parameters}, {"batch", row.batch}, {"sequence", row.sequence}, {"layers", row.layers},
             {"hidden", row.hidden}, {"step_flops", row.step_flops}, {"megatron_step_flops", row.megatron_step_flops},
             {"step_time_s", row.step_time_s},
             {"tokens_per_s", static_cast<double>(row.batch * row.sequence) / row.step_time_s},
             {"achieved_GFLOPs", achieved}, {"matmul_GFLOPs", row.matmul_GFLOPs},
             {"mfu", achieved / row.matmul_GFLOPs}});
  for (MemoryCategory category : kAllMemoryCategories)
    table.i64("peak_" + std::string(name_of(category)) + "_bytes", "B")
        .push_back(row.peak_bytes.at(static_cast<std::size_t>(category)));
  table.put({{"path", row.path}, {"hardware_step_flops", row.hardware_step_flops}, {"peak_GFLOPs", row.peak_GFLOPs},
             {"mfu_of_peak", achieved / row.peak_GFLOPs},
             {"hfu_of_peak", row.hardware_step_flops / row.step_time_s / 1e9 / row.peak_GFLOPs},
             {"products_fraction", row.products_fraction}, {"attention_fraction", row.attention_fraction},
             {"other_fraction", row.other_fraction}, {"attention_GFLOPs", row.attention_GFLOPs},
             {"predicted_step_time_s", row.predicted_step_time_s},
             {"predicted_over_measured", row.predicted_over_measured}, {"replicas", row.replicas},
             {"sync_fraction", row.sync_fraction}});
}

std::size_t model_bench_bytes_per_rank(const ModelBenchPlan& plan) {
  std::size_t most = 0;
  for (const auto& m : plan.models) {
    most = std::max(most, estimated_bytes(gpt_training_bytes(m.config, static_cast<double>(plan.batch))));
  }
  return most;
}

ModelBenchOutcome run_model_bench(Job& job, const ModelBenchPlan& plan, const ModelBenchOptions& options) {
  Session& session = job.session;
  Communicator& world = session.world();
  ModelBenchOutcome out;
  const std::size_t steps_per_model = static_cast<std::size_t>(options.warmup + options.steps);
  Progress progress("bench model", plan.models.size() * steps_per_model, session.is_root() && !session.options().quiet);
  std::size_t done = 0;
  const RowKey by_model = [](const record::Table& t, std::size_t row) { return t.get_str("model")[row]; };
  for (const ModelPreset& preset : plan.models) {
    const model::GptConfig& c = preset.config;
    // --resume: a model whose rows (one per rank) the interrupted run finished is not run again.
    if (session.restore_rows("/bench/model", preset.name, by_model, static_cast<std::size_t>(world.size()), out.table).found) {
      done += steps_per_model;
      progress.update(done - 1, preset.name + " taken from the resumed file");
      continue;
    }
    const std::size_t first_row = out.table.rows();
    const double predicted =
        theory::reference_gpt_step(c, plan.batch, job.calibration(c.dtype), options.optimizer == "adamw").total();
    world.barrier();
    const MemorySpace space = session.space();
    const double matmul_GFLOPs = measure_matmul_GFLOPs(c.dtype, matmul_size(space), space);
    const PeakScope memory(space);  // from before the model exists: parameters count whole
    auto model = model::build_gpt(c);
    model->to(space);
    std::unique_ptr<model::Optimizer> optimizer;
    if (options.optimizer == "sgd")
      optimizer = std::make_unique<model::Sgd>(model::SgdConfig{0.01, 0.9, 0}, c.dtype);
    else
      optimizer = std::make_unique<model::AdamW>(model::AdamWConfig{}, c.dtype);
    std::vector<double> times;
    std::int64_t counted_flops = 0;
    world.barrier();  // replicas start together
    for (int step = 0; step < options.warmup + options.steps; ++step) {
      const model::Batch batch =
          model::gpt_batch(c, static_cast<std::uint64_t>(step), 0, plan.batch, plan.batch).to(space);
      const ops::FlopScope flops;
      wait_for_device(space);
      const auto t0 = Clock::now();
      model::train_step(*model, *optimizer, batch, static_cast<std::uint64_t>(step));
      wait_for_device(space);
      const double t = seconds_since(t0);
      if (step >= options.warmup) times.push_back(t);
      counted_flops = flops.matmul();
      progress.update(done++, preset.name + " step " + std::to_string(step + 1));
    }
    const double step_seconds = percentile(times, 0.5);
    const std::int64_t formula_flops = theory::gpt_step_flops(c, plan.batch);
    if (counted_flops != formula_flops)
      throw Error("bench model " + preset.name + ": the ops counted " + std::to_string(counted_flops) +
                  " matmul FLOPs per step but the formula gives " + std::to_string(formula_flops));
    const auto all_times = gather_from_ranks(world, step_seconds);
    const auto all_matmul = gather_from_ranks(world, matmul_GFLOPs);
    const auto all_predicted = gather_from_ranks(world, predicted);
    std::vector<std::vector<double>> peaks;
    for (MemoryCategory category : kAllMemoryCategories)
      peaks.push_back(gather_from_ranks(world, static_cast<double>(memory.peak_above_start(category))));
    for (int r = 0; r < world.size(); ++r) {
      const auto i = static_cast<std::size_t>(r);
      ModelRow row = model_row(session, preset, plan.batch, r);
      row.path = "reference";
      row.step_flops = formula_flops;
      row.hardware_step_flops = static_cast<double>(formula_flops);
      row.step_time_s = all_times[i];
      row.matmul_GFLOPs = all_matmul[i];
      row.predicted_step_time_s = all_predicted[i];
      if (!session.oversubscribed()) row.predicted_over_measured = all_predicted[i] / all_times[i];
      for (const auto& category_peaks : peaks) row.peak_bytes.push_back(static_cast<std::int64_t>(category_peaks[i]));
      add_model_row(out.table, row);
    }
    session.record_rows("/bench/model", out.table, first_row);  // kept if the run is cut short
    if (session.is_root() && !session.options().quiet) {
      double mean_tokens = 0, mean_mfu = 0, mean_ratio = 0;
      for (int r = 0; r < world.size(); ++r) {
        mean_tokens += static_cast<double>(plan.batch * c.sequence) / all_times[static_cast<std::size_t>(r)];
        mean_mfu += static_cast<double>(formula_flops) / all_times[static_cast<std::size_t>(r)] / 1e9 /
                    all_matmul[static_cast<std::size_t>(r)];
        mean_ratio += all_predicted[static_cast<std::size_t>(r)] / all_times[static_cast<std::size_t>(r)] / world.size();
      }
      std::fprintf(stderr, "[bench model] %-6s %s B=%lld: %.0f tokens/s per rank, MFU %.2f, predicted / measured %.2f%s (mean of %d ranks)\n",
                   preset.name.c_str(), c.describe().c_str(), static_cast<long long>(plan.batch),
                   mean_tokens / world.size(), mean_mfu / world.size(), mean_ratio,
                   session.oversubscribed() ? " (ranks outnumber cores: not compared)" : "", world.size());
    }
  }
  progress.finish();
  return out;
}

void record_model_bench(Session& session, const ModelBenchOutcome& outcome, const ModelBenchOptions& options) {
  if (!session.is_root()) return;
  auto& file = session.results();
  file.write_table(outcome.table);
  file.set_attribute("/bench/model", "optimizer", options.optimizer);
  file.set_attribute("/bench/model", "timed_steps", static_cast<std::int64_t>(options.steps));
  file.set_attribute("/bench/model", "warmup_steps", static_cast<std::int64_t>(options.warmup));
  if (options.path == "fast") {
    file.set_attribute("/bench/model", "blas", std::string("cuBLASLt (") + options.dtype + ", float32 accumulation)");
    file.set_attribute("/bench/model", "mfu_denominator",
                       "mfu: a 8192^3 cuBLASLt product in " + options.dtype +
                           " on the rank's GPU, same run; mfu_of_peak: the GPU's dense datasheet peak for the type "
                           "(reference/theory/gpus.hpp)");
    return;
  }
  const bool gpu = session.on_gpu();
  file.set_attribute("/bench/model", "blas", std::string(gpu ? "cuBLAS (TF32 off)" : ops::blas_name()));
  const std::string n = std::to_string(matmul_size(session.space()));
  file.set_attribute("/bench/model", "mfu_denominator",
                     "best of 5 square " + n + "x" + n + " matrix multiplies in the model's type on the " +
                         (gpu ? "rank's GPU" : "rank's core") + ", same run");
}

namespace {

class BenchModel final : public CommandWith<ModelBenchOptions> {
 public:
  BenchModel()
      : CommandWith({.name = "bench model",
                     .help = "Tokens per second and model FLOPs utilisation (MFU) of a GPT training step on every rank; the "
                             "MFU denominator is the matrix-multiply rate measured in the same run; counted FLOPs must equal "
                             "the formula",
                     .order = 30,
                     .in_run = true,
                     .tables = {&kModelBenchTable, &kCalibrateTable},
                     .resume_probe = ResumeProbe{{"-q", "--np", "2", "--models", "tiny,small", "--steps", "2", "--warmup", "0"},
                                                 "bench/model",
                                                 "model,rank,parameters,step_flops",
                                                 {1},
                                                 "INT"}}) {}

  void declare(CommandOptions& o) override {
    ModelBenchOptions& m = options_;
    o.add("--models", m.models, "GPT models, comma-separated:" + model_presets_help(), {"tiny", "tiny,small"});
    o.add("--batch", m.batch,
          "Sequences per step and rank (reference path: every rank trains its own replica; fast path: the ranks are "
          "one data-parallel job, each on its own sequences, gradients summed every step)");
    o.add("--steps", m.steps, "Timed training steps per model (the median is reported)", {3, 3});
    o.add("--warmup", m.warmup, "Untimed steps first");
    o.add("--dtype", m.dtype, "float32 or float64; with --path fast, bfloat16 or float16");
    o.add("--optimizer", m.optimizer, "adamw or sgd (with momentum)");
    o.add("--path", m.path,
          "reference (the conformance ops, any device and type) or fast (16-bit tensor-core kernels, cuBLASLt, fused "
          "attention; --device cuda only)");
    o.add("--overlap", m.overlap,
          "on or off: with --path fast, sum each layer's gradients over the ranks while backward goes on (on a stream "
          "of their own; NCCL only, MPI sums after backward) or after backward on the step's stream");
  }

  std::optional<int> prepare(std::optional<int>) override {
    plan_model_bench(options_);
    return std::nullopt;
  }

  int execute(Job& job) override {
    Session& s = job.session;
    const ModelBenchPlan plan = plan_model_bench(options_);
    if (plan.fast) {
      if (!s.on_gpu()) throw UsageError("--path fast runs on GPUs only: add --device cuda");
      s.admit(fast_model_bench_bytes(plan), "the fast model benchmark");
      record_model_bench(s, run_fast_model_bench(s, plan, options_), options_);
      return kExitOk;
    }
    s.admit(model_bench_bytes_per_rank(plan), "the model benchmark");
    record_model_bench(s, run_model_bench(job, plan, options_), options_);
    return kExitOk;
  }
};

const RegisteredCommand<BenchModel> kBenchModel;

}  // namespace
}  // namespace parity::cli
