// parity bench checkpoint: activation memory against step time for every checkpointing policy
// (none, full, every k for every k, sqrt, selective and byte budgets) on one GPT. Each policy's
// model trains beside a model without recompute, step for step in alternating order, so that
// the time overhead is a ratio measured in the same run and drift in the machine hits both
// alike; the losses must agree bit for bit (recompute changes memory and time, never results),
// the tracker's bytes and the ops' FLOPs must equal the formulas of theory/checkpoint.hpp.
// Every rank trains its own replicas at the same time; times are means over ranks. In bfloat16
// and float16 both models train in mixed precision (float32 master weights and AdamW state;
// float16 with dynamic loss scaling from 2^16), each through a data-parallel trainer of one rank.
#include "bench/commands/bench_checkpoint.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>

#include "bench/cli/progress.hpp"
#include "bench/cli/shared.hpp"
#include "bench/commands/command.hpp"
#include "bench/commands/presets.hpp"
#include "reference/core/error.hpp"
#include "reference/model/optimizer.hpp"
#include "reference/ops/flops.hpp"
#include "reference/parallel/checkpoint/checkpoint.hpp"
#include "reference/parallel/techniques/techniques.hpp"
#include "reference/theory/calibration.hpp"
#include "reference/theory/checkpoint.hpp"
#include "reference/theory/model.hpp"

namespace parity::cli {
namespace {

using Clock = std::chrono::steady_clock;
using Kind = parallel::CheckpointPolicy::Kind;

// Block by block: '-' keeps everything, 's' keeps all but the attention probabilities, a digit
// (or letter past 9) the segment it is recomputed in.
std::string describe_layout(const theory::CheckpointLayout& layout) {
  std::string out;
  for (int s : layout.segment) {
    if (!out.empty()) out += ' ';
    if (s < 0) out += layout.selective ? "s" : "-";
    else out += s < 10 ? static_cast<char>('0' + s) : s < 36 ? static_cast<char>('a' + s - 10) : '+';
  }
  return out;
}

// One model and what it measured. A 16-bit model steps through `trainer` (mixed precision on
// a one-rank group), a float32 or float64 one with model::train_step.
struct Trained {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<model::Optimizer> optimizer;
  std::unique_ptr<parallel::Trainer> trainer;
  std::unique_ptr<parallel::ActivationProbe> probe;
  theory::CheckpointLayout layout;
  std::vector<double> losses, seconds;
  std::int64_t flops = 0;  // the matmul FLOPs of its last step
};

Trained build(const model::GptConfig& config, const parallel::CheckpointPolicy& policy, std::int64_t rows,
              MemorySpace space, Communicator& alone) {
  Trained t;
  t.model = model::build_gpt(config);
  t.layout = parallel::apply_checkpoint_policy(*t.model, config, policy, rows);
  t.model->to(space);
  const bool mixed = is_half(config.dtype);
  t.optimizer = std::make_unique<model::AdamW>(model::AdamWConfig{}, mixed ? DataType::float32 : config.dtype);
  if (mixed) {
    parallel::DataParallelConfig dc;
    dc.global_batch = rows;
    dc.precision = parallel::Precision::mixed;
    dc.loss_scaling.dynamic = config.dtype == DataType::float16;
    t.trainer = parallel::make_trainer(alone, *t.model, *t.optimizer, dc);
  }
  // On the baseline too, so that both models step with the same hooks.
  t.probe = std::make_unique<parallel::ActivationProbe>(*t.model);
  return t;
}

void step(Trained& t, const model::Batch& batch, int index, MemorySpace space) {
  const ops::FlopScope flops;
  wait_for_device(space);
  const auto t0 = Clock::now();
  const auto step = static_cast<std::uint64_t>(index);
  if (t.trainer) {
    // The trainer asks for its rows; this step's batch is every one of them.
    const parallel::BatchSource same = [&batch](std::uint64_t, std::int64_t, std::int64_t, std::int64_t) {
      return batch;
    };
    t.losses.push_back(t.trainer->step(same, step).loss);
  } else {
    t.losses.push_back(model::train_step(*t.model, *t.optimizer, batch, step));
  }
  wait_for_device(space);
  t.seconds.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  t.flops = flops.matmul();
}

std::vector<parallel::CheckpointPolicy> default_policies(int layers, const theory::BlockActivationBytes& bytes) {
  std::vector<std::string> names = {"none", "full"};
  for (int k = 2; k <= layers; ++k) names.push_back("every" + std::to_string(k));
  names.push_back("sqrt");
  names.push_back("selective");
  // Budgets that keep a quarter, a half and three quarters of the blocks: the largest peak
  // at which each does (theory::budget_kept_blocks is the rule).
  std::set<int> kept;
  for (int quarter : {1, 2, 3}) kept.insert(std::max(1, layers * quarter / 4));
  for (int m : kept)
    if (m < layers)
      names.push_back("budget" +
                      std::to_string(theory::checkpoint_activation_bytes(theory::budget_layout(layers, m), bytes).peak));
  std::vector<parallel::CheckpointPolicy> out;
  for (const auto& n : names) out.push_back(parallel::parse_checkpoint_policy(n));
  return out;
}

}  // namespace

CheckpointBenchPlan plan_checkpoint_bench(const CheckpointBenchOptions& options) {
  if (options.batch < 1) throw UsageError("--batch must be at least 1");
  if (options.steps < 1) throw UsageError("--steps must be at least 1");
  if (options.warmup < 0) throw UsageError("--warmup must not be negative");
  check_swept_layers(options.layers);
  if (!(options.dropout >= 0 && options.dropout < 1))
    throw UsageError("--dropout " + std::to_string(options.dropout) + " must be in [0, 1)");
  CheckpointBenchPlan plan;
  plan.model = options.model;
  plan.config = preset_config(options.model, options.layers);
  plan.config.dtype = training_type("--dtype", options.dtype, kTrainingTypes);
  plan.config.dropout = options.dropout;
  plan.config.validate();
  plan.batch = options.batch;
  const theory::BlockActivationBytes bytes = theory::gpt_block_activation_bytes(plan.config, plan.batch);
  const std::vector<std::string> named = split_names(options.policies, "--policies");
  if (named.empty()) {
    plan.policies = default_policies(plan.config.layers, bytes);
  } else {
    plan.policies.push_back(parallel::parse_checkpoint_policy("none"));  // the baseline, always first
    std::set<std::string> seen = {"none"};
    for (const std::string& text : named) {
      parallel::CheckpointPolicy p;
      try {
        p = parallel::parse_checkpoint_policy(text);
      } catch (const UsageError& e) {
        throw UsageError(std::string("--policies: ") + e.what());
      }
      if (p.kind == Kind::none) continue;
      if (!seen.insert(p.name()).second) throw UsageError("--policies names " + p.name() + " twice");
      plan.policies.push_back(p);
    }
  }
  for (const auto& p : plan.policies) {
    try {
      parallel::check_checkpoint_policy(p, plan.config.layers, bytes);
    } catch (const UsageError& e) {
      throw UsageError(std::string("--policies: ") + e.what() + " [--model " + plan.model + ", --layers " +
                       std::to_string(plan.config.layers) + ", --batch " + std::to_string(plan.batch) + "]");
    }
  }
  return plan;
}

std::size_t checkpoint_bench_bytes_per_rank(const CheckpointBenchPlan& plan) {
  const auto& c = plan.config;
  const double e = static_cast<double>(size_of(c.dtype));
  const double b = static_cast<double>(plan.batch), s = static_cast<double>(c.sequence), h = static_cast<double>(c.hidden);
  // One row's activations (linear in the rows), scaled in double below.
  const theory::BlockActivationBytes bytes = theory::gpt_block_activation_bytes(c, 1);
  // Two models alive at once (the policy's and the baseline), each with parameters, gradients
  // and two AdamW moments (16-bit: with float32 moments, master weights and a float32 copy of
  // the gradients); one pass's activations (the baseline's peak), logits and their gradient, a
  // few transient [b, s, h] tensors.
  const double per_parameter = is_half(c.dtype) ? 2 * e + 4.0 * 4 : 4.0 * e;
  const double peak = static_cast<double>(theory::checkpoint_activation_bytes(theory::none_layout(c.layers), bytes).peak) * b;
  return estimated_bytes(2 * per_parameter * static_cast<double>(theory::gpt_parameters(c)) + peak +
                         e * (3.0 * b * s * static_cast<double>(c.vocabulary) + 8.0 * b * s * h));
}

CheckpointBenchOutcome run_checkpoint_bench(Job& job, const CheckpointBenchPlan& plan, const CheckpointBenchOptions& options) {
  Session& session = job.session;
  Communicator& world = session.world();
  const MemorySpace space = session.space();
  const model::GptConfig& c = plan.config;
  const theory::BlockActivationBytes bytes = theory::gpt_block_activation_bytes(c, plan.batch);
  CheckpointBenchOutcome out;
  // Each rank trains its own replicas: a 16-bit one's trainer runs on a group of that rank alone.
  const std::unique_ptr<Communicator> alone = world.split(world.rank(), 0);
  const int pairs = options.warmup + options.steps;
  Progress progress("bench checkpoint", plan.policies.size() * static_cast<std::size_t>(pairs),
                    session.is_root() && !session.options().quiet);
  std::size_t done = 0;
  const RowKey by_policy = [](const record::Table& t, std::size_t row) { return t.get_str("policy")[row]; };
  const auto failed_row = [](const record::Table& t, std::size_t row) -> std::int64_t {
    return t.get_i64("losses_equal")[row] == 0 || t.get_i64("matches_formula")[row] == 0;
  };
  // The step without recompute predicted from the calibration (float32 and float64 runs).
  const bool predicted = c.dtype == DataType::float32 || c.dtype == DataType::float64;
  const theory::StepEstimate estimate =
      predicted ? theory::reference_gpt_step(c, plan.batch, job.calibration(c.dtype), true) : theory::StepEstimate{};
  for (const parallel::CheckpointPolicy& policy : plan.policies) {
    const std::string name = policy.name();
    if (const auto restored = session.restore_row("/bench/checkpoint", name, by_policy, out.table, failed_row);
        restored.found) {
      out.mismatches += static_cast<std::size_t>(restored.value);
      done += static_cast<std::size_t>(pairs);
      progress.update(done - 1, name + " taken from the resumed file");
      continue;
    }
    Trained base = build(c, parallel::parse_checkpoint_policy("none"), plan.batch, space, *alone);
    Trained run = build(c, policy, plan.batch, space, *alone);
    const std::int64_t recomputed_before = parallel::recomputed_block_forwards();
    world.barrier();  // replicas start together
    for (int i = 0; i < pairs; ++i) {
      const model::Batch batch = model::gpt_batch(c, static_cast<std::uint64_t>(i), 0, plan.batch, plan.batch).to(space);
      // Alternating order: a step that follows another runs on warmer caches.
      if (i % 2 == 0) {
        step(base, batch, i, space);
        step(run, batch, i, space);
      } else {
        step(run, batch, i, space);
        step(base, batch, i, space);
      }
      progress.update(done++, name + " step " + std::to_string(i + 1));
    }
    const std::int64_t recomputed = parallel::recomputed_block_forwards() - recomputed_before;
    std::vector<double> ratios, own, baseline;
    for (int i = options.warmup; i < pairs; ++i) {
      const auto k = static_cast<std::size_t>(i);
      ratios.push_back(run.seconds[k] / base.seconds[k]);
      own.push_back(run.seconds[k]);
      baseline.push_back(base.seconds[k]);
    }
    bool losses_equal = run.losses.size() == base.losses.size();
    for (std::size_t i = 0; losses_equal && i < run.losses.size(); ++i)
      losses_equal = std::memcmp(&run.losses[i], &base.losses[i], sizeof(double)) == 0;
    const theory::CheckpointActivationBytes formula = theory::checkpoint_activation_bytes(run.layout, bytes);
    const std::int64_t formula_recompute = theory::recompute_flops(run.layout, plan.batch, c.sequence, c.hidden);
    const std::int64_t recompute = run.flops - base.flops;
    // A layout that recomputes blocks must have recomputed them, once per step.
    const bool recomputed_all = recomputed == static_cast<std::int64_t>(run.layout.recomputed_blocks()) * pairs;
    bool matches = run.probe->stored() == formula.stored && run.probe->peak() == formula.peak &&
                   recompute == formula_recompute && recomputed_all;
    // Every rank must agree: one rank's mismatch fails the row.
    const auto all_equal = gather_from_ranks(world, losses_equal ? 1.0 : 0.0);
    const auto all_match = gather_from_ranks(world, matches ? 1.0 : 0.0);
    losses_equal = *std::min_element(all_equal.begin(), all_equal.end()) == 1.0;
    matches = *std::min_element(all_match.begin(), all_match.end()) == 1.0;
    const auto rank_ratio = gather_from_ranks(world, percentile(ratios, 0.5));
    const auto rank_time = gather_from_ranks(world, percentile(own, 0.5));
    const auto rank_base = gather_from_ranks(world, percentile(baseline, 0.5));
    const auto mean = [](const std::vector<double>& v) {
      double sum = 0;
      for (double x : v) sum += x;
      return sum / static_cast<double>(v.size());
    };
    record::Table& t = out.table;
    const std::size_t first_row = t.rows();
    t.put({{"policy", name}, {"kind", std::string(policy.kind_name())},
           {"every_k", policy.kind == Kind::every ? policy.every : 0},
           {"budget_bytes", policy.kind == Kind::budget ? policy.budget_bytes : 0},
           {"layout", describe_layout(run.layout)}, {"recomputed_blocks", run.layout.recomputed_blocks()},
           {"segments", run.layout.segments()}, {"selective", run.layout.selective ? 1 : 0}, {"layers", c.layers},
           {"batch", plan.batch}, {"sequence", c.sequence}, {"hidden", c.hidden}, {"heads", c.heads},
           {"dtype", std::string(name_of(c.dtype))}, {"stored_bytes", run.probe->stored()},
           {"formula_stored_bytes", formula.stored}, {"peak_bytes", run.probe->peak()},
           {"formula_peak_bytes", formula.peak}, {"step_flops", run.flops}, {"baseline_step_flops", base.flops},
           {"recompute_flops", recompute}, {"formula_recompute_flops", formula_recompute},
           {"recomputed_forwards", recomputed}, {"step_time_s", mean(rank_time)},
           {"baseline_step_time_s", mean(rank_base)}, {"time_ratio", mean(rank_ratio)},
           {"time_ratio_rank_min", *std::min_element(rank_ratio.begin(), rank_ratio.end())},
           {"time_ratio_rank_max", *std::max_element(rank_ratio.begin(), rank_ratio.end())},
           {"timed_pairs", options.steps}, {"ranks", world.size()}, {"losses_equal", losses_equal ? 1 : 0},
           {"matches_formula", matches ? 1 : 0}});
    const int recomputed_blocks = run.layout.recomputed_blocks();
    const double own_prediction =
        estimate.total() + recomputed_blocks * estimate.block_forward_s +
        (run.layout.selective ? (run.layout.blocks() - recomputed_blocks) * estimate.attention_forward_s : 0.0);
    const auto rank_prediction = gather_from_ranks(world, own_prediction);
    const auto rank_predicted_ratio = gather_from_ranks(world, own_prediction / estimate.total());
    const double nan = std::nan("");
    t.put({{"predicted_step_time_s", predicted ? mean(rank_prediction) : nan},
           {"predicted_time_ratio", predicted ? mean(rank_predicted_ratio) : nan}});
    t.f64("predicted_over_measured")
        .push_back(predicted && !session.oversubscribed() ? mean(rank_prediction) / mean(rank_time) : nan);
    session.record_rows("/bench/checkpoint", t, first_row);  // kept if the run is cut short
    if (!losses_equal || !matches) ++out.mismatches;
    if (session.is_root() && !session.options().quiet) {
      std::fprintf(stderr,
                   "[bench checkpoint] %-14s peak %lld B (formula %lld), stored %lld B, recompute +%.1f%% FLOPs, "
                   "time x%.3f%s%s\n",
                   name.c_str(), static_cast<long long>(run.probe->peak()), static_cast<long long>(formula.peak),
                   static_cast<long long>(run.probe->stored()),
                   100.0 * static_cast<double>(recompute) / static_cast<double>(base.flops), mean(rank_ratio),
                   losses_equal ? "" : "  LOSSES DIFFER from the run without recompute",
                   matches ? "" : "  BYTES OR FLOPS DIFFER from the formula");
    }
  }
  progress.finish();
  return out;
}

void record_checkpoint_bench(Session& session, const CheckpointBenchOutcome& outcome, const CheckpointBenchPlan& plan,
                             const CheckpointBenchOptions& options) {
  if (!session.is_root()) return;
  auto& file = session.results();
  file.write_table(outcome.table);
  file.set_attribute("/bench/checkpoint", "model", plan.model);
  file.set_attribute("/bench/checkpoint", "config", plan.config.describe());
  file.set_attribute("/bench/checkpoint", "dropout", plan.config.dropout);
  file.set_attribute("/bench/checkpoint", "warmup_pairs", static_cast<std::int64_t>(options.warmup));
  file.set_attribute("/bench/checkpoint", "time_ratio",
                     std::string("median over timed steps of (the policy's step time / the step time without recompute), "
                                 "the two models stepping in alternating order in the same run; mean over ranks"));
}

namespace {

class BenchCheckpoint final : public CommandWith<CheckpointBenchOptions> {
 public:
  BenchCheckpoint()
      : CommandWith({.name = "bench checkpoint",
                     .help = "Activation checkpointing: activation bytes stored and at the peak against step time for every "
                             "policy and k on one GPT, beside the formulas (which must match); the time overhead is measured "
                             "against steps without recompute in the same run, and the losses must agree bit for bit",
                     .order = 90,
                     .in_run = true,
                     .tables = {&kCheckpointBenchTable, &kCalibrateTable},
                     .resume_probe = ResumeProbe{{"-q", "--np", "2", "--layers", "4", "--policies", "full,every2,selective", "--steps", "3"},
                                                 "bench/checkpoint",
                                                 "policy,layout,stored_bytes,peak_bytes,recompute_flops,losses_equal",
                                                 {1, 3}}}) {}

  void declare(CommandOptions& o) override {
    CheckpointBenchOptions& c = options_;
    o.add("--model", c.model, "GPT preset:" + model_presets_help());
    o.add("--layers", c.layers, "Transformer blocks L (0: the preset's)", {4, 8});
    o.add("--policies", c.policies,
          "Policies, comma-separated: none, full, every<k> (1 <= k <= L), sqrt, selective, budget<bytes> (K, M, G "
          "suffixes); none, the baseline, always runs [default: none, full, every k for k = 2..L, sqrt, selective, and "
          "the budgets that keep a quarter, a half and three quarters of the blocks]");
    o.add("--batch", c.batch, "Sequences per step");
    o.add("--dropout", c.dropout, "Dropout probability (recompute must replay the masks)");
    o.add("--steps", c.steps, "Timed steps of each policy, each paired with a step without recompute", {2, 3});
    o.add("--warmup", c.warmup, "Untimed pairs first");
    o.add("--dtype", c.dtype,
          "float64, float32, bfloat16 or float16 (16-bit: float32 master weights and optimizer state; float16 with "
          "dynamic loss scaling)");
  }

  std::optional<int> prepare(std::optional<int>) override {
    plan_checkpoint_bench(options_);  // refused before ranks start
    return std::nullopt;
  }

  int execute(Job& job) override {
    Session& s = job.session;
    const CheckpointBenchPlan plan = plan_checkpoint_bench(options_);
    s.admit(checkpoint_bench_bytes_per_rank(plan), "the checkpoint benchmark");
    const CheckpointBenchOutcome outcome = run_checkpoint_bench(job, plan, options_);
    record_checkpoint_bench(s, outcome, plan, options_);
    return outcome.mismatches ? kExitFailed : kExitOk;
  }
};

const RegisteredCommand<BenchCheckpoint> kBenchCheckpoint;

}  // namespace
}  // namespace parity::cli
