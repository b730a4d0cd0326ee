// parity bench precision: one GPT trained data-parallel over every rank in float64, float32,
// bfloat16 and float16 (16-bit parameters, activations and gradients with float32 master
// weights and optimizer state; float16 with dynamic loss scaling), from the same seed on the
// same batches. Each step's loss, the loss scale it ran with and whether it was skipped are
// recorded, so the report draws the 16-bit runs' losses beside float64's and the scale's
// growth and halving.
#include "bench/commands/bench_precision.hpp"

#include <cmath>
#include <cstdio>

#include "bench/cli/progress.hpp"
#include "bench/cli/shared.hpp"
#include "bench/commands/command.hpp"
#include "bench/commands/presets.hpp"
#include "reference/core/error.hpp"
#include "reference/model/optimizer.hpp"
#include "reference/parallel/techniques/techniques.hpp"

namespace parity::cli {

PrecisionBenchPlan plan_precision_bench(const PrecisionBenchOptions& options) {
  if (options.steps < 1) throw UsageError("--steps must be at least 1");
  if (options.batch < 1) throw UsageError("--batch must be at least 1");
  PrecisionBenchPlan plan;
  plan.model = options.model;
  plan.config = preset_config(options.model, options.layers);
  plan.config.validate();
  plan.scaling.dynamic = true;
  plan.scaling.initial_scale = options.loss_scale;
  plan.scaling.growth_interval = options.growth_interval;
  try {
    plan.scaling.validate();
  } catch (const UsageError& e) {
    throw UsageError(std::string("--loss-scale / --growth-interval: ") + e.what());
  }
  for (const std::string& name : split_names(options.precisions, "--precisions")) {
    plan.precisions.push_back(training_type("--precisions", name, kTrainingTypes));
  }
  refuse_repeats(plan.precisions, "--precisions");
  if (plan.precisions.empty()) throw UsageError("--precisions names no precision");
  return plan;
}

std::size_t precision_bench_bytes_per_rank(const PrecisionBenchPlan& plan, std::int64_t batch) {
  // The widest model: parameters, gradients and two AdamW moments in float64, its activations
  // (a generous 32 [b, s, h] tensors per block) and the logits with their gradient.
  const auto& c = plan.config;
  const double b = static_cast<double>(batch), s = static_cast<double>(c.sequence), h = static_cast<double>(c.hidden);
  return estimated_bytes(8.0 * (4.0 * static_cast<double>(c.vocabulary * c.hidden) * (1 + c.layers) +
                                         32.0 * b * s * h * c.layers + 3.0 * b * s * static_cast<double>(c.vocabulary)));
}

PrecisionBenchOutcome run_precision_bench(Session& session, const PrecisionBenchPlan& plan,
                                          const PrecisionBenchOptions& options) {
  Communicator& world = session.world();
  if (options.batch < world.size())
    throw UsageError("--batch " + std::to_string(options.batch) + " is smaller than the world of " +
                     std::to_string(world.size()) + " ranks (every rank needs a row)");
  PrecisionBenchOutcome out;
  Progress progress("bench precision", plan.precisions.size() * static_cast<std::size_t>(options.steps),
                    session.is_root() && !session.options().quiet);
  std::size_t done = 0;
  const RowKey by_precision = [](const record::Table& t, std::size_t row) { return t.get_str("precision")[row]; };
  for (DataType type : plan.precisions) {
    const std::string name(name_of(type));
    if (session.restore_rows("/bench/precision", name, by_precision, static_cast<std::size_t>(options.steps), out.table)
            .found) {
      done += static_cast<std::size_t>(options.steps);
      progress.update(done - 1, name + " taken from the resumed file");
      continue;
    }
    model::GptConfig config = plan.config;
    config.dtype = type;
    const bool mixed = is_half(type);
    auto m = model::build_gpt(config);
    m->to(session.space());
    const model::AdamW optimizer(model::AdamWConfig{}, mixed ? DataType::float32 : type);
    parallel::DataParallelConfig dc;
    dc.global_batch = options.batch;
    if (mixed) dc.precision = parallel::Precision::mixed;
    if (type == DataType::float16) dc.loss_scaling = plan.scaling;
    auto trainer = parallel::make_trainer(world, *m, optimizer, dc);
    const parallel::BatchSource source = parallel::batches_of(config);
    record::Table& t = out.table;
    const std::size_t first_row = t.rows();
    int skipped = 0;
    double last_loss = 0, last_scale = 1;
    for (int step = 0; step < options.steps; ++step) {
      const parallel::StepStats stats = trainer->step(source, static_cast<std::uint64_t>(step));
      t.put({{"precision", name}, {"step", step}, {"loss", stats.loss}, {"loss_scale", stats.loss_scale},
             {"skipped", stats.skipped ? 1 : 0}, {"world_size", world.size()}});
      skipped += stats.skipped ? 1 : 0;
      last_loss = stats.loss;
      last_scale = stats.loss_scale;
      progress.update(done++, name + " step " + std::to_string(step + 1));
    }
    session.record_rows("/bench/precision", t, first_row);  // kept if the run is cut short
    // Only float16 may skip a step (its range needs the scale); a skip elsewhere, or a loss
    // that is not finite, is a failure.
    const bool failed = (skipped > 0 && type != DataType::float16) || !std::isfinite(last_loss);
    if (failed) ++out.failures;
    if (session.is_root() && !session.options().quiet)
      std::fprintf(stderr, "[bench precision] %-8s loss %.4f after %d steps, %d skipped, last scale %g%s\n", name.c_str(),
                   last_loss, options.steps, skipped, last_scale, failed ? "  FAILED" : "");
  }
  progress.finish();
  return out;
}

void record_precision_bench(Session& session, const PrecisionBenchOutcome& outcome, const PrecisionBenchPlan& plan,
                            const PrecisionBenchOptions& options) {
  if (!session.is_root()) return;
  auto& file = session.results();
  file.write_table(outcome.table);
  file.set_attribute("/bench/precision", "model", plan.model + ": " + plan.config.describe());
  file.set_attribute("/bench/precision", "steps", static_cast<std::int64_t>(options.steps));
  file.set_attribute("/bench/precision", "global_batch", options.batch);
  file.set_attribute("/bench/precision", "initial_scale", plan.scaling.initial_scale);
  file.set_attribute("/bench/precision", "growth_interval", static_cast<std::int64_t>(plan.scaling.growth_interval));
  file.set_attribute("/bench/precision", "loss_scaling", "float16: " + plan.scaling.describe());
}

namespace {

class BenchPrecision final : public CommandWith<PrecisionBenchOptions> {
 public:
  BenchPrecision()
      : CommandWith({.name = "bench precision",
                     .help = "Mixed precision: one GPT trained data-parallel in float64, float32, bfloat16 and float16 "
                             "(float32 master weights, float16 with dynamic loss scaling) from the same seed; every step's "
                             "loss, loss scale and skipped steps, for the report's loss and loss-scale curves",
                     .order = 100,
                     .in_run = true,
                     .tables = {&kPrecisionBenchTable},
                     .resume_probe = ResumeProbe{{"-q", "--np", "2", "--steps", "6"},
                                                 "bench/precision",
                                                 "precision,step,loss,loss_scale,skipped",
                                                 {1, 3}}}) {}

  void declare(CommandOptions& o) override {
    PrecisionBenchOptions& p = options_;
    o.add("--model", p.model, "GPT preset:" + model_presets_help());
    o.add("--layers", p.layers, "Transformer blocks L (0: the preset's)");
    o.add("--batch", p.batch, "Sequences per step over all ranks (at least one per rank)");
    o.add("--steps", p.steps, "Optimizer steps in each precision", {20, 40});
    o.add("--precisions", p.precisions,
          "Comma-separated: float64, float32, bfloat16, float16 (16-bit: float32 master weights and optimizer state)");
    o.add("--loss-scale", p.loss_scale,
          "float16's initial loss scale, a power of two (dynamic: halved and the step skipped on inf or NaN in any "
          "rank's gradients, doubled after --growth-interval clean steps)");
    o.add("--growth-interval", p.growth_interval, "Clean steps before float16's loss scale doubles");
  }

  std::optional<int> prepare(std::optional<int>) override {
    plan_precision_bench(options_);  // refused before ranks start
    return std::nullopt;
  }

  void prepare_for_run(int world_size) override { options_.batch = std::max<std::int64_t>(options_.batch, world_size); }

  int execute(Job& job) override {
    Session& s = job.session;
    const PrecisionBenchPlan plan = plan_precision_bench(options_);
    s.admit(precision_bench_bytes_per_rank(plan, options_.batch), "the precision benchmark");
    const PrecisionBenchOutcome outcome = run_precision_bench(s, plan, options_);
    record_precision_bench(s, outcome, plan, options_);
    return outcome.failures ? kExitFailed : kExitOk;
  }
};

const RegisteredCommand<BenchPrecision> kBenchPrecision;

}  // namespace
}  // namespace parity::cli
