// parity bench moe: a GPT with MoE layers trained with expert parallelism on every rank (ep x dp
// = the world), in three sweeps that share their runs:
//   - against the expert-parallel size ep: the step time split into the all-to-alls (dispatch,
//     combine and their backward, counts included), the data-parallel gradient reduction, and
//     the rest (computation), with the all-to-all share;
//   - against the router (top_k, expert_choice, aux_free) at the largest ep: the load imbalance
//     (max / mean tokens per expert) and the balancing loss at every training step;
//   - against the capacity factor (top_k router, largest ep): the fraction of choices dropped.
// Every run also records the tokens per expert of every MoE layer at every step, and the bytes
// each rank sent in the last step's all-to-alls beside the formula from its routing counts
// (theory/moe.hpp), which must match exactly.
#include "bench/commands/bench_moe.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "bench/cli/progress.hpp"
#include "bench/cli/shared.hpp"
#include "bench/commands/calibration.hpp"
#include "bench/commands/command.hpp"
#include "bench/commands/presets.hpp"
#include "reference/core/error.hpp"
#include "reference/ops/routing.hpp"
#include "reference/parallel/batches.hpp"
#include "reference/parallel/data/data_parallel.hpp"
#include "reference/parallel/expert/expert_parallel.hpp"
#include "reference/theory/collectives.hpp"
#include "reference/theory/model.hpp"
#include "reference/theory/moe.hpp"

namespace parity::cli {
namespace {

using parallel::Axis;

model::GptConfig config_of(const MoeBenchOptions& options) {
  model::GptConfig c = find_model_preset(options.model).config;
  c.dtype = parse_data_type(options.dtype);
  if (c.dtype != DataType::float32 && c.dtype != DataType::float64)
    throw UsageError("--dtype " + options.dtype + ": models train in float32 or float64");
  if (options.moe_every < 1) throw UsageError("--moe-every " + std::to_string(options.moe_every) + ": must be 1 or more");
  c.moe.layers = options.moe_layers.empty() ? model::every_kth_block(options.moe_every, c.layers)
                                            : parse_whole_numbers(options.moe_layers, "--moe-layers", 0);
  if (c.moe.layers.empty())
    throw UsageError("--moe-every " + std::to_string(options.moe_every) + " puts no MoE layer in the " +
                     std::to_string(c.layers) + " blocks of " + options.model);
  std::sort(c.moe.layers.begin(), c.moe.layers.end());
  c.moe.experts = options.experts;
  c.moe.top_k = options.top_k;
  c.moe.capacity_factor = options.capacity_factor;
  c.moe.shared_expert = options.shared_expert;
  return c;
}

// The config of one run: the plan's with the run's router and capacity factor, checked.
model::GptConfig run_config(const MoeBenchPlan& plan, const MoeBenchRun& run) {
  model::GptConfig c = plan.config;
  c.moe.router = run.router;
  c.moe.capacity_factor = run.capacity_factor;
  c.validate();
  return c;
}

std::string cf_text(double cf) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", cf);
  return text;
}

// max / mean of counts (1 for a perfect balance); NaN when all are 0.
double imbalance(const std::vector<double>& counts) {
  double sum = 0, most = 0;
  for (double c : counts) {
    sum += c;
    most = std::max(most, c);
  }
  return sum > 0 ? most / (sum / static_cast<double>(counts.size())) : std::nan("");
}

// One MoE layer's statistics of one step, summed over the passes of every data rank.
struct LayerStep {
  std::vector<double> load, admitted;
  double tokens = 0, dropped = 0, unrouted = 0, balancing = 0, z = 0;  // losses weighted by tokens
};

// The layers' statistics of this rank's passes of the step just run, summed over the world
// (every rank is a data rank: ep x dp), and cleared from the layers.
std::vector<LayerStep> step_statistics(Communicator& world, const std::vector<model::MixtureOfExperts*>& layers, int E) {
  std::vector<double> packed;
  for (model::MixtureOfExperts* moe : layers) {
    std::vector<double> mine(static_cast<std::size_t>(2 * E + 5), 0.0);
    for (const model::MoePassStats& s : moe->statistics()) {
      for (int e = 0; e < E; ++e) {
        mine[static_cast<std::size_t>(e)] += static_cast<double>(s.load[static_cast<std::size_t>(e)]);
        mine[static_cast<std::size_t>(E + e)] += static_cast<double>(s.admitted[static_cast<std::size_t>(e)]);
      }
      const double n = static_cast<double>(s.tokens);
      mine[static_cast<std::size_t>(2 * E)] += n;
      mine[static_cast<std::size_t>(2 * E + 1)] += static_cast<double>(s.dropped);
      mine[static_cast<std::size_t>(2 * E + 2)] += static_cast<double>(s.unrouted);
      mine[static_cast<std::size_t>(2 * E + 3)] += s.balancing_loss * n;
      mine[static_cast<std::size_t>(2 * E + 4)] += s.z_loss * n;
    }
    moe->clear_statistics();
    packed.insert(packed.end(), mine.begin(), mine.end());
  }
  const BufferView view{packed.data(), packed.size(), DataType::float64, MemorySpace::host};
  world.all_reduce(view, view, ReduceOp::sum);
  std::vector<LayerStep> out;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const auto at = packed.begin() + static_cast<std::ptrdiff_t>(l * static_cast<std::size_t>(2 * E + 5));
    LayerStep s;
    s.load.assign(at, at + E);
    s.admitted.assign(at + E, at + 2 * E);
    s.tokens = at[2 * E];
    s.dropped = at[2 * E + 1];
    s.unrouted = at[2 * E + 2];
    s.balancing = s.tokens > 0 ? at[2 * E + 3] / s.tokens : 0;
    s.z = s.tokens > 0 ? at[2 * E + 4] / s.tokens : 0;
    out.push_back(std::move(s));
  }
  return out;
}

// --resume: a run is found by its index and what it ran; its step and load rows by its index.
std::string run_key(std::size_t index, const MoeBenchRun& run) {
  return std::to_string(index) + "|ep" + std::to_string(run.ep) + "|" + run.router + "|cf" + cf_text(run.capacity_factor);
}
std::string run_row_key(const record::Table& t, std::size_t row) {
  MoeBenchRun run;
  run.ep = static_cast<int>(t.get_i64("ep")[row]);
  run.router = t.get_str("router")[row];
  run.capacity_factor = t.get_f64("capacity_factor")[row];
  return run_key(static_cast<std::size_t>(t.get_i64("run")[row]), run);
}
std::string index_key(const record::Table& t, std::size_t row) { return std::to_string(t.get_i64("run")[row]); }

}  // namespace

void check_moe_bench_options(const MoeBenchOptions& options) {
  if (options.batch < 1) throw UsageError("--batch must be at least 1");
  if (options.steps < 1) throw UsageError("--steps must be at least 1");
  if (options.warmup < 0) throw UsageError("--warmup must not be negative");
  for (const std::string& r : split_names(options.routers, "--routers")) ops::parse_router(r);
  if (split_list(options.routers).empty()) throw UsageError("--routers names no router (top_k, expert_choice, aux_free)");
  for (double cf : parse_numbers(options.capacity_factors, "--capacity-factors"))
    if (!(cf > 0)) throw UsageError("--capacity-factors: " + cf_text(cf) + " must be above 0 (inf: dropless)");
  if (!(options.capacity_factor > 0))
    throw UsageError("--capacity-factor " + cf_text(options.capacity_factor) + " must be above 0 (inf: dropless)");
  find_algorithm(Collective::all_to_all_v, options.all_to_all);
  if (options.experts < 1) throw UsageError("--experts " + std::to_string(options.experts) + ": at least one expert");
  const model::GptConfig c = config_of(options);
  if (options.top_k > options.experts || options.top_k < 1)
    throw UsageError("--top-k " + std::to_string(options.top_k) + " must be between 1 and the " +
                     std::to_string(options.experts) + " experts (--experts)");
  c.validate();  // experts, blocks beyond the model, ...
  if (!options.ep_sizes.empty()) parse_whole_numbers(options.ep_sizes, "--ep");
  if (options.capacity_factors.empty())
    throw UsageError("--capacity-factors names no number (the dropped-fraction sweep needs at least one)");
}

MoeBenchPlan plan_moe_bench(const MoeBenchOptions& options, int world) {
  check_moe_bench_options(options);
  MoeBenchPlan plan;
  plan.model = options.model;
  plan.config = config_of(options);
  const int E = options.experts;
  if (options.batch < world)
    throw UsageError("--batch " + std::to_string(options.batch) + " is smaller than the world of " +
                     std::to_string(world) + " ranks (every rank trains at least one sequence)");
  std::vector<int> sizes;
  if (options.ep_sizes.empty()) {
    for (int ep = 1; ep <= world; ++ep)
      if (world % ep == 0 && E % ep == 0) sizes.push_back(ep);
  } else {
    for (int ep : parse_whole_numbers(options.ep_sizes, "--ep")) {
      if (world % ep != 0)
        throw UsageError("--ep " + std::to_string(ep) + " does not divide the world of " + std::to_string(world) + " ranks");
      parallel::validate_expert_parallel(plan.config, ep);  // E not a multiple of ep
      sizes.push_back(ep);
    }
  }
  const int top = *std::max_element(sizes.begin(), sizes.end());
  const std::vector<std::string> routers = split_names(options.routers, "--routers");
  auto add = [&](int ep, const std::string& router, double cf) -> MoeBenchRun& {
    for (MoeBenchRun& r : plan.runs)
      if (r.ep == ep && r.router == router && (r.capacity_factor == cf)) return r;
    MoeBenchRun r;
    r.ep = ep;
    r.router = router;
    r.capacity_factor = cf;
    run_config(plan, r);  // refuses what the model cannot take
    plan.runs.push_back(r);
    return plan.runs.back();
  };
  for (int ep : sizes) add(ep, routers.front(), options.capacity_factor).ep_sweep = true;
  for (const std::string& router : routers) add(top, router, options.capacity_factor).router_sweep = true;
  for (double cf : parse_numbers(options.capacity_factors, "--capacity-factors")) add(top, "top_k", cf).cf_sweep = true;
  return plan;
}

std::size_t moe_bench_bytes_per_rank(const MoeBenchPlan& plan, const MoeBenchOptions& options, int world) {
  // Every expert on one rank (ep 1) bounds every run: parameters, gradients and two AdamW moments
  // of the dense model plus the experts and routers; activations of this rank's sequences with
  // k routed copies per MoE layer (generously 64 h per token per block), the logits three times.
  const model::GptConfig& c = plan.config;
  const double e = static_cast<double>(size_of(c.dtype));
  const std::int64_t ffn = c.moe.expert_hidden > 0 ? c.moe.expert_hidden : 4 * c.hidden;
  const double experts = static_cast<double>(c.moe.layers.size()) *
                         static_cast<double>(theory::moe_expert_parameters_per_rank(c.hidden, ffn, c.moe.experts, 1, 1) +
                                             c.hidden * c.moe.experts);
  const double tokens = std::ceil(static_cast<double>(options.batch) / world) * static_cast<double>(c.sequence);
  const double k = static_cast<double>(std::max(1, c.moe.top_k));
  return estimated_bytes(e * (4.0 * (static_cast<double>(theory::gpt_parameters(c)) + experts) +
                                       tokens * 64.0 * k * static_cast<double>(c.hidden) * c.layers +
                                       3.0 * tokens * static_cast<double>(c.vocabulary)));
}

namespace {

struct Predicted {
  double all_to_all = 0, step = 0;  // the slowest rank's
};

// The step predicted from this job's calibration, every rank its own and the slowest one's
// reported. Compute: reference_gpt_step with each MoE block's work as the last step routed it
// (the rows this rank's tokens sent, the rows its experts received from the ep group). The
// exchanges on the ping-pong's alpha-beta link: per MoE block five all-to-alls over ep (the
// counts, dispatch, combine and the two backward), each (ep - 1) messages, and the bytes this
// rank sent in them (the formula's) at the job's all-to-all efficiency. The gradients: the shared parameters' buckets all-reduced
// over the world as the backward produces them (overlapped_exposed_seconds, as bench scaling),
// then the experts' over dp.
Predicted predict_step(Session& session, const model::GptConfig& c, const MoeBenchOptions& options,
                       parallel::ExpertParallel& ep, const parallel::Trainer& trainer, model::Model& model,
                       const std::vector<std::vector<std::int64_t>>& admitted, const parallel::ExpertTraffic& sent,
                       const PointToPoint& p2p, const theory::Calibration& calibration) {
  Communicator& world = session.world();
  const int E = c.moe.experts, n = ep.size(), local = E / n, dp = world.size() / n;
  const std::int64_t ffn = c.moe.expert_hidden > 0 ? c.moe.expert_hidden : 4 * c.hidden;
  const std::int64_t rows = parallel::batch_shard(options.batch, world.rank(), world.size()).rows;
  const double tokens = static_cast<double>(rows * c.sequence);
  theory::StepSplit split;
  for (std::size_t l = 0; l < admitted.size(); ++l) {
    std::vector<std::int64_t> group(admitted[l]);  // the ep group's rows for each expert
    ep.group().all_reduce({group.data(), group.size(), DataType::int64, MemorySpace::host},
                          {group.data(), group.size(), DataType::int64, MemorySpace::host}, ReduceOp::sum);
    theory::MoeBlockWork w;
    w.block = c.moe.layers[l];
    w.experts = E;
    w.expert_hidden = static_cast<double>(ffn);
    for (const std::int64_t a : admitted[l]) w.assignments += static_cast<double>(a);
    for (int i = 0; i < local; ++i) w.expert_rows.push_back(static_cast<double>(group[static_cast<std::size_t>(ep.rank() * local + i)]));
    if (c.moe.shared_expert) w.expert_rows.push_back(tokens);
    split.moe.push_back(std::move(w));
  }
  std::int64_t held = 0, expert_held = 0;
  for (model::MixtureOfExperts* moe : model::moe_layers(model))
    for (model::Parameter* p : moe->expert_parameters()) expert_held += p->value.numel();
  for (model::Parameter* p : model.parameters()) held += p->value.numel();
  split.parameters = held;
  const theory::StepEstimate compute = theory::reference_gpt_step(c, rows, calibration, true, split);
  Predicted mine;
  if (!p2p.measured) {
    mine.step = mine.all_to_all = n > 1 || world.size() > 1 ? std::nan("") : 0.0;
    if (world.size() == 1) mine.step = compute.total();
  } else {
    const theory::AlphaBeta& m = p2p.model;
    const double e = static_cast<double>(size_of(c.dtype));
    // Each exchange at the efficiency the job's all-to-all reached at its size (a layer's
    // dispatch), each all-reduce at the all-reduce's.
    const double exchanged = sent.dispatch + sent.combine + sent.backward;
    const double layer_bytes = exchanged / 4 / std::max<double>(1, static_cast<double>(admitted.size()));
    mine.all_to_all = n == 1 ? 0.0
                             : 5.0 * static_cast<double>(admitted.size()) * (n - 1) * m.alpha_seconds +
                                   exchanged * m.beta_seconds_per_byte /
                                       calibration.collective_efficiency_at(layer_bytes * n / (n - 1), 1.0, "all_to_all");
    const auto ring = [&](int ranks, double bytes) {
      return ranks == 1 ? 0.0 : theory::ring_all_reduce_seconds(ranks, bytes, m) / calibration.collective_efficiency_at(bytes, 1.0);
    };
    const auto& buckets = dynamic_cast<const parallel::BucketedAllReduce&>(*trainer.parts().syncs.front()).bucket_parameters();
    const int count = static_cast<int>(std::max<std::size_t>(buckets.size(), 1));
    const double shared_bytes = static_cast<double>(held - expert_held) * e;
    const double dense = theory::overlapped_exposed_seconds(compute.backward_s, count, ring(world.size(), shared_bytes / count));
    mine.step = compute.total() + mine.all_to_all + (world.size() == 1 ? 0.0 : dense) +
                ring(dp, static_cast<double>(expert_held) * e);
  }
  const auto slowest = [&](double x) {
    const auto all = gather_from_ranks(world, x);
    return *std::max_element(all.begin(), all.end());
  };
  return {slowest(mine.all_to_all), slowest(mine.step)};
}

}  // namespace

MoeBenchOutcome run_moe_bench(Session& session, const MoeBenchPlan& plan, const MoeBenchOptions& options,
                              const PointToPoint& p2p, const theory::Calibration& calibration) {
  Communicator& world = session.world();
  MoeBenchOutcome out;
  const int E = plan.config.moe.experts;
  const std::vector<int>& blocks = plan.config.moe.layers;  // sorted: the model's order
  Progress progress("bench moe", plan.runs.size(), session.is_root() && !session.options().quiet);
  for (std::size_t run_index = 0; run_index < plan.runs.size(); ++run_index) {
    const MoeBenchRun& run = plan.runs[run_index];
    progress.update(run_index, "ep" + std::to_string(run.ep) + " " + run.router + " cf" + cf_text(run.capacity_factor));
    // --resume: a run the interrupted one finished (its steps and loads were journaled before
    // its row) is taken whole.
    const Session::Restored restored = session.restore_row(
        "/bench/moe", run_key(run_index, run), run_row_key, out.runs,
        [](const record::Table& from, std::size_t row) -> std::int64_t { return from.get_i64("bytes_match")[row] == 0; });
    if (restored.found) {
      const std::size_t step_rows = static_cast<std::size_t>(options.warmup + options.steps) * blocks.size();
      session.restore_rows("/bench/moe_steps", std::to_string(run_index), index_key, step_rows, out.steps);
      session.restore_rows("/bench/moe_load", std::to_string(run_index), index_key, step_rows * static_cast<std::size_t>(E),
                           out.load);
      out.mismatches += static_cast<std::size_t>(restored.value);
      continue;
    }
    const std::size_t first_step_row = out.steps.rows(), first_load_row = out.load.rows();
    const model::GptConfig c = run_config(plan, run);
    parallel::GridSpec spec;
    spec.set(Axis::ep, run.ep).set(Axis::dp, world.size() / run.ep);
    parallel::Grid grid(world, spec);
    parallel::ExpertParallelConfig ec;
    ec.all_to_all = options.all_to_all;
    parallel::ExpertParallel ep(grid.group(Axis::ep), ec);
    auto model = parallel::build_expert_parallel_gpt(c, ep);
    model->to(session.space());
    const std::vector<model::MixtureOfExperts*> layers = model::moe_layers(*model);
    model::AdamW optimizer({}, c.dtype);
    parallel::DataParallelConfig dc;
    dc.global_batch = options.batch;
    auto trainer = parallel::make_expert_parallel_trainer(grid, *model, optimizer, dc);
    const parallel::BatchSource source = parallel::batches_of(c);
    std::vector<StepTiming<2>> timings;  // the step, its exchanges and its exposed gradient reduction
    double imbalance_sum = 0, dropped_sum = 0, timed_rows = 0;  // root: over the timed steps and MoE layers
    std::vector<std::vector<std::int64_t>> last_admitted(layers.size());  // this rank's, the last step
    for (int s = 0; s < options.warmup + options.steps; ++s) {
      world.barrier();  // every step starts together, so the slowest rank sets its time
      ep.reset_traffic();
      const parallel::StepStats stats = trainer->step(source, static_cast<std::uint64_t>(s));
      double a2a = 0;
      for (const auto& [block, traffic] : ep.traffic()) a2a += traffic.seconds;
      for (std::size_t l = 0; l < layers.size(); ++l) {
        last_admitted[l].assign(static_cast<std::size_t>(E), 0);
        for (const model::MoePassStats& p : layers[l]->statistics())
          for (int e = 0; e < E; ++e) last_admitted[l][static_cast<std::size_t>(e)] += p.admitted[static_cast<std::size_t>(e)];
      }
      const std::vector<LayerStep> layer_steps = step_statistics(world, layers, E);
      if (s >= options.warmup) {
        timings.push_back({stats.seconds, {a2a, stats.exposed_comm_seconds}});
      }
      if (!session.is_root()) continue;
      for (std::size_t l = 0; l < layers.size(); ++l) {
        const LayerStep& ls = layer_steps[l];
        const double choices = run.router == "expert_choice" ? ls.tokens : ls.tokens * c.moe.top_k;
        record::Table& t = out.steps;
        t.put({{"run", static_cast<std::int64_t>(run_index)}, {"step", s}, {"timed", s >= options.warmup ? 1 : 0},
               {"block", blocks[l]}, {"tokens", std::llround(ls.tokens)}, {"load_imbalance", imbalance(ls.load)},
               {"admitted_imbalance", imbalance(ls.admitted)}, {"dropped", std::llround(ls.dropped)},
               {"dropped_fraction", choices > 0 ? ls.dropped / choices : std::nan("")},
               {"unrouted_fraction", ls.tokens > 0 ? ls.unrouted / ls.tokens : std::nan("")},
               {"balancing_loss", ls.balancing}, {"z_loss", ls.z}});
        if (s >= options.warmup) {
          imbalance_sum += t.get_f64("load_imbalance").back();
          dropped_sum += t.get_f64("dropped_fraction").back();
          timed_rows += 1;
        }
        for (int e = 0; e < E; ++e) {
          record::Table& u = out.load;
          u.put({{"run", static_cast<std::int64_t>(run_index)}, {"step", s}, {"block", blocks[l]}, {"expert", e},
                 {"load", std::llround(ls.load[static_cast<std::size_t>(e)])},
                 {"admitted", std::llround(ls.admitted[static_cast<std::size_t>(e)])}});
        }
      }
    }
    // The last step's bytes on every rank against the formula from its routing counts.
    const double e = static_cast<double>(size_of(c.dtype));
    parallel::ExpertTraffic measured, formula;
    const auto traffic = ep.traffic();
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const parallel::ExpertTraffic f = parallel::expected_traffic(ep.group(), last_admitted[l], c.hidden, e);
      const parallel::ExpertTraffic& m = traffic.at("blocks." + std::to_string(blocks[l]));
      measured.dispatch += m.dispatch;
      measured.combine += m.combine;
      measured.backward += m.backward;
      formula.dispatch += f.dispatch;
      formula.combine += f.combine;
      formula.backward += f.backward;
    }
    const bool match_here = std::llround(measured.dispatch) == std::llround(formula.dispatch) &&
                            std::llround(measured.combine) == std::llround(formula.combine) &&
                            std::llround(measured.backward) == std::llround(formula.backward);
    const auto matches = gather_from_ranks(world, match_here ? 1.0 : 0.0);
    const bool bytes_match = std::all_of(matches.begin(), matches.end(), [](double m) { return m == 1.0; });
    // The slowest rank's median step with its parts; the largest bytes any rank sent, beside its formula.
    const StepTiming<2> slowest = slowest_rank_step(world, median_step(timings));
    const double step = slowest.seconds, a2a = slowest.parts[0], reduce = slowest.parts[1];
    const auto sent = gather_from_ranks(world, measured.dispatch + measured.combine + measured.backward);
    const auto sent_formula = gather_from_ranks(world, formula.dispatch + formula.combine + formula.backward);
    const auto busiest = std::max_element(sent.begin(), sent.end()) - sent.begin();
    if (!bytes_match) ++out.mismatches;
    const Predicted predicted = predict_step(session, c, options, ep, *trainer, *model, last_admitted, formula, p2p, calibration);
    if (session.is_root()) {
      record::Table& t = out.runs;
      t.put({{"run", static_cast<std::int64_t>(run_index)}, {"model", plan.model}, {"config", c.describe()},
             {"ep", run.ep}, {"dp", world.size() / run.ep}, {"world_size", world.size()}, {"experts", E},
             {"top_k", run.router == "expert_choice" ? 0 : c.moe.top_k}, {"capacity_factor", run.capacity_factor},
             {"router", run.router}, {"moe_layers", static_cast<std::int64_t>(blocks.size())},
             {"in_ep_sweep", run.ep_sweep ? 1 : 0}, {"in_router_sweep", run.router_sweep ? 1 : 0},
             {"in_cf_sweep", run.cf_sweep ? 1 : 0}, {"batch", options.batch}, {"step_seconds", step},
             {"tokens_per_second", static_cast<double>(options.batch * c.sequence) / step}, {"all_to_all_seconds", a2a},
             {"gradient_reduction_seconds", reduce}, {"compute_seconds", std::max(0.0, step - a2a - reduce)},
             {"all_to_all_share", a2a / step}, {"all_to_all_bytes", sent[static_cast<std::size_t>(busiest)]},
             {"formula_all_to_all_bytes", sent_formula[static_cast<std::size_t>(busiest)]},
             {"bytes_match", bytes_match ? 1 : 0}, {"mean_load_imbalance", imbalance_sum / timed_rows},
             {"mean_dropped_fraction", dropped_sum / timed_rows},
             {"predicted_all_to_all_seconds", predicted.all_to_all}, {"predicted_step_seconds", predicted.step},
             {"predicted_over_measured", session.oversubscribed() ? std::nan("") : predicted.step / step}});
      // Kept if the job is cut short: the run's steps and loads first, its row last.
      session.record_rows({{"/bench/moe_steps", &out.steps, first_step_row},
                           {"/bench/moe_load", &out.load, first_load_row},
                           {"/bench/moe", &t, t.rows() - 1}});
    }
  }
  progress.finish();
  if (session.is_root() && !session.options().quiet)
    std::fprintf(stderr, "[bench moe] %zu runs; all-to-all bytes %s\n", out.runs.rows(),
                 out.mismatches ? "differ from the formula in some runs (see bytes_match)"
                                : "equal the formula in every run, on every rank");
  return out;
}

void record_moe_bench(Session& session, const MoeBenchOutcome& outcome, const MoeBenchOptions& options) {
  if (!session.is_root()) return;
  auto& file = session.results();
  file.write_table(outcome.runs);
  file.write_table(outcome.steps);
  file.write_table(outcome.load);
  file.set_attribute("/bench/moe", "timed_steps", static_cast<std::int64_t>(options.steps));
  file.set_attribute("/bench/moe", "warmup_steps", static_cast<std::int64_t>(options.warmup));
  file.set_attribute("/bench/moe", "all_to_all", options.all_to_all);
  file.set_attribute("/bench/moe", "formulas",
                     std::string("theory/moe.hpp: dispatch = rows admitted for other ranks' experts x h e; combine = rows "
                                 "received from other ranks x h e; backward = dispatch + combine; capacity ceil(k cf N / E)"));
}

namespace {

class BenchMoe final : public CommandWith<MoeBenchOptions> {
 public:
  BenchMoe()
      : CommandWith({.name = "bench moe",
                     .help = "Mixture of experts with expert parallelism: step time split (all-to-all, gradient reduction, "
                             "compute) against ep, load imbalance and balancing loss per router over the steps, dropped "
                             "fraction against the capacity factor, tokens per expert per layer, all-to-all bytes beside the "
                             "formula (which must match)",
                     .order = 80,
                     .in_run = true,
                     .tables = {&kMoeBenchTable, &kMoeStepsTable, &kMoeLoadTable, &kPointToPointTable, &kCalibrateTable,
                                &kCalibrateLinksTable, &kCalibrateCollectivesTable},
                     .resume_probe = ResumeProbe{{"-q", "--np", "2", "--experts", "4", "--steps", "4", "--warmup", "0"},
                                                 "bench/moe",
                                                 "run,ep,router,capacity_factor,bytes_match",
                                                 {1, 3},
                                                 "TERM",
                                                 {"bench/moe_steps", "bench/moe_load", "bench/point_to_point"}}}) {}

  void declare(CommandOptions& o) override {
    MoeBenchOptions& m = options_;
    o.add("--model", m.model, "GPT preset:" + model_presets_help());
    o.add("-E,--experts", m.experts, "Experts per MoE layer (a multiple of every ep size)");
    o.add("-k,--top-k", m.top_k, "Experts each token chooses (top_k and aux_free routers), 1..E");
    o.add("--capacity-factor", m.capacity_factor, "Capacity factor cf of the ep sweep and the router runs: an expert "
                                                  "takes ceil(k cf tokens / E) rows; inf: dropless");
    o.add("--capacity-factors", m.capacity_factors,
          "The dropped-fraction sweep (top_k router at the largest ep), comma-separated, inf allowed",
          {"0.5,1,inf", "0.5,1,1.25,2,inf"});
    o.add("--routers", m.routers, "Routers compared at the largest ep (the first also runs the ep sweep): top_k, "
                                  "expert_choice, aux_free");
    o.add("--ep", m.ep_sizes, "Expert-parallel sizes, comma-separated; each runs on every rank with dp = world / ep "
                              "[default: every size dividing the world and the experts]");
    o.add("--moe-every", m.moe_every, "An MoE FFN in every k-th block (blocks k-1, 2k-1, ...)");
    o.add("--moe-layers", m.moe_layers, "Or the MoE blocks by index, comma-separated (0-based)");
    o.flag("--shared-expert", m.shared_expert, "One more expert every token goes through, ungated");
    o.add("--batch", m.batch, "Sequences per step (the global batch, at least one per rank)");
    o.add("--steps", m.steps, "Timed steps (the median is reported; every step's routing is recorded)", {2, 4});
    o.add("--warmup", m.warmup, "Untimed steps first");
    o.add("--dtype", m.dtype, "float32 or float64");
    o.add("--all-to-all", m.all_to_all, "all_to_all_v algorithm of the exchange: native or pairwise");
  }

  std::optional<int> prepare(std::optional<int> world_size) override {
    check_moe_bench_options(options_);
    if (world_size) plan_moe_bench(options_, *world_size);  // refused before ranks start
    return std::nullopt;
  }

  void prepare_for_run(int world_size) override { options_.batch = std::max<std::int64_t>(options_.batch, world_size); }

  int execute(Job& job) override {
    Session& s = job.session;
    const MoeBenchPlan plan = plan_moe_bench(options_, s.world().size());
    s.admit(moe_bench_bytes_per_rank(plan, options_, s.world().size()), "the MoE benchmark");
    const PointToPoint& p2p = job.point_to_point(4 << 20);  // the source of the alpha-beta predictions
    const theory::Calibration calibration = job.calibration_with_collectives(plan.config.dtype);
    const MoeBenchOutcome outcome = run_moe_bench(s, plan, options_, p2p, calibration);
    record_moe_bench(s, outcome, options_);
    return outcome.mismatches ? kExitFailed : kExitOk;
  }
};

const RegisteredCommand<BenchMoe> kBenchMoe;

}  // namespace
}  // namespace parity::cli
