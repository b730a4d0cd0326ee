// parity check: the conformance cases of correctness/cases/, run on the ranks given and
// recorded case by case.
#include <cstdio>

#include "bench/cli/filter.hpp"
#include "bench/cli/progress.hpp"
#include "bench/commands/commands.hpp"
#include "correctness/cases/checkpoint.hpp"
#include "correctness/cases/collectives.hpp"
#include "correctness/cases/moe.hpp"
#include "correctness/cases/pipeline.hpp"
#include "correctness/cases/tensor.hpp"
#include "correctness/cases/training.hpp"
#include "reference/core/error.hpp"

namespace parity::cli {
namespace {
struct Selected {
  std::vector<cases::CollectiveCase> collectives;
  std::vector<cases::TrainingCase> training;
  std::vector<cases::TensorCase> tensor;
  std::vector<cases::PipelineCase> pipeline;
  std::vector<cases::MoeCase> moe;
  std::vector<cases::CheckpointCase> checkpoint;
};

// --resume: a case's row is found by its name.
std::string case_key(const record::Table& table, std::size_t row) { return table.get_str("case")[row]; }

// Takes the case's row from the resumed file when it has it (counting it when it failed);
// false when the case must run.
bool resumed_case(Session& session, const std::string& group, const std::string& name, record::Table& table,
                  std::size_t& failed) {
  const Session::Restored r = session.restore_row(group, name, case_key, table, [](const record::Table& from, std::size_t row) {
    return from.get_i64("passed")[row];
  });
  if (r.found && r.value == 0) ++failed;
  return r.found;
}

Selected selected_cases(int world_size, const CheckOptions& options) {
  const NameFilter filter(options.filter);
  Selected out;
  for (const auto& c : cases::conformance_grid(world_size, {options.include_large}))
    if (filter.matches(c.name())) out.collectives.push_back(c);
  for (const auto& c : cases::training_grid(world_size))
    if (filter.matches(c.name())) out.training.push_back(c);
  for (const auto& c : cases::tensor_grid(world_size))
    if (filter.matches(c.name())) out.tensor.push_back(c);
  for (const auto& c : cases::pipeline_grid(world_size))
    if (filter.matches(c.name())) out.pipeline.push_back(c);
  for (const auto& c : cases::moe_grid(world_size))
    if (filter.matches(c.name())) out.moe.push_back(c);
  for (const auto& c : cases::checkpoint_grid(world_size))
    if (filter.matches(c.name())) out.checkpoint.push_back(c);
  if (out.collectives.empty() && out.training.empty() && out.tensor.empty() && out.pipeline.empty() && out.moe.empty() &&
      out.checkpoint.empty())
    throw UsageError("--filter '" + options.filter + "' matches no case (parity check --list shows them)");
  return out;
}

// Runs the selected cases of one kind in order, each case's row taken from a resumed file when
// it has it, and journaled as it finishes; `run` runs a case, `fill` writes its row.
template <typename Case, typename Run, typename Fill>
void run_cases(Session& session, const std::vector<Case>& selected, const std::string& group, const char* what,
               record::Table& t, CheckOutcome& outcome, Run run, Fill fill) {
  if (selected.empty()) return;
  // "check training", "check tensor", "check moe": the kind, the group's last word.
  Progress progress("check " + group.substr(group.rfind('/') + 1), selected.size(),
                    session.is_root() && !session.options().quiet);
  std::size_t failed = 0;
  for (std::size_t i = 0; i < selected.size(); ++i) {
    const Case& c = selected[i];
    progress.update(i, c.name());
    if (resumed_case(session, group, c.name(), t, failed)) continue;
    const auto r = run(c);
    if (!r.passed) {
      ++failed;
      if (session.is_root()) std::fprintf(stderr, "FAILED %s: %s\n", c.name().c_str(), r.message.c_str());
    }
    t.str("case").push_back(c.name());
    fill(c, r);
    t.i64("passed").push_back(r.passed ? 1 : 0);
    t.str("message").push_back(r.message);
    session.record_rows(group, t, t.rows() - 1);
  }
  progress.finish();
  outcome.failed += failed;
  if (session.is_root())
    std::printf("# %s conformance: %zu cases at %d ranks, %zu passed, %zu failed\n", what, selected.size(),
                session.world().size(), selected.size() - failed, failed);
}

// The columns that say where and how long a model case ran, in the order the tables keep them.
void add_run_columns(record::Table& t, Communicator& comm, const std::string& precision, int steps) {
  t.str("precision").push_back(precision);
  t.str("device").emplace_back(comm.memory_space() == MemorySpace::cuda ? "cuda" : "cpu");
  t.i64("world_size").push_back(comm.size());
  t.i64("steps").push_back(steps);
}

void run_training_cases(Session& session, const std::vector<cases::TrainingCase>& selected, CheckOutcome& outcome) {
  Communicator& comm = session.world();
  record::Table& t = outcome.training;
  std::string device;
  run_cases(
      session, selected, "/check/training", "training", t, outcome,
      [&](const cases::TrainingCase& c) {
        Communicator& where = cases::runs_on_host(c) ? session.host_world() : comm;
        device = where.memory_space() == MemorySpace::cuda ? "cuda" : "cpu";
        return cases::run_training_case(where, c);
      },
      [&](const cases::TrainingCase& c, const cases::TrainingResult& r) {
        t.str("technique").push_back(c.technique->name);
        t.str("optimizer").push_back(c.optimizer);
        t.str("precision").push_back(c.precision);
        t.str("model").push_back(c.model);
        t.str("device").push_back(device);
        t.i64("world_size").push_back(comm.size());
        t.i64("steps").push_back(c.steps);
        t.i64("global_batch").push_back(c.global_batch);
        t.i64("micro_batches").push_back(c.micro_batches);
        t.f64("error").push_back(r.error);
        t.f64("bound").push_back(r.bound);
        t.f64("bytes_sent", "B").push_back(r.bytes_sent);
        t.f64("formula_bytes_sent", "B").push_back(r.bytes_formula);
        t.f64("max_staleness").push_back(r.max_staleness);
        // Mixed precision against float64 training from the same start; NaN otherwise.
        const double nan = std::numeric_limits<double>::quiet_NaN();
        t.f64("float64_error").push_back(r.float64_error >= 0 ? r.float64_error : nan);
        t.f64("float64_bound").push_back(r.float64_error >= 0 ? r.float64_bound : nan);
      });
}

void run_tensor_cases(Session& session, const std::vector<cases::TensorCase>& selected, CheckOutcome& outcome) {
  Communicator& comm = session.world();
  record::Table& t = outcome.tensor;
  run_cases(
      session, selected, "/check/tensor", "tensor-parallel", t, outcome,
      [&](const cases::TensorCase& c) { return cases::run_tensor_case(comm, c); },
      [&](const cases::TensorCase& c, const cases::TensorResult& r) {
        t.str("technique").push_back(c.technique->name);
        t.str("data_parallel").push_back(c.data_parallel->name);
        t.i64("tp").push_back(c.tp);
        t.i64("dp").push_back(comm.size() / c.tp);
        t.i64("sequence_parallel").push_back(c.technique->sequence_parallel ? 1 : 0);
        add_run_columns(t, comm, c.precision, c.steps);
        t.i64("micro_batches").push_back(c.micro_batches);
        t.f64("error").push_back(r.error);
        t.f64("bound").push_back(r.bound);
        t.f64("gradient_error").push_back(r.gradient_error);
        t.f64("gradient_bound").push_back(r.gradient_bound);
        t.f64("loss_error").push_back(r.loss_error);
        t.f64("tp_bytes_sent", "B").push_back(r.bytes_sent);
        t.f64("formula_tp_bytes_sent", "B").push_back(r.bytes_formula);
      });
}

void run_moe_cases(Session& session, const std::vector<cases::MoeCase>& selected, CheckOutcome& outcome) {
  Communicator& comm = session.world();
  record::Table& t = outcome.moe;
  run_cases(
      session, selected, "/check/moe", "mixture-of-experts", t, outcome,
      [&](const cases::MoeCase& c) { return cases::run_moe_case(comm, c); },
      [&](const cases::MoeCase& c, const cases::MoeResult& r) {
        t.i64("ep").push_back(c.ep);
        t.i64("tp").push_back(c.tp);
        t.i64("dp").push_back(comm.size() / (c.ep * c.tp));
        t.i64("experts").push_back(c.experts);
        t.i64("top_k").push_back(c.router == "expert_choice" ? 0 : c.top_k);
        t.f64("capacity_factor").push_back(c.capacity_factor);
        t.str("router").push_back(c.router);
        t.str("all_to_all").push_back(c.all_to_all);
        add_run_columns(t, comm, c.precision, c.steps);
        t.f64("error").push_back(r.error);
        t.f64("bound").push_back(r.bound);
        t.f64("loss_error").push_back(r.loss_error);
        t.f64("loss_bound").push_back(r.loss_bound);
        t.f64("gradient_error").push_back(r.gradient_error);
        t.i64("decisions").push_back(r.decisions);
        t.i64("dropped").push_back(r.dropped);
        t.f64("dispatch_bytes", "B").push_back(r.dispatch_bytes);
        t.f64("formula_dispatch_bytes", "B").push_back(r.dispatch_formula);
      });
}

void run_checkpoint_cases(Session& session, const std::vector<cases::CheckpointCase>& selected, CheckOutcome& outcome) {
  Communicator& comm = session.world();
  record::Table& t = outcome.checkpoint;
  run_cases(
      session, selected, "/check/checkpoint", "activation checkpointing", t, outcome,
      [&](const cases::CheckpointCase& c) { return cases::run_checkpoint_case(comm, c); },
      [&](const cases::CheckpointCase& c, const cases::CheckpointResult& r) {
        t.str("policy").push_back(c.policy);
        t.str("composition").push_back(c.composition);
        t.str("schedule").push_back(c.composition == "pp" ? c.schedule : "");
        add_run_columns(t, comm, c.precision, c.steps);
        t.i64("recomputed_blocks").push_back(r.recomputed_blocks);
        t.i64("differing").push_back(r.differing);
        t.i64("stored_bytes", "B").push_back(r.stored_bytes);
        t.i64("formula_stored_bytes", "B").push_back(r.formula_stored_bytes);
        t.i64("peak_bytes", "B").push_back(r.peak_bytes);
        t.i64("formula_peak_bytes", "B").push_back(r.formula_peak_bytes);
        t.i64("recompute_flops").push_back(r.recompute_flops);
        t.i64("formula_recompute_flops").push_back(r.formula_recompute_flops);
      });
}

}  // namespace

void run_pipeline_cases(Session& session, const std::vector<cases::PipelineCase>& selected, CheckOutcome& outcome) {
  Communicator& comm = session.world();
  record::Table& t = outcome.pipeline;
  run_cases(
      session, selected, "/check/pipeline", "pipeline", t, outcome,
      [&](const cases::PipelineCase& c) { return cases::run_pipeline_case(comm, c); },
      [&](const cases::PipelineCase& c, const cases::TrainingResult& r) {
        t.str("schedule").push_back(c.schedule);
        t.i64("chunks").push_back(c.schedule == "interleaved" ? c.chunks : 1);
        t.i64("data_parallel").push_back(c.data_parallel);
        t.i64("micro_batches").push_back(c.micro_batches);
        add_run_columns(t, comm, c.precision, c.steps);
        t.f64("error").push_back(r.error);
        t.f64("bound").push_back(r.bound);
        t.f64("first_loss").push_back(r.first_loss);
        t.f64("last_loss").push_back(r.last_loss);
      });
}

std::vector<std::string> check_case_names(int world_size, const CheckOptions& options) {
  std::vector<std::string> names;
  const Selected selected = selected_cases(world_size, options);
  for (const auto& c : selected.collectives) names.push_back(c.name());
  for (const auto& c : selected.training) names.push_back(c.name());
  for (const auto& c : selected.tensor) names.push_back(c.name());
  for (const auto& c : selected.pipeline) names.push_back(c.name());
  for (const auto& c : selected.moe) names.push_back(c.name());
  for (const auto& c : selected.checkpoint) names.push_back(c.name());
  return names;
}

void write_check_tables(Session& session, const CheckOutcome& outcome) {
  if (!session.is_root()) return;
  if (outcome.cases.rows()) session.results().write_table("/check/collectives", outcome.cases);
  if (outcome.training.rows()) session.results().write_table("/check/training", outcome.training);
  if (outcome.tensor.rows()) session.results().write_table("/check/tensor", outcome.tensor);
  if (outcome.pipeline.rows()) session.results().write_table("/check/pipeline", outcome.pipeline);
  if (outcome.moe.rows()) session.results().write_table("/check/moe", outcome.moe);
  if (outcome.checkpoint.rows()) session.results().write_table("/check/checkpoint", outcome.checkpoint);
}

CheckOutcome run_check(Session& session, const CheckOptions& options) {
  Communicator& comm = session.world();
  const Selected chosen = selected_cases(comm.size(), options);
  const auto& selected = chosen.collectives;
  std::size_t largest = 0;
  for (const auto& c : selected) largest = std::max(largest, cases::case_bytes_per_rank(c, comm.size()));
  session.check_memory(largest, "the conformance cases");
  session.maybe_inject_stall();

  CheckOutcome outcome;
  record::Table& t = outcome.cases;
  Progress progress("check", selected.size(), session.is_root() && !session.options().quiet);
  for (std::size_t i = 0; i < selected.size(); ++i) {
    const auto& c = selected[i];
    progress.update(i, c.name());
    if (resumed_case(session, "/check/collectives", c.name(), t, outcome.failed)) continue;
    const cases::CaseResult r = cases::run_case(comm, c, session.half());
    if (!r.passed) {
      ++outcome.failed;
      if (session.is_root()) std::fprintf(stderr, "FAILED %s: %s\n", c.name().c_str(), r.message.c_str());
    }
    t.str("case").push_back(c.name());
    t.str("collective").emplace_back(name_of(c.collective));
    t.str("algorithm").push_back(c.algorithm);
    t.str("dtype").emplace_back(name_of(c.dtype));
    t.str("redop").emplace_back(is_reducing(c.collective) ? name_of(c.op) : "none");
    t.i64("count").push_back(static_cast<std::int64_t>(c.count));
    t.i64("in_place").push_back(c.in_place ? 1 : 0);
    t.str("input").emplace_back(c.input == cases::InputKind::exact ? "exact" : "random");
    t.i64("world_size").push_back(comm.size());
    t.f64("max_abs_error").push_back(r.max_abs_error);
    t.f64("max_rel_error").push_back(r.max_rel_error);
    t.f64("tolerance").push_back(r.tolerance);
    t.i64("wrong").push_back(r.wrong);
    t.i64("guard_ok").push_back(r.guard_ok ? 1 : 0);
    t.i64("passed").push_back(r.passed ? 1 : 0);
    t.str("message").push_back(r.message);
    session.record_rows("/check/collectives", t, t.rows() - 1);
  }
  progress.finish();
  if (session.is_root() && !selected.empty())
    std::printf("# conformance: %zu cases at %d ranks, %zu passed, %zu failed\n", selected.size(), comm.size(),
                selected.size() - outcome.failed, outcome.failed);
  run_training_cases(session, chosen.training, outcome);
  run_tensor_cases(session, chosen.tensor, outcome);
  run_pipeline_cases(session, chosen.pipeline, outcome);
  run_moe_cases(session, chosen.moe, outcome);
  run_checkpoint_cases(session, chosen.checkpoint, outcome);
  return outcome;
}

}  // namespace parity::cli
