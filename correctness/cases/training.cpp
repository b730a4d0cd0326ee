// Training conformance cases (see training.hpp): the technique on every rank against the
// single-device computation of the same steps, on every rank.
#include "correctness/cases/training.hpp"

#include <cmath>
#include <limits>
#include <memory>

#include "correctness/cases/compare.hpp"
#include "correctness/cases/family.hpp"
#include "reference/core/error.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/parallel/data/parameter_server.hpp"

namespace parity::cases {

model::GptConfig case_gpt_config(DataType dtype) {
  return {.vocabulary = 32, .layers = 2, .hidden = 16, .heads = 2, .sequence = 8, .tied_embeddings = true,
          .dropout = 0.1, .dtype = dtype, .seed = 4321};
}

std::unique_ptr<model::Optimizer> case_adamw(DataType state) {
  return std::make_unique<model::AdamW>(model::AdamWConfig{1e-2, 0.9, 0.999, 1e-8, 0.01, model::DecayGroups::matrices},
                                        state);
}

SingleDeviceRun single_device_gpt(Communicator& comm, const model::GptConfig& config, std::int64_t rows, int steps) {
  SingleDeviceRun r;
  if (comm.rank() == 0) {
    const bool mixed = is_half(config.dtype);
    auto m = model::build_gpt(config);
    auto optimizer = case_adamw(mixed ? DataType::float32 : config.dtype);
    r.origin = values_of(*m, optimizer.get());
    const parallel::BatchSource source = parallel::batches_of(config);
    if (mixed) {
      MixedRun run = train_mixed_single_device(*m, *optimizer, source, rows, steps, case_loss_scale(config.dtype));
      r.losses = std::move(run.losses);
      r.gradients = std::move(run.first_gradients);
      r.values = std::move(run.values);
    } else {
      for (int step = 0; step < steps; ++step) {
        r.losses.push_back(model::train_step(*m, *optimizer, source(static_cast<std::uint64_t>(step), 0, rows, rows),
                                             static_cast<std::uint64_t>(step)));
        if (step == 0) r.gradients = gradients_of(*m);
      }
      r.values = values_of(*m, optimizer.get());
    }
  }
  for (parallel::ParameterValues* v : {&r.gradients, &r.values, &r.origin}) broadcast_from_first(comm, *v);
  broadcast_from_first(comm, r.losses);
  return r;
}

parallel::LossScaling case_loss_scaling(DataType model_type) {
  parallel::LossScaling s;
  s.dynamic = model_type == DataType::float16;
  s.initial_scale = 0x1p12;
  s.growth_interval = 1000;
  return s;
}

double case_loss_scale(DataType model_type) {
  const parallel::LossScaling s = case_loss_scaling(model_type);
  return s.dynamic ? s.initial_scale : 1;
}

namespace {

using parallel::BatchSource;

// A small MLP beside the GPT (the asynchronous parameter server's model).
model::MlpConfig mlp_config(DataType dtype) {
  return {.inputs = 12, .width = 20, .outputs = 6, .layers = 3, .dtype = dtype, .seed = 4321};
}

DataType model_type(const TrainingCase& c) { return parse_data_type(c.precision); }

// 16-bit parameters and gradients with float32 master weights and optimizer state.
bool is_mixed(const TrainingCase& c) { return is_half(model_type(c)); }


std::unique_ptr<model::Model> build(const TrainingCase& c) {
  if (c.model == "gpt") return model::build_gpt(case_gpt_config(model_type(c)));
  return model::build_mlp(mlp_config(model_type(c)));
}

BatchSource batches(const TrainingCase& c) {
  if (c.model == "gpt") return parallel::batches_of(case_gpt_config(model_type(c)));
  return parallel::batches_of(mlp_config(model_type(c)));
}

BatchSource with_fault(BatchSource source, const std::string& fault, int rank) {
  if (fault.empty()) return source;
  require(fault == "local_normalizer" || fault == "shifted_rows" || fault == "scaled_gradient" ||
              fault == "dropped_micro_batch",
          "unknown training fault '" + fault + "'");
  // dropped_micro_batch drops the first micro-batch rank 0 reads in step 1, once.
  auto dropped = std::make_shared<bool>(false);
  return [source, fault, rank, dropped](std::uint64_t step, std::int64_t first, std::int64_t rows, std::int64_t global) {
    if (fault == "shifted_rows" && rank == 0) return source(step, first + 1, rows, global);
    model::Batch b = source(step, first, rows, global);
    if (fault == "local_normalizer") b.normalizer = b.normalizer * static_cast<double>(rows) / static_cast<double>(global);
    // Rank 0's gradient of step 1 scaled by 1 + 1e-3 (its loss divided by a smaller count).
    if (fault == "scaled_gradient" && rank == 0 && step == 1) b.normalizer /= 1 + 1e-3;
    // Its loss divided by infinity: the micro-batch adds nothing to the gradient.
    if (fault == "dropped_micro_batch" && rank == 0 && step == 1 && !*dropped) {
      *dropped = true;
      b.normalizer = std::numeric_limits<double>::infinity();
    }
    return b;
  };
}

std::unique_ptr<model::Optimizer> make_optimizer(const TrainingCase& c, bool float64 = false) {
  const DataType state = float64 || c.precision == "float64" ? DataType::float64 : DataType::float32;
  if (c.optimizer == "sgd") return std::make_unique<model::Sgd>(model::SgdConfig{0.05, 0.9, 0.01}, state);
  // Momentum multiplies the effect of stale gradients (asynchronous SGD with 7 workers and
  // momentum 0.9 does not converge here): the asynchronous case uses plain SGD.
  if (c.optimizer == "sgd_plain") return std::make_unique<model::Sgd>(model::SgdConfig{0.05, 0, 0}, state);
  return case_adamw(state);
}

// The single-device reference: the whole batch on one model, `steps` optimizer steps. With
// mixed precision: 16-bit parameters and gradients, float32 master copies and state, the loss
// multiplied by the case's loss scale and the float32 gradients divided by it.
parallel::ParameterValues single_device(const TrainingCase& c) {
  auto m = build(c);
  auto optimizer = make_optimizer(c);
  const BatchSource source = batches(c);
  if (!is_mixed(c)) {
    for (int step = 0; step < c.steps; ++step)
      model::train_step(*m, *optimizer, source(step, 0, c.global_batch, c.global_batch), step);
    return values_of(*m, optimizer.get());
  }
  return train_mixed_single_device(*m, *optimizer, source, c.global_batch, c.steps, case_loss_scale(model_type(c))).values;
}

// A mixed-precision case's float64 counterpart: the same GPT in float64 from the 16-bit
// model's starting values (widened exactly), trained on the same batches with float64 state.
// The parameters only: its state has no float32 master to compare with.
parallel::ParameterValues float64_run(const TrainingCase& c) {
  const auto half = build(c);
  const model::GptConfig g = case_gpt_config(DataType::float64);
  auto m = model::build_gpt(g);
  const auto from = half->parameters();
  const auto to = m->parameters();
  require(from.size() == to.size(), "float64_run: the models differ in parameters");
  for (std::size_t i = 0; i < to.size(); ++i) copy_into(to[i]->value, cast(from[i]->value, DataType::float64, to[i]->name, MemoryCategory::parameters));
  auto optimizer = make_optimizer(c, true);
  const BatchSource source = parallel::batches_of(g);
  for (int step = 0; step < c.steps; ++step)
    model::train_step(*m, *optimizer, source(step, 0, c.global_batch, c.global_batch), step);
  return values_of(*m, optimizer.get());
}

struct Trained {
  parallel::ParameterValues values;
  parallel::StepStats last;
  std::vector<theory::ShardedUnit> units;
  int skipped = 0;  // steps
};

Trained train_data_parallel(Communicator& comm, const TrainingCase& c, int stage) {
  auto m = build(c);
  m->to(comm.memory_space());  // initialised on the host: the same start as the reference
  auto optimizer = make_optimizer(c);
  parallel::DataParallelConfig config;
  config.zero_stage = stage;
  config.global_batch = c.global_batch;
  config.micro_batches = c.micro_batches;
  config.bucket_bytes = 2048;  // several buckets even for these small models
  config.precision = is_mixed(c) ? parallel::Precision::mixed : parallel::Precision::model;
  if (is_mixed(c)) config.loss_scaling = case_loss_scaling(model_type(c));
  Trained out;
  auto trainer = parallel::make_trainer(comm, *m, *optimizer, config);
  const BatchSource source = with_fault(batches(c), c.fault, comm.rank());
  for (int step = 0; step < c.steps; ++step) {
    out.last = trainer->step(source, step);
    out.skipped += out.last.skipped ? 1 : 0;
  }
  out.values = trainer->gathered(is_mixed(c));
  out.units = trainer->parts().optimizer->units();
  return out;
}

double element_bytes(const TrainingCase& c) { return static_cast<double>(size_of(model_type(c))); }

TrainingResult run_data_parallel_case(Communicator& comm, const TrainingCase& c) {
  const int n = comm.size(), stage = c.technique->zero_stage;
  TrainingResult r;
  const parallel::ParameterValues origin = values_of(*build(c), make_optimizer(c).get());
  const Trained trained = train_data_parallel(comm, c, stage);
  const std::int64_t tokens_per_row = c.model == "gpt" ? case_gpt_config(model_type(c)).sequence : 1;
  const std::int64_t terms = c.global_batch * tokens_per_row;
  r.bound = tolerance::training_relative_bound(model_type(c), terms, n, c.steps);
  if (is_mixed(c) && c.optimizer == "adamw")
    r.bound = std::max(r.bound, tolerance::sign_flip_bound(tolerance::half_regrouping_noise(model_type(c), terms, n)));
  // Mixed precision is held to plain data parallelism in the same precision; everything
  // else to the single-device run, and ZeRO also to plain data parallelism.
  std::vector<std::pair<std::string, parallel::ParameterValues>> references;
  parallel::ParameterValues single;  // trained on rank 0 alone (broadcast_from_first)
  if (comm.rank() == 0) single = single_device(c);
  broadcast_from_first(comm, single);
  references.emplace_back("single device", std::move(single));
  if (stage > 0) references.emplace_back("data parallel", train_data_parallel(comm, c, 0).values);
  std::string failures;
  for (const auto& [what, reference] : references) {
    const Difference d = compare(trained.values, reference, origin);
    r.compared += (r.compared.empty() ? "" : "; ") + std::string("against ") + what + ": parameters " +
                  format(d.parameters) + ", state " + format(d.state);
    r.error = std::max({r.error, d.parameters, d.state});
    if (!(d.parameters <= r.bound && d.state <= r.bound))
      failures += what + " differs beyond " + format(r.bound) + " (largest at " + d.where + "); ";
  }
  if (trained.skipped > 0)
    failures += std::to_string(trained.skipped) + " steps skipped: the gradients overflowed at the case's loss scale; ";
  if (is_mixed(c)) {
    // The master weights against float64 training from the same start.
    const Difference d = compare(trained.values, float64_run(c), origin);
    r.float64_error = d.parameters;
    const double noise =
        tolerance::half_chain_noise(model_type(c), tolerance::gpt_rounding_chain(case_gpt_config(model_type(c)).layers));
    r.float64_bound = tolerance::linear_training_bound(noise, c.steps);
    if (c.optimizer == "adamw") r.float64_bound = std::max(r.float64_bound, tolerance::sign_flip_bound(noise));
    r.compared += "; against float64: parameters " + format(d.parameters) + " (bound " + format(r.float64_bound) + ")";
    if (!(d.parameters <= r.float64_bound))
      failures += "float64 training differs beyond " + format(r.float64_bound) + " (largest at " + d.where + "); ";
  }
  // Bytes sent in the last step, counted by the communicator, against the formula.
  r.bytes_formula = c.technique->bytes_sent_per_rank(trained.units, n, element_bytes(c), c.micro_batches);
  const double sent = static_cast<double>(trained.last.bytes_sent);
  if (stage == 0) {
    // Ring blocks of a bucket differ by an element between ranks: the total is exact.
    r.bytes_sent = sum_over_ranks(comm, sent) / n;
    if (std::llround(r.bytes_sent * n) != std::llround(r.bytes_formula * n))
      failures += "bytes sent " + format(r.bytes_sent) + " per rank on average, formula " + format(r.bytes_formula) + "; ";
  } else {
    const double wrong = max_over_ranks(comm, std::llround(sent) != std::llround(r.bytes_formula) ? 1 : 0);
    r.bytes_sent = max_over_ranks(comm, sent);
    if (wrong > 0) failures += "bytes sent " + format(r.bytes_sent) + " by a rank, formula " + format(r.bytes_formula) + "; ";
  }
  r.passed = failures.empty();
  r.message = failures.empty() ? r.compared : failures + r.compared;
  return r;
}

double evaluate(model::Model& m, const BatchSource& source, std::int64_t rows) {
  const model::Batch b = source(1u << 30, 0, rows, rows);
  const model::PassContext eval{1u << 30, 0, false, 0};
  return m.loss(m.forward(b.inputs, eval), b.targets, b.normalizer, nullptr);
}

}  // namespace

parallel::ParameterValues replay_parameter_server(const TrainingCase& c,
                                                  const std::vector<parallel::ParameterServerUpdate>& order) {
  auto server = build(c), worker = build(c);
  auto optimizer = make_optimizer(c);
  const BatchSource source = batches(c);
  const auto server_parameters = server->parameters(), worker_parameters = worker->parameters();
  std::vector<std::vector<Tensor>> versions;  // the server's parameters after each update
  const auto keep_version = [&] {
    auto& v = versions.emplace_back();
    for (model::Parameter* p : server_parameters) v.push_back(p->value.clone(p->name + ".version", MemoryCategory::workspace));
  };
  keep_version();
  for (const auto& u : order) {
    require(u.version >= 0 && u.version < static_cast<std::int64_t>(versions.size()),
            "parameter server log: version " + std::to_string(u.version) + " was never the server's");
    for (std::size_t i = 0; i < worker_parameters.size(); ++i)
      copy_into(worker_parameters[i]->value, versions[static_cast<std::size_t>(u.version)][i]);
    const std::uint64_t step = static_cast<std::uint64_t>(u.step);
    worker->zero_grad();
    worker->forward_backward(source(step, 0, c.global_batch, c.global_batch), {step, 0, true, 0});
    server->zero_grad();
    for (std::size_t i = 0; i < server_parameters.size(); ++i)
      copy_into(server_parameters[i]->gradient(), worker_parameters[i]->gradient());
    optimizer->step(server_parameters);
    keep_version();
  }
  return values_of(*server, optimizer.get());
}

namespace {

TrainingResult run_parameter_server_case(Communicator& comm, const TrainingCase& c) {
  TrainingResult r;
  const bool one_worker = c.technique->name == "ps_one_worker";
  // One worker: ranks 0 and 1 run it, the others wait; several: every rank.
  auto group = comm.split(one_worker && comm.rank() >= 2 ? 1 : 0, comm.rank());
  double error = 0, staleness = 0, first = 0, last = 0, updates = 0;
  if (!one_worker || comm.rank() < 2) {
    auto m = build(c);
    auto optimizer = make_optimizer(c);
    const BatchSource source = batches(c);
    first = evaluate(*m, source, c.global_batch);
    parallel::ParameterServerConfig config{c.steps, c.global_batch};
    const auto stats = parallel::run_parameter_server(*group, *m, *optimizer, source, config);
    last = evaluate(*m, source, c.global_batch);
    for (auto s : stats.staleness) staleness = std::max(staleness, static_cast<double>(s));
    if (!one_worker && comm.rank() == 0) {
      // The server's order replayed on one device equals the server bit for bit.
      const parallel::ParameterValues replayed = replay_parameter_server(c, stats.order);
      const parallel::ParameterValues mine = values_of(*m, optimizer.get());
      for (std::size_t i = 0; i < mine.names.size(); ++i)
        for (std::size_t k = 0; k < mine.values[i].size(); ++k)
          error = std::max(error, std::abs(mine.values[i][k] - replayed.values[i][k]));
      updates = static_cast<double>(stats.order.size());
    }
    if (one_worker) {
      // Synchronous SGD on the worker's batches: equal bit for bit.
      const parallel::ParameterValues reference = single_device(c);
      const parallel::ParameterValues mine = values_of(*m, optimizer.get());
      for (std::size_t i = 0; i < mine.names.size(); ++i)
        for (std::size_t k = 0; k < mine.values[i].size(); ++k)
          error = std::max(error, std::abs(mine.values[i][k] - reference.values[i][k]));
    }
  }
  r.error = max_over_ranks(comm, error);
  r.max_staleness = max_over_ranks(comm, staleness);
  r.first_loss = max_over_ranks(comm, comm.rank() == 0 ? first : -1e300);
  r.last_loss = max_over_ranks(comm, comm.rank() == 0 ? last : -1e300);
  if (one_worker) {
    r.bound = 0;
    r.compared = "against synchronous SGD: largest difference " + format(r.error) + ", staleness " + format(r.max_staleness);
    r.passed = r.error == 0 && r.max_staleness == 0;
  } else {
    // Not synchronous SGD: the server's own order of updates, replayed on one device, must
    // give its parameters bit for bit; every worker's every step applied; some gradient
    // stale (the workers' first ones all use version 0); and the held-out loss must fall.
    const double expected = static_cast<double>(comm.size() - 1) * c.steps;
    const double applied = max_over_ranks(comm, updates);
    r.bound = 0;
    r.compared = "against the server's order replayed on one device: largest difference " + format(r.error) + "; " +
                 format(applied) + " updates of " + format(expected) + "; largest staleness " + format(r.max_staleness) +
                 "; held-out loss " + format(r.first_loss) + " -> " + format(r.last_loss);
    r.passed = r.error == 0 && applied == expected && r.max_staleness >= 1 && r.last_loss < r.first_loss;
  }
  r.message = (r.passed ? "" : "failed: ") + r.compared;
  return r;
}

}  // namespace

std::string TrainingCase::name() const {
  return "training/" + technique->name + "/" + optimizer + "/" + precision + "/" + model;
}

std::vector<TrainingCase> training_grid(int world_size) {
  std::vector<TrainingCase> out;
  for (const char* precision : {"float64", "float32"})
    for (const char* optimizer : {"adamw", "sgd"})
      for (const char* technique : {"dp", "dp_accumulation", "zero1", "zero2", "zero3"}) {
        TrainingCase c;
        c.technique = &parallel::find_technique(technique);
        c.optimizer = optimizer;
        c.precision = precision;
        c.micro_batches = c.technique->micro_batches;
        if (c.micro_batches > 1) c.global_batch = 16;
        out.push_back(c);
      }
  for (const char* precision : {"bfloat16", "float16"})
    for (const char* optimizer : {"adamw", "sgd"})
      for (const char* technique : {"dp", "zero1", "zero2", "zero3"}) {
        TrainingCase c;
        c.technique = &parallel::find_technique(technique);
        c.optimizer = optimizer;
        c.precision = precision;
        out.push_back(c);
      }
  if (world_size >= 2) {
    TrainingCase c;
    c.technique = &parallel::find_technique("ps_one_worker");
    c.optimizer = "sgd";
    out.push_back(c);
  }
  if (world_size >= 3) {
    TrainingCase c;
    c.technique = &parallel::find_technique("ps_async");
    c.optimizer = "sgd_plain";
    c.model = "mlp";
    c.steps = 20;
    c.global_batch = 16;
    out.push_back(c);
  }
  return out;
}

bool runs_on_host(const TrainingCase& c) { return c.technique->asynchronous; }

TrainingResult run_training_case(Communicator& comm, const TrainingCase& c) {
  if (runs_on_host(c)) return run_parameter_server_case(comm, c);
  return run_data_parallel_case(comm, c);
}


// The family `parity check` runs (family.hpp).
const RegisteredFamily kTrainingFamily{FamilyDefinition<TrainingCase, TrainingResult>{
    .table = &kTrainingCasesTable, .label = "training", .order = 20, .grid = training_grid,
    .run =
        [](const CaseContext& context, const TrainingCase& c) {
          return run_training_case(runs_on_host(c) ? context.host_world : context.world, c);
        },
    .columns =
        [](record::Table& t, const CaseContext& context, const TrainingCase& c, const TrainingResult& r) {
          const Communicator& where = runs_on_host(c) ? context.host_world : context.world;
          t.put({{"technique", c.technique->name}, {"optimizer", c.optimizer}, {"precision", c.precision},
                 {"model", c.model}, {"device", where.memory_space() == MemorySpace::cuda ? "cuda" : "cpu"},
                 {"world_size", context.world.size()}, {"steps", c.steps}, {"global_batch", c.global_batch},
                 {"micro_batches", c.micro_batches}, {"error", r.error}, {"bound", r.bound},
                 {"bytes_sent", r.bytes_sent}, {"formula_bytes_sent", r.bytes_formula},
                 {"max_staleness", r.max_staleness}});
          // Mixed precision against float64 training from the same start; NaN otherwise.
          const double nan = std::numeric_limits<double>::quiet_NaN();
          t.put({{"float64_error", r.float64_error >= 0 ? r.float64_error : nan},
                 {"float64_bound", r.float64_error >= 0 ? r.float64_bound : nan}});
        }}};

}  // namespace parity::cases
