// Mixture-of-experts conformance cases (see moe.hpp).
#include "correctness/cases/moe.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>

#include "correctness/cases/compare.hpp"
#include "correctness/cases/family.hpp"
#include "correctness/cases/training.hpp"
#include "reference/core/error.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/parallel/expert/expert_parallel.hpp"
#include "reference/parallel/tensor/tensor_parallel.hpp"
#include "reference/theory/moe.hpp"

namespace parity::cases {
namespace {

using parallel::Axis;

DataType model_type(const MoeCase& c) { return c.precision == "float64" ? DataType::float64 : DataType::float32; }

// A pass's decisions: its assignments' tokens, then their experts, then the dropped count.
std::vector<std::int64_t> decisions_of(const model::MoePassStats& s) {
  std::vector<std::int64_t> d = s.token;
  d.insert(d.end(), s.expert.begin(), s.expert.end());
  d.push_back(s.dropped);
  return d;
}

// One device running each data-parallel rank's rows as its own pass, as the routing groups of
// the parallel run are: every step's loss, each pass's decisions [step][rank], the parameters
// and state after the last step, and where they started.
struct MoeReference {
  std::vector<double> losses;
  parallel::ParameterValues gradients;  // of the first step
  std::vector<std::vector<std::vector<std::int64_t>>> decisions;
  std::int64_t dropped = 0;
  parallel::ParameterValues values, origin;
};
MoeReference single_device(const MoeCase& c, const model::GptConfig& config, std::int64_t rows, int data_ranks) {
  auto m = model::build_gpt(config);
  auto optimizer = case_adamw(model_type(c));
  model::MixtureOfExperts& moe = *model::moe_layers(*m).at(0);
  MoeReference r;
  r.origin = values_of(*m, optimizer.get());
  const parallel::BatchSource source = parallel::batches_of(config);
  for (int step = 0; step < c.steps; ++step) {
    m->zero_grad();
    const double loss = forward_backward_per_data_rank(*m, source, step, rows, data_ranks);
    if (step == 0) r.gradients = gradients_of(*m);
    optimizer->step(m->parameters());
    r.losses.push_back(loss);
    auto& step_decisions = r.decisions.emplace_back();
    for (const model::MoePassStats& s : moe.statistics()) {
      step_decisions.push_back(decisions_of(s));
      r.dropped += s.dropped;
    }
    moe.clear_statistics();
  }
  r.values = values_of(*m, optimizer.get());
  return r;
}

std::string cf_text(double cf) {
  if (std::isinf(cf)) return "inf";
  char text[32];
  std::snprintf(text, sizeof text, "%g", cf);
  return text;
}

}  // namespace

model::GptConfig moe_case_model(const MoeCase& c) {
  model::GptConfig g = case_gpt_config(model_type(c));  // the training cases' small GPT
  g.seed = 2718;
  g.moe.layers = model::every_kth_block(2, g.layers);  // block 1
  g.moe.experts = c.experts;
  g.moe.top_k = c.top_k;
  g.moe.capacity_factor = c.capacity_factor;
  g.moe.router = c.router;
  g.moe.expert_hidden = 24;
  g.moe.bias_update_rate = 1e-2;  // large enough to change decisions within the steps
  return g;
}

std::string MoeCase::name() const {
  std::string text = "moe/ep" + std::to_string(ep) + (tp > 1 ? "/tp" + std::to_string(tp) : "") + "/E" +
                     std::to_string(experts);
  if (router != "expert_choice") text += "/k" + std::to_string(top_k);
  text += "/cf" + cf_text(capacity_factor) + "/" + router + "/" + precision;
  if (all_to_all != "native") text += "/" + all_to_all;
  return text;
}

std::vector<MoeCase> moe_grid(int world_size) {
  struct Shape {
    int experts, k;
    double cf;
    const char* router;
    const char* precision;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const Shape shapes[] = {{4, 2, 1.25, "top_k", "float64"},         {8, 1, 1.0, "top_k", "float32"},
                          {4, 2, inf, "top_k", "float32"},           {8, 2, 1.0, "expert_choice", "float64"},
                          {4, 1, 1.25, "aux_free", "float64"},       {8, 2, inf, "aux_free", "float32"}};
  std::vector<MoeCase> out;
  const auto add = [&out](int ep, int tp, const Shape& s) {
    MoeCase c;
    c.ep = ep;
    c.tp = tp;
    c.experts = s.experts;
    c.top_k = s.k;
    c.capacity_factor = s.cf;
    c.router = s.router;
    c.precision = s.precision;
    out.push_back(c);
  };
  for (int ep : {1, 2, 4}) {
    if (world_size % ep != 0) continue;
    for (const Shape& s : shapes) add(ep, 1, s);
    if (ep > 1) {  // the reference all-to-all-v on point-to-point, once per ep
      MoeCase c;
      c.ep = ep;
      c.all_to_all = "pairwise";
      out.push_back(c);
    }
    if (world_size % (2 * ep) == 0)  // experts split over 2 tp ranks: a token-choice and an expert-choice shape
      for (const Shape& s : {shapes[0], shapes[3]}) add(ep, 2, s);
  }
  return out;
}

MoeResult run_moe_case(Communicator& comm, const MoeCase& c) {
  const int n = comm.size();
  MoeResult r;
  if (c.ep < 1 || c.tp < 1 || n % (c.ep * c.tp) != 0)
    throw UsageError(c.name() + ": expert- and tensor-parallel sizes of " + std::to_string(c.ep) + " x " +
                     std::to_string(c.tp) + " do not divide " + std::to_string(n) + " ranks");
  const model::GptConfig config = moe_case_model(c);
  config.validate();
  parallel::validate_expert_parallel(config, c.ep);
  parallel::validate_tensor_parallel(config, c.tp, false);
  parallel::GridSpec spec;
  spec.set(Axis::tp, c.tp).set(Axis::ep, c.ep).set(Axis::dp, n / (c.ep * c.tp));
  parallel::Grid grid(comm, spec);
  Communicator& data = grid.group(parallel::AxisSet{Axis::ep, Axis::dp});
  Communicator& ep_group = grid.group(Axis::ep);
  const std::int64_t rows = 2 * data.size() + 1;  // uneven shards
  const MoeReference reference = single_device(c, config, rows, data.size());
  const std::int64_t terms =
      tolerance::expert_parallel_reduction_terms(rows * config.sequence, config.moe.expert_hidden, config.vocabulary);
  r.bound = tolerance::training_relative_bound(config.dtype, terms, n, c.steps);
  r.loss_bound = tolerance::gradient_relative_bound(config.dtype, terms, n);
  std::string failures;

  parallel::ExpertParallelConfig ec;
  ec.all_to_all = c.all_to_all;
  if (c.fault == "wrong_rank") ec.fault = c.fault;
  parallel::ExpertParallel ep(ep_group, ec);
  const parallel::TensorParallel tp(grid.group(Axis::tp), parallel::TensorParallelConfig{});
  const model::MoeBuild build = ep.build(config.moe.experts, model::parse_moe_fault(c.fault == "wrong_rank" ? "" : c.fault));
  auto m = c.tp > 1 ? parallel::build_tensor_parallel_gpt(config, tp, {{}}, build) : model::build_gpt(config, {{}}, build);
  m->to(comm.memory_space());
  model::MixtureOfExperts& moe = *model::moe_layers(*m).at(0);
  std::int64_t held = 0;
  for (const model::Parameter* p : moe.expert_parameters()) held += p->value.numel();
  const std::int64_t expected_held =
      theory::moe_expert_parameters_per_rank(config.hidden, config.moe.expert_hidden, c.experts, c.ep, c.tp);
  if (held != expected_held)
    failures += "holds " + std::to_string(held) + " expert parameters, formula " + std::to_string(expected_held) + "; ";
  auto optimizer = case_adamw(model_type(c));
  parallel::DataParallelConfig dc;
  dc.global_batch = rows;
  dc.bucket_bytes = 2048;
  auto trainer = parallel::make_expert_parallel_trainer(
      grid, *m, *optimizer, dc, c.tp > 1 ? std::make_unique<parallel::TensorParallelSync>(tp, *m, false) : nullptr);
  const parallel::BatchSource source = parallel::batches_of(config);
  std::string decisions_differ;
  std::vector<std::string> disagreeing;
  model::MoePassStats last;
  for (int step = 0; step < c.steps; ++step) {
    if (step + 1 == c.steps) ep.reset_traffic();
    const double loss = trainer->step(source, static_cast<std::uint64_t>(step)).loss;
    if (step == 0) {
      // The first step's whole gradients (the step leaves them reduced), gathered from the shards.
      const parallel::ParameterValues gradients = parallel::gather_expert_parallel(
          parallel::gather_tensor_parallel(gradients_of(*m), m->parameters(), tp.group(), &disagreeing), config,
          ep_group, &disagreeing);
      const Difference d = compare(gradients, reference.gradients, zeros_like(reference.gradients));
      r.gradient_error = d.parameters;
      if (!(d.parameters <= r.loss_bound))
        failures += "the first step's gradients differ beyond " + format(r.loss_bound) + " (largest at " + d.where + "); ";
    }
    const double want = reference.losses[static_cast<std::size_t>(step)];
    r.loss_error = std::max(r.loss_error, std::abs(loss - want) / std::abs(want));
    const model::MoePassStats& s = moe.statistics().at(0);
    const std::vector<std::int64_t> mine = decisions_of(s);
    r.decisions += static_cast<std::int64_t>(s.token.size());
    if (mine != reference.decisions[static_cast<std::size_t>(step)][static_cast<std::size_t>(data.rank())] &&
        decisions_differ.empty())
      decisions_differ = "step " + std::to_string(step);
    last = s;
    moe.clear_statistics();
  }
  r.dropped = reference.dropped;
  failures += failed_on_any_rank(comm, "routing decisions differ from the single device", decisions_differ);
  if (!(r.loss_error <= r.loss_bound)) failures += "a step's loss differs by " + format(r.loss_error) + "; ";

  const parallel::ParameterValues values = parallel::gather_expert_parallel(
      parallel::gather_tensor_parallel(trainer->gathered(false), m->parameters(), tp.group(), &disagreeing), config,
      ep_group, &disagreeing);
  const Difference d = compare(values, reference.values, reference.origin);
  r.error = std::max(d.parameters, d.state);
  r.compared = "gradients " + format(r.gradient_error) + ", loss " + format(r.loss_error) + ", parameters " + format(d.parameters) + ", state " + format(d.state);
  failures += training_failures(d, r.bound, disagreeing, "tp or ep ranks");

  // The last step's all-to-all bytes against the formula from the routing counts.
  const parallel::ExpertTraffic measured = ep.traffic()["blocks." + std::to_string(config.moe.layers.at(0))];
  const parallel::ExpertTraffic formula =
      parallel::expected_traffic(ep_group, last.admitted, config.hidden, static_cast<double>(size_of(config.dtype)));
  r.dispatch_bytes = measured.dispatch;
  r.dispatch_formula = formula.dispatch;
  std::string wrong;
  if (std::llround(measured.dispatch) != std::llround(r.dispatch_formula))
    wrong += "dispatch " + format(measured.dispatch) + " (formula " + format(r.dispatch_formula) + ") ";
  if (std::llround(measured.combine) != std::llround(formula.combine))
    wrong += "combine " + format(measured.combine) + " (formula " + format(formula.combine) + ") ";
  if (std::llround(measured.backward) != std::llround(formula.backward))
    wrong += "backward " + format(measured.backward) + " (formula " + format(formula.backward) + ") ";
  failures += failed_on_any_rank(comm, "all-to-all bytes differ from the formula", wrong);
  r.dispatch_bytes = max_over_ranks(comm, r.dispatch_bytes);
  r.dispatch_formula = max_over_ranks(comm, r.dispatch_formula);

  agree_on(comm, failures, r.compared, r);
  r.decisions = static_cast<std::int64_t>(sum_over_ranks(comm, static_cast<double>(r.decisions)));
  return r;
}


// The family `parity check` runs (family.hpp).
const RegisteredFamily kMoeFamily{FamilyDefinition<MoeCase, MoeResult>{
    .table = &kMoeCasesTable, .label = "mixture-of-experts", .order = 50, .grid = moe_grid, .run = run_moe_case,
    .columns =
        [](record::Table& t, const CaseContext& context, const MoeCase& c, const MoeResult& r) {
          t.put({{"ep", c.ep}, {"tp", c.tp}, {"dp", context.world.size() / (c.ep * c.tp)}, {"experts", c.experts},
                 {"top_k", c.router == "expert_choice" ? 0 : c.top_k}, {"capacity_factor", c.capacity_factor},
                 {"router", c.router}, {"all_to_all", c.all_to_all}});
          add_run_columns(t, context.world, c.precision, c.steps);
          t.put({{"error", r.error}, {"bound", r.bound}, {"loss_error", r.loss_error}, {"loss_bound", r.loss_bound},
                 {"gradient_error", r.gradient_error}, {"decisions", r.decisions}, {"dropped", r.dropped},
                 {"dispatch_bytes", r.dispatch_bytes}, {"formula_dispatch_bytes", r.dispatch_formula}});
        }}};

}  // namespace parity::cases
