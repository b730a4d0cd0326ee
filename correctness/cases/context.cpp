// Context-parallel conformance cases (see context.hpp).
#include "correctness/cases/context.hpp"

#include <cmath>

#include "correctness/cases/compare.hpp"
#include "correctness/cases/family.hpp"
#include "correctness/cases/pipeline.hpp"
#include "correctness/cases/tensor.hpp"
#include "correctness/cases/training.hpp"
#include "reference/core/error.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/parallel/context/layers.hpp"
#include "reference/parallel/data/config.hpp"
#include "reference/parallel/grid.hpp"
#include "reference/parallel/techniques/techniques.hpp"
#include "reference/parallel/tensor/tensor_parallel.hpp"

namespace parity::cases {

using parallel::Axis;

std::string ContextCase::name() const {
  return "context/" + variant + "/cp" + std::to_string(cp) + (tp > 1 ? "/tp" + std::to_string(tp) : "") + (sp ? "/sp" : "") +
         (pp > 1 ? "/pp" + std::to_string(pp) + "/" + schedule + "/m" + std::to_string(micro_batches) : "") +
         (dp > 1 ? "/dp" + std::to_string(dp) : "") +
         (zero > 0 ? "/zero" + std::to_string(zero) : "") + "/" + precision + (fault.empty() ? "" : "/" + fault);
}

namespace {
model::GptConfig context_model(DataType dtype) {
  model::GptConfig g = tensor_case_model(dtype);
  g.sequence = 24;  // 2 cp chunks for cp = 2, 3, 4; 12 heads over cp for Ulysses
  return g;
}
DataType type_of(const ContextCase& c) {
  if (c.precision == "bfloat16") return DataType::bfloat16;
  if (c.precision == "float16") return DataType::float16;
  return c.precision == "float64" ? DataType::float64 : DataType::float32;
}
}  // namespace

std::vector<ContextCase> context_grid(int n) {
  std::vector<ContextCase> out;
  const model::GptConfig m = context_model(DataType::float64);
  // A case of `variant` at cp x tp x pp, dp the rest of the world.
  const auto add = [&](const char* variant, int cp, const char* precision, int tp = 1, bool sp = false, int pp = 1,
                       int zero = 0) {
    out.push_back({.variant = variant, .cp = cp, .tp = tp, .sp = sp, .pp = pp, .dp = n / (cp * tp * pp),
                   .zero = zero, .precision = precision});
  };
  const char* const variants[] = {"ring", "allgather", "ulysses"};
  for (int cp : {1, 2, 3, 4}) {
    if (n % cp != 0 || (cp == 1 && n > 1)) continue;
    for (const char* variant : variants) {
      // 16 bits: 16-bit parameters, activations and gradients, float32 masters and attention;
      // float16's loss scaled (dynamic, from the training cases' scale).
      for (const char* precision : {"float64", "float32", "bfloat16", "float16"}) add(variant, cp, precision);
      // With ZeRO-1 over the replicas of each sequence's cp ranks.
      if (n / cp > 1)
        for (const char* precision : {"float64", "float32", "bfloat16"}) add(variant, cp, precision, 1, false, 1, 1);
    }
  }
  // With tensor parallelism over 2 ranks, with and without its sequence parallelism.
  for (int cp : {2, 4}) {
    if (n % (2 * cp) != 0) continue;
    for (const char* variant : variants)
      for (const char* precision : {"float64", "float32", "bfloat16"})
        for (const bool sp : {false, true}) {
          // Ulysses splits each tp rank's heads over cp; sequence parallelism a cp rank's tokens over tp.
          if (std::string(variant) == "ulysses" && (m.heads / 2) % cp != 0) continue;
          if (sp && (m.sequence / cp) % 2 != 0) continue;
          add(variant, cp, precision, 2, sp);
        }
  }
  // With a 1F1B pipeline of two stages.
  for (int cp : {2, 4}) {
    if (n % (2 * cp) != 0) continue;
    for (const char* variant : variants)
      for (const char* precision : {"float64", "float32", "bfloat16"}) add(variant, cp, precision, 1, false, 2);
  }
  return out;
}

namespace {
// A case with pipeline stages: the pipeline family's run (correctness/cases/pipeline.cpp) with
// each stage's sequence over cp, against the same single device.
ContextResult run_pipelined(Communicator& world, const ContextCase& c) {
  return run_pipeline_case(world, PipelineCase{.schedule = c.schedule,
                                               .micro_batches = c.micro_batches,
                                               .tensor_parallel = c.tp,
                                               .data_parallel = c.dp,
                                               .context_parallel = c.cp,
                                               .context_variant = c.variant,
                                               .context_fault = c.fault,
                                               .zero_stage = c.zero,
                                               .precision = c.precision,
                                               .steps = c.steps,
                                               .model = context_model(type_of(c))});
}
}  // namespace

ContextResult run_context_case(Communicator& world, const ContextCase& c) {
  const int n = world.size();
  if (c.pp > 1 && c.cp * c.tp * c.dp * c.pp == n) return run_pipelined(world, c);
  if (c.cp < 1 || c.tp < 1 || c.cp * c.tp * c.dp != n)
    throw UsageError(c.name() + ": cp " + std::to_string(c.cp) + " x tp " + std::to_string(c.tp) + " x dp " +
                     std::to_string(c.dp) + " is not the " + std::to_string(n) + " ranks");
  ContextResult r;
  r.loss_error = 0;  // the largest over steps, below
  const model::GptConfig config = context_model(type_of(c));
  const int dp = c.dp;
  const std::int64_t rows = 2 * dp + 1;  // uneven shards over dp
  parallel::GridSpec spec;
  spec.set(Axis::tp, c.tp).set(Axis::cp, c.cp).set(Axis::dp, dp);
  parallel::Grid grid(world, spec);
  parallel::ContextParallel cp(grid.group(Axis::cp), {c.variant, c.fault});
  std::unique_ptr<parallel::TensorParallel> tp;
  if (c.tp > 1) {
    parallel::TensorParallelConfig tc;
    tc.sequence_parallel = c.sp;
    tp = std::make_unique<parallel::TensorParallel>(grid.group(Axis::tp), tc);
  }
  auto m = parallel::build_context_parallel_gpt(config, cp, tp.get());
  const bool mixed = is_half(config.dtype);
  auto optimizer = case_adamw(mixed ? DataType::float32 : config.dtype);
  Communicator& replicas = grid.group(parallel::AxisSet{Axis::dp, Axis::cp});
  parallel::DataParallelConfig dc;
  dc.zero_stage = c.zero;
  dc.global_batch = rows;
  dc.bucket_bytes = 2048;
  if (mixed) {
    dc.precision = parallel::Precision::mixed;
    dc.loss_scaling = case_loss_scaling(config.dtype);
  }
  dc = parallel::checked_config(dc, dp, *m, *optimizer);  // the batch splits over dp alone
  // Gradients summed over dp x cp; the batch split over dp alone (the cp ranks of a sequence take
  // the same rows).
  parallel::StepParts parts = parallel::make_data_parallel_parts(replicas, *m, *optimizer, dc);
  // With sequence parallelism the LayerNorm gradients are partial sums over tp's shares of the rows.
  if (tp && c.sp) parts.syncs.insert(parts.syncs.begin(), std::make_unique<parallel::TensorParallelSync>(*tp, *m, false));
  parallel::Trainer trainer(*m, grid.group(Axis::dp), rows, 1, std::move(parts));
  const parallel::BatchSource source = parallel::batches_of(config);
  std::vector<double> losses;
  std::string failures;

  // The first step's gradients, from a model of its own: each dp rank its rows (the cp ranks of a
  // sequence the same ones), the gradients summed over dp x cp; against one device below.
  parallel::ParameterValues first_gradients;
  {
    auto g = parallel::build_context_parallel_gpt(config, cp, tp.get());
    const parallel::RowRange mine = parallel::batch_shard(rows, grid.coordinate(Axis::dp), dp);
    first_gradients = first_step(*g, source, mine, rows, replicas, grid.group(Axis::dp), tp.get(),
                                 case_loss_scale(config.dtype))
                          .gradients;
  }
  for (int step = 0; step < c.steps; ++step) {
    const parallel::StepStats stats = trainer.step(source, static_cast<std::uint64_t>(step));
    if (stats.skipped) failures += "step " + std::to_string(step) + " skipped: the gradients overflowed at the case's loss scale; ";
    losses.push_back(stats.loss);
  }
  std::vector<std::string> disagreeing;
  const parallel::ParameterValues values =
      tp ? parallel::gather_tensor_parallel(trainer.gathered(mixed), m->parameters(), tp->group(), &disagreeing)
         : trainer.gathered(mixed);

  // One device, the whole batch (16 bits: the same model with float32 masters).
  const SingleDeviceRun single = single_device_gpt(world, config, rows, c.steps);
  const std::vector<double>& reference_losses = single.losses;
  const parallel::ParameterValues &reference = single.values, &reference_gradients = single.gradients, &origin = single.origin;
  const Difference d = compare(values, reference, origin);
  // Attention's sums over the sequence's keys, the gradients' over tokens and ranks, regrouped;
  // in 16 bits the partial sums' roundings too, and AdamW's sign flips (tolerance.hpp).
  const std::int64_t terms =
      tolerance::tensor_parallel_reduction_terms(rows * config.sequence, config.hidden, config.vocabulary);
  r.bound = tolerance::restore_relative_bound(config.dtype, terms, n, 1, config.layers, c.steps, true);
  r.gradient_bound = mixed ? tolerance::kTrainingConditioning *
                                 tolerance::tensor_parallel_half_noise(config.dtype, terms, n, c.tp, config.layers)
                           : tolerance::gradient_relative_bound(config.dtype, terms, n);
  const Difference g = compare(first_gradients, reference_gradients, zeros_like(reference_gradients));
  r.gradient_error = g.parameters;
  if (!(g.parameters <= r.gradient_bound))
    failures += "first-step gradients differ from one device beyond " + format(r.gradient_bound) + " (largest at " + g.where + "); ";
  r.error = std::max(d.parameters, d.state);
  for (int step = 0; step < c.steps; ++step)
    r.loss_error = std::max(r.loss_error, std::abs(losses[static_cast<std::size_t>(step)] - reference_losses[static_cast<std::size_t>(step)]) /
                                              std::abs(reference_losses[static_cast<std::size_t>(step)]));
  failures += training_failures(d, r.bound, disagreeing);
  if (!(r.loss_error <= r.bound)) failures += "a step's loss differs by " + format(r.loss_error) + "; ";
  agree_on(world, failures,
           "first-step gradients " + format(g.parameters) + ", loss " + format(r.loss_error) + ", parameters " +
               format(d.parameters) + ", state " + format(d.state),
           r);
  return r;
}

const RegisteredFamily kContextFamily{FamilyDefinition<ContextCase, ContextResult>{
    .table = &kContextCasesTable, .label = "context-parallel", .order = 45, .grid = context_grid,
    // Context parallelism's attention blocks run on the CPU only: on a device run the cases take the
    // host world, and their rows say so (device cpu).
    .run = [](const CaseContext& context, const ContextCase& c) { return run_context_case(context.host_world, c); },
    .columns =
        [](record::Table& t, const CaseContext& context, const ContextCase& c, const ContextResult& r) {
          t.put({{"variant", c.variant}, {"cp", c.cp}, {"tp", c.tp}, {"sp", c.sp ? 1 : 0}, {"pp", c.pp}, {"dp", c.dp},
                 {"zero", c.zero}});
          add_run_columns(t, context.host_world, c.precision, c.steps);
          t.put({{"error", r.error}, {"bound", r.bound}, {"loss_error", r.loss_error},
                 {"gradient_error", r.gradient_error}, {"gradient_bound", r.gradient_bound}});
        }}};

}  // namespace parity::cases
