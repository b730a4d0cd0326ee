// Pipeline conformance cases (see pipeline.hpp).
#include "correctness/cases/pipeline.hpp"

#include <algorithm>

#include "correctness/cases/compare.hpp"
#include "correctness/cases/family.hpp"
#include "reference/core/error.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/parallel/checkpoint/checkpoint.hpp"
#include "reference/parallel/context/layers.hpp"
#include "reference/parallel/grid.hpp"
#include "reference/parallel/pipeline/executor.hpp"
#include "reference/parallel/techniques/techniques.hpp"
#include "reference/parallel/tensor/tensor_parallel.hpp"

namespace parity::cases {

namespace {

// The training cases' GPT with six blocks (nine top-level layers): enough for 4 ranks x 2 chunks.
model::GptConfig pipeline_gpt(DataType dtype) {
  model::GptConfig g = case_gpt_config(dtype);
  g.layers = 6;
  return g;
}

DataType type_of(const PipelineCase& c) { return parse_data_type(c.precision); }

// Rows of a step: every micro-batch of every replica gets at least one, and they differ in size.
std::int64_t global_batch(const PipelineCase& c) {
  return (c.rows_per_micro_batch > 0 ? c.rows_per_micro_batch * c.micro_batches : 2 * c.micro_batches + 1) * c.data_parallel;
}

// The entries of `from` named in `names`, in that order.
parallel::ParameterValues select(const parallel::ParameterValues& from, const std::vector<std::string>& names) {
  parallel::ParameterValues out;
  for (const std::string& name : names) {
    const auto it = std::find(from.names.begin(), from.names.end(), name);
    require(it != from.names.end(), "pipeline case: the single-device model has no parameter " + name);
    const auto i = static_cast<std::size_t>(it - from.names.begin());
    out.names.push_back(name);
    out.values.push_back(from.values[i]);
    out.state.push_back(from.state[i]);
  }
  return out;
}

}  // namespace

std::string PipelineCase::name() const {
  std::string n = "pipeline/" + schedule;
  if (schedule == "interleaved") n += "/v" + std::to_string(chunks);
  if (tensor_parallel > 1) n += "/tp" + std::to_string(tensor_parallel);
  if (context_parallel > 1) n += "/cp" + std::to_string(context_parallel) + "/" + context_variant;
  if (data_parallel > 1) n += "/dp" + std::to_string(data_parallel);
  if (zero_stage > 0) n += "/zero" + std::to_string(zero_stage);
  return n + "/m" + std::to_string(micro_batches) + "/" + precision;
}

std::vector<PipelineCase> pipeline_grid(int world_size) {
  const int p = world_size;
  std::vector<PipelineCase> out;
  const auto add = [&](const char* schedule, int m, const char* precision, int tp = 1, int dp = 1, int zero = 0) {
    out.push_back({.schedule = schedule, .micro_batches = m, .tensor_parallel = tp, .data_parallel = dp,
                   .zero_stage = zero, .precision = precision});
  };
  for (const char* precision : {"float64", "float32"}) {
    if (p <= 4) {
      // Zero-bubble schedules split each backward into I and W (the V-shape runs two stages per rank).
      for (const char* schedule : {"gpipe", "1f1b", "zb-h1", "zb-h2", "zb-v"})
        for (int m : {1, p, 2 * p + 1})
          if (m != 1 || p != 1) add(schedule, m, precision);  // at p = 1, m = 1 is the case m = p
      for (int m : {p, 2 * p}) add("interleaved", m, precision);
    } else if (p <= 9) {
      // Every rank a stage (a stage needs one of the model's 9 top-level layers): 1F1B and GPipe,
      // so that no world size up to 9 runs without a pipeline case.
      add("1f1b", p, precision);
      add("gpipe", 2 * p + 1, precision);
    }
    // Compositions, with micro-batches a multiple of the stages (interleaving needs it).
    if (p == 4) {
      add("1f1b", 4, precision, 1, 2);
      add("interleaved", 4, precision, 1, 2);
      add("zb-h1", 4, precision, 1, 2, 1);
      add("1f1b", 3, precision, 2);
      add("zb-v", 4, precision, 2);
    }
    if (p == 8) {
      add("1f1b", 4, precision, 2, 2);
      add("zb-h1", 4, precision, 2, 2, 1);
      add("interleaved", 4, precision, 1, 2, 1);
    }
  }
  // Mixed precision: 1F1B and a zero-bubble schedule over every rank, and 1F1B with two
  // replicas (ZeRO-1) where the world has them.
  for (const char* precision : {"bfloat16", "float16"}) {
    if (p <= 4) {
      add("1f1b", 2 * p, precision);
      add("zb-h1", 2 * p, precision);
    }
    if (p % 2 == 0 && p >= 4) add("1f1b", 4, precision, 1, 2, 1);
  }
  return out;
}

std::unique_ptr<PipelineSetup> setup_pipeline_case(Communicator& world, const PipelineCase& c) {
  namespace pp = parallel::pipeline;
  auto setup = std::make_unique<PipelineSetup>();
  const model::GptConfig config = setup->config = c.model ? *c.model : pipeline_gpt(type_of(c));
  setup->global_batch = global_batch(c);
  const int others = c.data_parallel * c.tensor_parallel * c.context_parallel;
  if (world.size() % others != 0)
    throw UsageError(c.name() + ": " + std::to_string(world.size()) + " ranks are not " + std::to_string(c.data_parallel) +
                     " replicas of a pipeline of " + std::to_string(c.tensor_parallel) + "-way tensor-parallel and " +
                     std::to_string(c.context_parallel) + "-way context-parallel stages");
  parallel::GridSpec spec;
  spec.set(parallel::Axis::tp, c.tensor_parallel)
      .set(parallel::Axis::cp, c.context_parallel)
      .set(parallel::Axis::dp, c.data_parallel)
      .set(parallel::Axis::pp, world.size() / others);
  setup->grid = std::make_unique<parallel::Grid>(world, spec);
  parallel::Grid& grid = *setup->grid;
  Communicator& comm = grid.group(parallel::Axis::pp);
  Communicator& replicas = grid.group(parallel::Axis::dp);
  setup->tensor_parallel = std::make_unique<parallel::TensorParallel>(grid.group(parallel::Axis::tp), parallel::TensorParallelConfig{});
  const parallel::TensorParallel& tp = *setup->tensor_parallel;
  const pp::Schedule schedule = c.schedule_csv.empty() ? pp::make_schedule(c.schedule, comm.size(), c.micro_batches, c.chunks)
                                                       : pp::from_csv(c.schedule_csv, c.schedule);
  if (schedule.micro_batches != c.micro_batches)
    throw UsageError(c.name() + ": the schedule has " + std::to_string(schedule.micro_batches) + " micro-batches");
  // Stages balanced by the parameters of the whole model's top-level layers.
  std::vector<std::int64_t>& parameters = setup->layer_parameters;
  parameters = pp::layer_parameters(*model::build_gpt(config));
  const std::vector<model::LayerRange> stages = pp::balance_stages(parameters, schedule.stage_count());
  const std::vector<int> owner = schedule.stage_ranks();
  std::vector<model::LayerRange> mine;
  std::vector<int> layers_per_stage;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    layers_per_stage.push_back(stages[s].end - stages[s].begin);
    if (owner[s] == comm.rank()) mine.push_back(stages[s]);
  }
  if (c.context_parallel > 1) {
    setup->context = std::make_unique<parallel::ContextParallel>(grid.group(parallel::Axis::cp),
                                                                 parallel::ContextParallelConfig{c.context_variant, c.context_fault});
    setup->model = parallel::build_context_parallel_gpt(config, *setup->context, c.tensor_parallel > 1 ? &tp : nullptr, mine);
  } else {
    setup->model = c.tensor_parallel > 1 ? parallel::build_tensor_parallel_gpt(config, tp, mine) : model::build_gpt(config, mine);
  }
  model::Model* m = setup->model.get();
  if (c.checkpoint != "none") {
    parallel::CheckpointPolicy policy = parallel::parse_checkpoint_policy(c.checkpoint);
    policy.fault = c.checkpoint_fault;
    std::vector<int> pieces;
    for (const model::LayerRange& range : mine) pieces.push_back(range.end - range.begin);
    parallel::apply_checkpoint_policy(*m, config, policy, global_batch(c) / c.micro_batches + 1, pieces);
  }
  m->to(comm.memory_space());
  const bool mixed = is_half(config.dtype);
  setup->optimizer = case_adamw(mixed ? DataType::float32 : config.dtype);
  model::Optimizer* optimizer = setup->optimizer.get();
  // The tied table: one copy on the first stage's rank, one on the last's; their gradients are
  // summed so both take the single device's update.
  const int first_rank = owner.front(), last_rank = owner.back();
  const bool holds_copy = comm.rank() == first_rank || comm.rank() == last_rank;
  setup->tied = comm.split(holds_copy ? 0 : 1 + comm.rank(), comm.rank());
  Communicator& tied = *setup->tied;
  // Data parallelism over the replicas (its buckets hold the gradients and start each step
  // from zero; with one replica they only do that), or ZeRO-1, with the pipeline as the
  // schedule. The syncs finish in order, the tensor-parallel part first. ZeRO-1 must
  // reduce-scatter only after the tied table's copies are summed (its chunks cut the two
  // copies' flat buffers differently), so it waits for the step's end (no overlap) and the sum
  // comes before it; DDP's all-reduce runs during backward and the sum after it (sums commute).
  parallel::DataParallelConfig dp;
  dp.global_batch = setup->global_batch;
  dp.micro_batches = c.micro_batches;
  dp.zero_stage = c.zero_stage;
  dp.overlap = c.zero_stage == 0;
  if (mixed) {
    dp.precision = parallel::Precision::mixed;
    dp.loss_scaling = case_loss_scaling(config.dtype);
  }
  dp = parallel::checked_config(dp, replicas.size(), *m, *optimizer);
  // The gradients are summed over the replicas, and with context parallelism over the cp ranks
  // of a sequence too (the batch is split over dp alone).
  Communicator& summed =
      c.context_parallel > 1 ? grid.group(parallel::AxisSet{parallel::Axis::dp, parallel::Axis::cp}) : replicas;
  parallel::StepParts parts = parallel::make_data_parallel_parts(summed, *m, *optimizer, dp);
  const std::int64_t local = config.sequence / c.context_parallel;  // the tokens of a sequence a rank holds
  auto executor = std::make_unique<pp::Executor>(
      comm, schedule, layers_per_stage, [config, local](std::int64_t rows) { return Shape{rows, local, config.hidden}; },
      config.dtype);
  if (!c.inject_failure.empty()) executor->inject_failure(pp::parse_action(c.inject_failure));
  setup->executor = executor.get();
  parts.schedule = std::move(executor);
  if (first_rank != last_rank && holds_copy) {
    std::vector<model::Parameter*> table;
    for (model::Parameter* p : m->parameters())
      if (p->name == "embedding.wte") table.push_back(p);
    auto sum = std::make_unique<parallel::AllReduceSync>("the tied embedding's two copies", tied, table);
    // Before ZeRO-1's reduce-scatter; after DDP's all-reduce, which may be in flight on the same
    // buffer until its finish.
    parts.syncs.insert(c.zero_stage > 0 ? parts.syncs.begin() : parts.syncs.end(), std::move(sum));
  }
  if (c.tensor_parallel > 1)
    parts.syncs.insert(parts.syncs.begin(), std::make_unique<parallel::TensorParallelSync>(tp, *m, false));
  setup->trainer = std::make_unique<parallel::Trainer>(*m, replicas, setup->global_batch, c.micro_batches, std::move(parts));
  // An overflow on any stage, replica or tp rank skips the step everywhere.
  if (mixed) setup->trainer->set_loss_scaling(dp.loss_scaling, &world);
  return setup;
}

TrainingResult run_pipeline_case(Communicator& world, const PipelineCase& c) {
  const std::unique_ptr<PipelineSetup> setup = setup_pipeline_case(world, c);
  const model::GptConfig& config = setup->config;
  parallel::Trainer& trainer = *setup->trainer;
  const parallel::TensorParallel& tp = *setup->tensor_parallel;
  const parallel::BatchSource source = parallel::batches_of(config);
  TrainingResult r;
  const bool mixed = is_half(config.dtype);
  const UpdateGradients first_gradients(trainer);
  std::vector<double> losses;
  double first_scale = 1;
  int skipped = 0;
  for (int step = 0; step < c.steps; ++step) {
    const parallel::StepStats stats = trainer.step(source, static_cast<std::uint64_t>(step));
    if (step == 0) first_scale = stats.loss_scale;
    losses.push_back(stats.loss);
    skipped += stats.skipped ? 1 : 0;
  }
  r.first_loss = losses.front();
  r.last_loss = losses.back();
  // Whole parameters from the tensor-parallel shards (collective over tp; every stage has them);
  // in mixed precision the float32 masters. The first step's gradients as the update read them:
  // summed over the replicas (and a sequence's cp ranks), among which ZeRO spreads them.
  const auto whole_over_tp = [&](const parallel::ParameterValues& local) {
    return c.tensor_parallel > 1 ? parallel::gather_tensor_parallel(local, setup->model->parameters(), tp.group(), nullptr) : local;
  };
  const parallel::ParameterValues trained = whole_over_tp(trainer.gathered(mixed));
  Communicator& sharing = setup->grid->group(c.context_parallel > 1 ? parallel::AxisSet{parallel::Axis::dp, parallel::Axis::cp}
                                                                    : parallel::AxisSet{parallel::Axis::dp});
  const parallel::ParameterValues gradients = whole_over_tp(first_gradients.whole(*setup->model, sharing, 1 / first_scale));

  // The single device: the whole model on the whole batch, one pass per step (this rank's
  // stage of it).
  const SingleDeviceRun single = single_device_gpt(world, config, global_batch(c), c.steps);
  const std::vector<double>& reference_losses = single.losses;
  const parallel::ParameterValues origin = select(single.origin, trained.names);
  const parallel::ParameterValues reference = select(single.values, trained.names);
  const parallel::ParameterValues reference_gradients = select(single.gradients, gradients.names);

  // Every sum of the single-device step, regrouped: over micro-batches and replicas (m dp
  // partial sums), the table's two copies, the t partials of the row-parallel layers and the
  // loss's vocabulary shards, and the batch's tokens within each.
  const std::int64_t tokens = global_batch(c) * config.sequence;
  const std::int64_t terms = tolerance::tensor_parallel_reduction_terms(tokens, config.hidden, config.vocabulary);
  const int partials =
      c.micro_batches * c.data_parallel * c.context_parallel + 1 + (c.tensor_parallel > 1 ? c.tensor_parallel : 0);
  r.bound = tolerance::training_relative_bound(config.dtype, terms, partials, c.steps);
  r.gradient_bound = tolerance::gradient_relative_bound(config.dtype, terms, partials);
  if (mixed) {
    // 16 bits: the micro-batches' partial gradients rounded, and the tp sums (AdamW).
    const double noise = tolerance::tensor_parallel_half_noise(config.dtype, terms, partials, c.tensor_parallel, config.layers);
    r.bound = std::max(tolerance::linear_training_bound(noise, c.steps), tolerance::sign_flip_bound(noise));
    r.gradient_bound = tolerance::kTrainingConditioning * noise;
  }
  const Difference d = compare(trained, reference, origin);
  const Difference g = compare(gradients, reference_gradients, zeros_like(reference_gradients));
  double loss_error = 0;
  for (std::size_t step = 0; step < losses.size(); ++step)
    loss_error = std::max(loss_error, std::abs(losses[step] - reference_losses[step]) / std::abs(reference_losses[step]));
  const double error = max_over_ranks(world, std::max(d.parameters, d.state));
  r.loss_error = max_over_ranks(world, loss_error);
  r.gradient_error = max_over_ranks(world, g.parameters);
  r.error = std::max(error, r.loss_error);
  r.compared = "against single device: first-step gradients " + format(r.gradient_error) + ", parameters and state " +
               format(error) + ", every step's loss " + format(r.loss_error) + " (largest on rank " +
               std::to_string(world.rank()) + " at " + d.where + ", gradients at " + g.where + ")";
  if (skipped > 0) r.compared += "; " + std::to_string(skipped) + " steps skipped: the gradients overflowed at the case's loss scale";
  r.passed = r.error <= r.bound && r.gradient_error <= r.gradient_bound && skipped == 0;
  r.message = r.passed ? r.compared
                       : (skipped > 0                           ? "failed: "
                          : r.gradient_error > r.gradient_bound ? "first-step gradients differ beyond " + format(r.gradient_bound) + ": "
                                                                : "differs beyond " + format(r.bound) + ": ") +
                             r.compared;
  return r;
}


// The family `parity check` (and `parity pipeline run`) runs (family.hpp).
const RegisteredFamily kPipelineFamily{FamilyDefinition<PipelineCase, TrainingResult>{
    .table = &kPipelineCasesTable, .label = "pipeline", .order = 40, .grid = pipeline_grid, .run = run_pipeline_case,
    .columns =
        [](record::Table& t, const CaseContext& context, const PipelineCase& c, const TrainingResult& r) {
          t.put({{"schedule", c.schedule}, {"chunks", c.schedule == "interleaved" ? c.chunks : 1},
                 {"data_parallel", c.data_parallel}, {"micro_batches", c.micro_batches}});
          add_run_columns(t, context.world, c.precision, c.steps);
          t.put({{"error", r.error}, {"bound", r.bound}, {"gradient_error", r.gradient_error},
                 {"gradient_bound", r.gradient_bound}, {"first_loss", r.first_loss}, {"last_loss", r.last_loss}});
        }}};

std::unique_ptr<CaseList> pipeline_cases(std::vector<PipelineCase> chosen) {
  return kPipelineFamily.as<PipelineCase, TrainingResult>().cases(std::move(chosen));
}

}  // namespace parity::cases
