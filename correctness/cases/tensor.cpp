// Tensor-parallel conformance cases (see tensor.hpp).
#include "correctness/cases/tensor.hpp"

#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "correctness/cases/compare.hpp"
#include "correctness/cases/family.hpp"
#include "correctness/cases/training.hpp"
#include "reference/core/error.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/parallel/tensor/tensor_parallel.hpp"

namespace parity::cases {
namespace {

using parallel::Axis;

DataType model_type(const TensorCase& c) { return parse_data_type(c.precision); }
// 16-bit parameters, activations and gradients, float32 master weights and optimizer state.
bool is_mixed(const TensorCase& c) { return is_half(model_type(c)); }

std::unique_ptr<model::Optimizer> make_optimizer(const TensorCase& c) {
  return case_adamw(is_mixed(c) ? DataType::float32 : model_type(c));
}

std::int64_t global_batch(const TensorCase& c, int dp) { return c.global_batch > 0 ? c.global_batch : 2 * dp + 1; }



}  // namespace

model::GptConfig tensor_case_model(DataType dtype) {
  return {.vocabulary = 48, .layers = 2, .hidden = 24, .heads = 12, .sequence = 12, .tied_embeddings = true,
          .dropout = 0.1, .dtype = dtype, .seed = 4321};
}

std::string TensorCase::name() const {
  return "tensor/tp" + std::to_string(tp) + "/" + (technique->sequence_parallel ? "sp" : "nosp") + "/" +
         data_parallel->name + "/" + precision + (micro_batches > 1 ? "/accumulate" + std::to_string(micro_batches) : "");
}

std::vector<TensorCase> tensor_grid(int world_size) {
  std::vector<TensorCase> out;
  for (int t : {1, 2, 3, 4}) {
    if (world_size % t != 0) continue;
    const int dp = world_size / t;
    // tp 1 is the degenerate split (every layer whole): checked with plain data parallelism.
    std::vector<const char*> dp_techniques = {"dp"};
    if (t > 1 && dp > 1) dp_techniques = {"dp", "zero1", "zero2", "zero3"};
    for (bool sp : {false, true}) {
      if (sp && t == 1) continue;
      for (const char* technique : dp_techniques)
        for (const char* precision : {"float64", "float32", "bfloat16", "float16"}) {
          // 16 bits at one tensor-parallel size (2), on the sequence-parallel split with plain
          // data parallelism and on the plain split with ZeRO-3.
          const bool half = std::string(precision) == "bfloat16" || std::string(precision) == "float16";
          if (half && (t != 2 || (sp ? std::string(technique) != "dp" : std::string(technique) != "zero3" && dp > 1)))
            continue;
          TensorCase c;
          c.technique = &parallel::find_technique(sp ? "tp_sp" : "tp");
          c.data_parallel = &parallel::find_technique(technique);
          c.tp = t;
          c.precision = precision;
          // Accumulation where the sequence-sharded gradients are summed once per step (dp) and
          // once per micro-batch (ZeRO-2).
          const std::string dpt = technique;
          if (sp && (dpt == "dp" || dpt == "zero2")) c.micro_batches = 2;
          out.push_back(c);
        }
    }
  }
  return out;
}

TensorResult run_tensor_case(Communicator& comm, const TensorCase& c) {
  const int n = comm.size();
  TensorResult r;
  if (n % c.tp != 0)
    throw UsageError(c.name() + ": a tensor-parallel size of " + std::to_string(c.tp) + " does not divide " +
                     std::to_string(n) + " ranks");
  parallel::GridSpec spec;
  spec.set(Axis::tp, c.tp).set(Axis::dp, n / c.tp);
  parallel::Grid grid(comm, spec);
  parallel::TensorParallelConfig tc;
  tc.sequence_parallel = c.technique->sequence_parallel;
  tc.fault = c.fault;
  const parallel::TensorParallel tp(grid.group(Axis::tp), tc);
  Communicator& dp = grid.group(Axis::dp);

  const model::GptConfig config = tensor_case_model(model_type(c));
  const std::int64_t rows = global_batch(c, dp.size());
  const SingleDeviceRun reference = single_device_gpt(comm, config, rows, c.steps);
  const std::int64_t terms = tolerance::tensor_parallel_reduction_terms(rows * config.sequence, config.hidden, config.vocabulary);
  r.bound = tolerance::training_relative_bound(config.dtype, terms, n, c.steps);
  r.gradient_bound = tolerance::gradient_relative_bound(config.dtype, terms, n);
  if (is_mixed(c)) {
    const double noise = tolerance::tensor_parallel_half_noise(config.dtype, terms, n, c.tp, config.layers);
    r.gradient_bound = tolerance::kTrainingConditioning * noise;
    r.bound = std::max(tolerance::linear_training_bound(noise, c.steps), tolerance::sign_flip_bound(noise));
  }
  const double scale = case_loss_scale(model_type(c));
  const parallel::BatchSource source = parallel::batches_of(config);
  const parallel::RowRange mine = parallel::batch_shard(rows, dp.rank(), dp.size());
  std::string failures;
  std::vector<std::string> disagreeing;

  // The first step's loss and gradients, from the model alone: each dp rank its rows, the
  // gradients summed over dp (and the sequence-sharded ones over tp), then gathered.
  {
    auto m = parallel::build_tensor_parallel_gpt(config, tp);
    const std::int64_t expected = theory::tensor_parallel_parameters_per_rank(config, c.tp);
    if (m->parameter_count() != expected)
      failures += "holds " + std::to_string(m->parameter_count()) + " parameters, formula " + std::to_string(expected) + "; ";
    m->to(comm.memory_space());
    const FirstStep first = first_step(*m, source, mine, rows, dp, dp, &tp, scale, &disagreeing);
    const Difference d = compare(first.gradients, reference.gradients, zeros_like(reference.gradients));
    r.gradient_error = d.parameters;
    r.loss_error = std::abs(first.loss - reference.losses[0]) / std::abs(reference.losses[0]);
    r.compared = "gradients " + format(d.parameters);
    if (!(d.parameters <= r.gradient_bound))
      failures += "gradients differ beyond " + format(r.gradient_bound) + " (largest at " + d.where + "); ";
  }

  // Training through the grid: the tensor-parallel model with the data-parallel technique.
  auto m = parallel::build_tensor_parallel_gpt(config, tp);
  m->to(comm.memory_space());
  auto optimizer = make_optimizer(c);
  parallel::DataParallelConfig dc;
  dc.zero_stage = c.data_parallel->zero_stage;
  dc.global_batch = rows;
  dc.micro_batches = c.micro_batches;
  dc.bucket_bytes = 2048;  // several buckets even for this small model
  if (is_mixed(c)) {
    dc.precision = parallel::Precision::mixed;
    dc.loss_scaling = case_loss_scaling(model_type(c));
  }
  auto trainer = parallel::make_tensor_parallel_trainer(grid, tp, *m, *optimizer, dc);
  for (int step = 0; step < c.steps; ++step) {
    if (step + 1 == c.steps) tp.reset_counters();
    const parallel::StepStats stats = trainer->step(source, static_cast<std::uint64_t>(step));
    if (stats.skipped) failures += "step " + std::to_string(step) + " skipped: the gradients overflowed at the case's loss scale; ";
    const double loss = stats.loss;
    r.loss_error = std::max(r.loss_error, std::abs(loss - reference.losses[static_cast<std::size_t>(step)]) /
                                              std::abs(reference.losses[static_cast<std::size_t>(step)]));
  }
  if (!(r.loss_error <= r.gradient_bound)) failures += "a step's loss differs by " + format(r.loss_error) + "; ";
  const parallel::ParameterValues values =
      parallel::gather_tensor_parallel(trainer->gathered(is_mixed(c)), m->parameters(), tp.group(), &disagreeing);
  const Difference d = compare(values, reference.values, reference.origin);
  r.error = std::max({r.gradient_error, d.parameters, d.state});
  r.compared += ", loss " + format(r.loss_error) + ", parameters " + format(d.parameters) + ", state " + format(d.state);
  failures += training_failures(d, r.bound, disagreeing);

  // Bytes of the last step in the tp group, per layer, against the formula.
  std::map<std::string, double> measured = tp.bytes_by_layer();
  const double e = static_cast<double>(size_of(config.dtype));
  const theory::TensorParallelBytes formula = c.technique->tensor_bytes_per_rank(config, mine.rows, c.tp, e, static_cast<double>(theory::statistic_bytes(config.dtype)));
  std::string wrong;
  auto check = [&](const std::string& layer, double want) {
    if (std::llround(measured[layer]) != std::llround(want))
      wrong += layer + " " + format(measured[layer]) + " (formula " + format(want) + ") ";
  };
  check("embedding", formula.embedding);
  for (int i = 0; i < config.layers; ++i) check("blocks." + std::to_string(i), formula.block);
  check("lm_head", formula.head);
  check("loss", formula.loss);
  // The sequence-sharded gradients' sums: once per step, or every micro-batch under ZeRO-2/3.
  const double gradient_sums =
      c.technique->sequence_parallel ? (c.data_parallel->zero_stage >= 2 ? c.micro_batches : 1) : 0;
  const double gradient_bytes = gradient_sums * theory::sequence_parallel_gradient_bytes_per_rank(config, c.tp, e);
  check(parallel::kSequenceShardedGradientsSite, gradient_bytes);
  for (const auto& [layer, bytes] : measured) r.bytes_sent += bytes;
  r.bytes_formula = formula.total(config.layers) + gradient_bytes;
  failures += failed_on_any_rank(comm, "tensor-parallel bytes differ from the formula", wrong);
  r.bytes_sent = max_over_ranks(comm, r.bytes_sent);
  r.bytes_formula = max_over_ranks(comm, r.bytes_formula);

  // Every rank must agree on the verdict (a check may fail on one rank only).
  agree_on(comm, failures, r.compared, r);
  return r;
}


// The family `parity check` runs (family.hpp).
const RegisteredFamily kTensorFamily{FamilyDefinition<TensorCase, TensorResult>{
    .table = &kTensorCasesTable, .label = "tensor-parallel", .order = 30, .grid = tensor_grid, .run = run_tensor_case,
    .columns =
        [](record::Table& t, const CaseContext& context, const TensorCase& c, const TensorResult& r) {
          t.put({{"technique", c.technique->name}, {"data_parallel", c.data_parallel->name}, {"tp", c.tp},
                 {"dp", context.world.size() / c.tp}, {"sequence_parallel", c.technique->sequence_parallel ? 1 : 0}});
          add_run_columns(t, context.world, c.precision, c.steps);
          t.put({{"micro_batches", c.micro_batches}, {"error", r.error}, {"bound", r.bound},
                 {"gradient_error", r.gradient_error}, {"gradient_bound", r.gradient_bound},
                 {"loss_error", r.loss_error}, {"tp_bytes_sent", r.bytes_sent},
                 {"formula_tp_bytes_sent", r.bytes_formula}});
        }}};

}  // namespace parity::cases
