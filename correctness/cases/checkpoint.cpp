// Checkpointing conformance cases (see checkpoint.hpp): the same steps with and without
// recomputation, compared bit for bit; alone, the tracker's bytes and the ops' FLOPs against
// the formulas.
#include "correctness/cases/checkpoint.hpp"

#include <bit>
#include <memory>

#include "correctness/cases/compare.hpp"
#include "correctness/cases/family.hpp"
#include "correctness/cases/pipeline.hpp"
#include "correctness/cases/training.hpp"
#include "reference/core/error.hpp"
#include "reference/model/layer.hpp"
#include "reference/model/model.hpp"
#include "reference/ops/flops.hpp"
#include "reference/parallel/checkpoint/checkpoint.hpp"
#include "reference/parallel/grid.hpp"
#include "reference/parallel/pipeline/schedule.hpp"
#include "reference/parallel/tensor/tensor_parallel.hpp"

namespace parity::cases {

namespace {

DataType type_of(const CheckpointCase& c) { return c.precision == "float64" ? DataType::float64 : DataType::float32; }

// The cases' GPT with four blocks: two sqrt segments of two, every2 recomputes blocks 0 and 2.
// The moe composition makes blocks 1 and 3 mixtures of experts (top-2 of 4 with capacity 1.25,
// so tokens are dropped) with the balancing loss and the router z-loss on: a recomputed
// forward must route the same tokens and must not add its auxiliary losses a second time.
model::GptConfig case_model(DataType dtype, const std::string& composition = "alone") {
  model::GptConfig g = case_gpt_config(dtype);
  g.layers = 4;
  if (composition == "moe") {
    g.moe.layers = {1, 3};
    g.moe.experts = 4;
    g.moe.top_k = 2;
    g.moe.capacity_factor = 1.25;
    g.moe.balance_coefficient = 1e-2;
    g.moe.z_loss_coefficient = 1e-3;
  }
  return g;
}

// Rows per step: alone a batch of its own; with data parallelism uneven shards (2 dp + 1).
std::int64_t rows_of(const CheckpointCase& c, int data_parallel) {
  return c.composition == "alone" || c.composition == "moe" ? 5 : 2 * data_parallel + 1;
}

// The budget that keeps half the blocks alone (the largest peak that does).
std::string half_budget_policy(DataType dtype) {
  const model::GptConfig config = case_model(dtype);
  const CheckpointCase alone;
  const theory::BlockActivationBytes bytes = theory::gpt_block_activation_bytes(config, rows_of(alone, 1));
  const auto layout = theory::budget_layout(config.layers, config.layers / 2);
  return "budget" + std::to_string(theory::checkpoint_activation_bytes(layout, bytes).peak);
}

// What one run leaves to compare, and what the probe and the FLOP counter measured.
struct Run {
  std::vector<double> losses;
  parallel::ParameterValues values;     // parameters and optimizer state this rank holds (ZeRO: gathered)
  parallel::ParameterValues gradients;  // the last step's gradients this rank holds
  std::int64_t stored = -1, peak = -1, flops = 0;
  std::size_t pending_auxiliary = 0;  // forwards' auxiliary losses left in the model (alone)
  theory::CheckpointLayout layout;
};

parallel::ParameterValues held_gradients(model::Model& m) {
  parallel::ParameterValues out;
  for (model::Parameter* p : m.parameters())
    if (p->grad.defined()) {
      out.names.push_back(p->name);
      out.values.push_back(p->grad.to_vector());
      out.state.emplace_back();
    }
  return out;
}

parallel::CheckpointPolicy policy_of(const std::string& name, const std::string& fault) {
  parallel::CheckpointPolicy p = parallel::parse_checkpoint_policy(name);
  p.fault = fault;
  return p;
}

Run train_alone(Communicator& comm, const CheckpointCase& c, const parallel::CheckpointPolicy& policy) {
  const model::GptConfig config = case_model(type_of(c), c.composition);
  const std::int64_t rows = rows_of(c, 1);
  Run run;
  auto m = model::build_gpt(config);
  run.layout = parallel::apply_checkpoint_policy(*m, config, policy, rows);
  m->to(comm.memory_space());
  auto optimizer = case_adamw(config.dtype);
  const parallel::ActivationProbe probe(*m);
  const parallel::BatchSource source = parallel::batches_of(config);
  for (int step = 0; step < c.steps; ++step) {
    const ops::FlopScope flops;
    run.losses.push_back(model::train_step(*m, *optimizer, source(static_cast<std::uint64_t>(step), 0, rows, rows).to(m->space()),
                                           static_cast<std::uint64_t>(step)));
    run.flops = flops.matmul();
  }
  run.values = values_of(*m, optimizer.get());
  run.gradients = held_gradients(*m);
  for (const model::Layer* layer : m->layers()) run.pending_auxiliary += layer->pending_auxiliary_losses();
  run.stored = probe.stored();
  run.peak = probe.peak();
  return run;
}

// Steps through a trainer: the losses, then what it holds.
void train(parallel::Trainer& trainer, model::Model& m, const model::GptConfig& config, int steps, Run& run) {
  const parallel::BatchSource source = parallel::batches_of(config);
  for (int step = 0; step < steps; ++step) run.losses.push_back(trainer.step(source, static_cast<std::uint64_t>(step)).loss);
  run.values = trainer.gathered(false);
  run.gradients = held_gradients(m);
}

Run train_zero3(Communicator& comm, const CheckpointCase& c, const parallel::CheckpointPolicy& policy) {
  const model::GptConfig config = case_model(type_of(c));
  Run run;
  auto m = model::build_gpt(config);
  parallel::DataParallelConfig dc;
  dc.zero_stage = 3;
  dc.global_batch = rows_of(c, comm.size());
  dc.bucket_bytes = 2048;
  run.layout = parallel::apply_checkpoint_policy(*m, config, policy, parallel::batch_shard(dc.global_batch, 0, comm.size()).rows);
  m->to(comm.memory_space());
  auto optimizer = case_adamw(config.dtype);
  auto trainer = parallel::make_trainer(comm, *m, *optimizer, dc);
  train(*trainer, *m, config, c.steps, run);
  return run;
}

Run train_tensor_parallel(Communicator& comm, const CheckpointCase& c, const parallel::CheckpointPolicy& policy) {
  const model::GptConfig config = case_model(type_of(c));
  parallel::GridSpec spec;
  spec.set(parallel::Axis::tp, 2).set(parallel::Axis::dp, comm.size() / 2);
  parallel::Grid grid(comm, spec);
  parallel::TensorParallelConfig tc;
  tc.sequence_parallel = true;
  const parallel::TensorParallel tp(grid.group(parallel::Axis::tp), tc);
  Communicator& dp = grid.group(parallel::Axis::dp);
  Run run;
  auto m = parallel::build_tensor_parallel_gpt(config, tp);
  parallel::DataParallelConfig dc;
  dc.global_batch = rows_of(c, dp.size());
  dc.bucket_bytes = 2048;
  run.layout = parallel::apply_checkpoint_policy(*m, config, policy, parallel::batch_shard(dc.global_batch, 0, dp.size()).rows);
  m->to(comm.memory_space());
  auto optimizer = case_adamw(config.dtype);
  auto trainer = parallel::make_tensor_parallel_trainer(grid, tp, *m, *optimizer, dc);
  train(*trainer, *m, config, c.steps, run);
  return run;
}

Run train_pipeline(Communicator& comm, const CheckpointCase& c, const parallel::CheckpointPolicy& policy) {
  PipelineCase pc;
  pc.schedule = c.schedule;
  pc.micro_batches = 2 * comm.size();
  pc.precision = c.precision;
  pc.steps = c.steps;
  pc.checkpoint = policy.name();
  pc.checkpoint_fault = policy.fault;
  const std::unique_ptr<PipelineSetup> setup = setup_pipeline_case(comm, pc);
  Run run;
  train(*setup->trainer, *setup->model, setup->config, c.steps, run);
  return run;
}

Run train_case(Communicator& comm, const CheckpointCase& c, const parallel::CheckpointPolicy& policy) {
  if (c.composition == "alone" || c.composition == "moe") return train_alone(comm, c, policy);
  if (c.composition == "zero3") return train_zero3(comm, c, policy);
  if (c.composition == "tp_sp") {
    if (comm.size() % 2 != 0)
      throw UsageError(c.name() + ": tensor parallelism over 2 ranks needs an even world, not " + std::to_string(comm.size()));
    return train_tensor_parallel(comm, c, policy);
  }
  if (c.composition == "pp") return train_pipeline(comm, c, policy);
  throw UsageError("checkpoint case: unknown composition '" + c.composition + "' (known: alone, moe, zero3, tp_sp, pp)");
}

// Elements of a and b whose bits differ (float32 values widen to float64 exactly, so equal
// doubles' bits are equal floats' bits); the first such parameter named in `where`.
std::int64_t differing_bits(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return static_cast<std::int64_t>(std::max(a.size(), b.size()));
  std::int64_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += std::bit_cast<std::uint64_t>(a[i]) != std::bit_cast<std::uint64_t>(b[i]);
  return n;
}

std::int64_t differing_bits(const parallel::ParameterValues& a, const parallel::ParameterValues& b, std::string& where) {
  if (a.names != b.names) {
    if (where.empty()) where = "the parameters held";
    return static_cast<std::int64_t>(std::max(a.names.size(), b.names.size()));
  }
  std::int64_t n = 0;
  for (std::size_t i = 0; i < a.names.size(); ++i) {
    std::int64_t here = differing_bits(a.values[i], b.values[i]);
    for (std::size_t s = 0; s < a.state[i].size() && s < b.state[i].size(); ++s) here += differing_bits(a.state[i][s], b.state[i][s]);
    if (here > 0 && where.empty()) where = a.names[i];
    n += here;
  }
  return n;
}

}  // namespace

std::string CheckpointCase::name() const {
  return "checkpoint/" + composition + (composition == "pp" ? "/" + schedule : "") + "/" + policy + "/" + precision +
         (fault.empty() ? "" : "/fault-" + fault);
}

std::vector<CheckpointCase> checkpoint_grid(int world_size) {
  const int n = world_size;
  std::vector<CheckpointCase> out;
  const auto add = [&](const std::string& composition, const std::string& schedule) {
    for (const DataType dtype : {DataType::float64, DataType::float32})
      for (const std::string& policy : {std::string("full"), std::string("every2"), std::string("sqrt"),
                                        std::string("selective"), half_budget_policy(dtype)}) {
        if (composition == "moe" && policy.rfind("budget", 0) == 0) continue;  // the budget's bytes are a dense block's
        const std::string precision(name_of(dtype));
        CheckpointCase c;
        c.composition = composition;
        c.schedule = schedule;
        c.policy = policy;
        c.precision = precision;
        out.push_back(c);
      }
  };
  add("alone", "");
  add("moe", "");
  if (n >= 2) add("zero3", "");
  if (n % 2 == 0) add("tp_sp", "");
  if (n >= 2 && n <= 4)
    for (const std::string& schedule : parallel::pipeline::schedule_names()) add("pp", schedule);
  return out;
}

CheckpointResult run_checkpoint_case(Communicator& comm, const CheckpointCase& c) {
  CheckpointResult r;
  const Run plain = train_case(comm, c, parallel::CheckpointPolicy{});
  const std::int64_t recomputed_before = parallel::recomputed_block_forwards();
  const Run checkpointed = train_case(comm, c, policy_of(c.policy, c.fault));
  const std::int64_t recomputed = parallel::recomputed_block_forwards() - recomputed_before;
  r.recomputed_blocks = checkpointed.layout.recomputed_blocks();
  std::string failures, where;
  std::int64_t differing = differing_bits(plain.values, checkpointed.values, where) +
                           differing_bits(plain.gradients, checkpointed.gradients, where);
  const std::int64_t losses = differing_bits(plain.losses, checkpointed.losses);
  if (losses > 0 && where.empty()) where = "a step's loss";
  differing += losses;
  r.differing = static_cast<std::int64_t>(sum_over_ranks(comm, static_cast<double>(differing)));
  r.compared = std::to_string(plain.values.names.size()) + " parameters and their state, " +
               std::to_string(plain.gradients.names.size()) + " gradients and " + std::to_string(plain.losses.size()) +
               " losses per rank, bit for bit: " + std::to_string(r.differing) + " differ";
  if (differing > 0) failures += "differs from the run without recompute (first at " + where + "); ";
  // Segments the layout holds must have been recomputed, once per micro-batch pass: none is
  // skipped silently.
  if (checkpointed.layout.recomputed_blocks() > 0 && recomputed == 0)
    failures += "the layout recomputes " + std::to_string(checkpointed.layout.recomputed_blocks()) +
                " blocks but none was recomputed; ";
  // A recomputed forward's auxiliary losses (MoE) are dropped, not left for a pass to come.
  if (checkpointed.pending_auxiliary > 0)
    failures += std::to_string(checkpointed.pending_auxiliary) + " forwards' auxiliary losses left in the model; ";

  if (c.composition == "alone") {
    const model::GptConfig config = case_model(type_of(c));
    const std::int64_t rows = rows_of(c, 1);
    const theory::BlockActivationBytes bytes = theory::gpt_block_activation_bytes(config, rows);
    const theory::CheckpointActivationBytes formula = theory::checkpoint_activation_bytes(checkpointed.layout, bytes);
    const theory::CheckpointActivationBytes formula_plain = theory::checkpoint_activation_bytes(plain.layout, bytes);
    r.stored_bytes = checkpointed.stored;
    r.formula_stored_bytes = formula.stored;
    r.peak_bytes = checkpointed.peak;
    r.formula_peak_bytes = formula.peak;
    r.recompute_flops = checkpointed.flops - plain.flops;
    r.formula_recompute_flops = theory::recompute_flops(checkpointed.layout, rows, config.sequence, config.hidden);
    const auto mismatch = [&](const std::string& what, std::int64_t measured, std::int64_t want) {
      if (measured != want) failures += what + " " + std::to_string(measured) + " (formula " + std::to_string(want) + "); ";
    };
    mismatch("stored activation bytes", r.stored_bytes, r.formula_stored_bytes);
    mismatch("peak activation bytes", r.peak_bytes, r.formula_peak_bytes);
    mismatch("without recompute, stored activation bytes", plain.stored, formula_plain.stored);
    mismatch("without recompute, peak activation bytes", plain.peak, formula_plain.peak);
    mismatch("recompute FLOPs", r.recompute_flops, r.formula_recompute_flops);
    r.compared += "; blocks' activation bytes stored " + std::to_string(r.stored_bytes) + ", peak " +
                  std::to_string(r.peak_bytes) + " (without recompute " + std::to_string(plain.stored) + ", " +
                  std::to_string(plain.peak) + "), recompute FLOPs " + std::to_string(r.recompute_flops);
  }
  r.passed = agreed_verdict(comm, failures, r.compared, r.message);
  return r;
}


// The family `parity check` runs (family.hpp).
const RegisteredFamily kCheckpointFamily{FamilyDefinition<CheckpointCase, CheckpointResult>{
    .table = &kCheckpointCasesTable, .label = "activation checkpointing", .order = 60,
    .grid = checkpoint_grid, .run = run_checkpoint_case,
    .columns =
        [](record::Table& t, const CaseContext& context, const CheckpointCase& c, const CheckpointResult& r) {
          t.put({{"policy", c.policy}, {"composition", c.composition},
                 {"schedule", c.composition == "pp" ? c.schedule : ""}});
          add_run_columns(t, context.world, c.precision, c.steps);
          t.put({{"recomputed_blocks", r.recomputed_blocks}, {"differing", r.differing},
                 {"stored_bytes", r.stored_bytes}, {"formula_stored_bytes", r.formula_stored_bytes},
                 {"peak_bytes", r.peak_bytes}, {"formula_peak_bytes", r.formula_peak_bytes},
                 {"recompute_flops", r.recompute_flops}, {"formula_recompute_flops", r.formula_recompute_flops}});
        }}};

}  // namespace parity::cases
