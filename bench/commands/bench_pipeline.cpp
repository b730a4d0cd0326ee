// parity bench pipeline: pipeline schedules on real ranks against the micro-batches m (and the
// pipeline ranks p), a GPT split into stages balanced by parameter count. Each run is set up
// as the conformance cases set it up (correctness/cases/pipeline.hpp), on the first p ranks
// (the others wait), and the executor records each timed step: every action's work and every
// wait for a message, on clocks aligned to rank 0's at the run's start (reference/comm/clock).
// The step whose makespan is the median is kept. Beside what was measured:
//   - the discrete-event simulator fed with the action costs measured in the same run (each
//     rank's median F, B, I, W) and the ping-pong's alpha-beta for the messages;
//   - the closed form of the bubble where there is one (theory/pipeline.hpp);
//   - each rank's peak activation bytes beside the in-flight formula: the (stage, micro-batch)
//     pairs a rank holds at once (forward run, B or W not yet), walked over its actions, each
//     weighing the bytes that stage's forwards were measured to keep.
// Where ranks outnumber cores, a rank waits for the processor as well as for its messages, so
// measured idle means little: the file says so and the simulated figure is the one to compare.
#include "bench/commands/bench_pipeline.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "bench/cli/progress.hpp"
#include "bench/cli/shared.hpp"
#include "bench/commands/command.hpp"
#include "bench/commands/pipeline.hpp"
#include "bench/commands/presets.hpp"
#include "correctness/cases/pipeline.hpp"
#include "reference/comm/clock.hpp"
#include "reference/core/error.hpp"
#include "reference/parallel/pipeline/executor.hpp"
#include "reference/parallel/pipeline/simulator.hpp"
#include "reference/theory/calibration.hpp"
#include "reference/theory/model.hpp"
#include "reference/theory/pipeline.hpp"

namespace parity::cli {
namespace {

namespace pp = parallel::pipeline;

int stages_held(const pp::Schedule& s, int rank) {
  std::vector<int> stages;
  for (const pp::Action& a : s.ranks[static_cast<std::size_t>(rank)])
    if (std::find(stages.begin(), stages.end(), a.stage) == stages.end()) stages.push_back(a.stage);
  return static_cast<int>(stages.size());
}

// Largest sum of kept[stage] over the (stage, micro-batch) pairs held on the rank: added at
// each forward, removed at its B; with the backward split, I removes released[stage] (what W
// does not read) and W the rest.
double in_flight_bytes(const std::vector<pp::Action>& actions, const std::map<int, double>& kept,
                       const std::map<int, double>& released) {
  const auto of = [](const std::map<int, double>& bytes, int stage) {
    const auto it = bytes.find(stage);
    return it == bytes.end() ? 0.0 : it->second;
  };
  double held = 0, peak = 0;
  for (const pp::Action& a : actions) {
    const double whole = of(kept, a.stage), at_input_grad = of(released, a.stage);
    if (a.work == pp::Work::forward) held += whole;
    if (a.work == pp::Work::backward) held -= whole;
    if (a.work == pp::Work::input_grad) held -= at_input_grad;
    if (a.work == pp::Work::weight_grad) held -= whole - at_input_grad;
    peak = std::max(peak, held);
  }
  return peak;
}

// Idle over the step of the closed form, NaN where there is none: idle x over the ideal busy
// time is x / (1 + x) of the step.
double closed_form_bubble(const pp::Schedule& s, int chunks, double f, double i, double w) {
  const double over_ideal = pipeline_closed_form(s, chunks, f, i, w).over_ideal;
  return over_ideal / (1 + over_ideal);
}

int formula_in_flight(const pp::Schedule& s, int chunks, int rank) {
  const int p = s.rank_count(), m = s.micro_batches;
  if (s.name == "gpipe") return theory::gpipe_in_flight(m);
  if (s.name == "1f1b") return theory::one_f_one_b_in_flight(p, m, rank);
  if (s.name == "interleaved") return theory::interleaved_in_flight(p, m, chunks, rank);
  return -1;
}

const char* work_name(pp::Work w) {
  switch (w) {
    case pp::Work::forward: return "F";
    case pp::Work::backward: return "B";
    case pp::Work::input_grad: return "I";
    case pp::Work::weight_grad: return "W";
  }
  return "?";
}

// What one pipeline rank measured in a run, as text for the all-gather to rank 0:
//   S offset uncertainty peak_bytes step_seconds F B I W
//   K stage kept_bytes                      (one per stage it holds)
//   R stage released_bytes                  (one per stage whose backward is split: what I lets go)
//   E stage work micro_batch wait start end (the kept step, on rank 0's clock)
struct RankReport {
  double offset = 0, uncertainty = 0, peak = 0, step = 0;
  double cost[4] = {std::nan(""), std::nan(""), std::nan(""), std::nan("")};  // F B I W
  std::map<int, double> kept, released;
  std::vector<pp::Event> events;

  std::string text() const {
    std::ostringstream out;
    out.precision(17);
    out << "S " << offset << ' ' << uncertainty << ' ' << peak << ' ' << step;
    for (double c : cost) out << ' ' << c;
    out << '\n';
    for (const auto& [stage, bytes] : kept) out << "K " << stage << ' ' << bytes << '\n';
    for (const auto& [stage, bytes] : released) out << "R " << stage << ' ' << bytes << '\n';
    for (const pp::Event& e : events)
      out << "E " << e.action.stage << ' ' << static_cast<char>(e.action.work) << ' ' << e.action.micro_batch << ' '
          << (e.wait ? 1 : 0) << ' ' << e.start << ' ' << e.end << '\n';
    return out.str();
  }
  static RankReport parse(const std::string& text) {
    RankReport r;
    std::istringstream in(text);
    for (std::string kind; in >> kind;) {
      if (kind == "S") {
        std::string c[4];
        in >> r.offset >> r.uncertainty >> r.peak >> r.step >> c[0] >> c[1] >> c[2] >> c[3];
        for (int k = 0; k < 4; ++k) r.cost[k] = std::strtod(c[k].c_str(), nullptr);  // "nan" too
      } else if (kind == "K" || kind == "R") {
        int stage = 0;
        double bytes = 0;
        in >> stage >> bytes;
        (kind == "K" ? r.kept : r.released)[stage] = bytes;
      } else {
        pp::Event e;
        char work = 'F';
        int wait = 0;
        in >> e.action.stage >> work >> e.action.micro_batch >> wait >> e.start >> e.end;
        e.action.work = static_cast<pp::Work>(work);
        e.wait = wait != 0;
        r.events.push_back(e);
      }
    }
    return r;
  }
};

int kind_index(pp::Work w) {
  return w == pp::Work::forward ? 0 : w == pp::Work::backward ? 1 : w == pp::Work::input_grad ? 2 : 3;
}

// Runs one (schedule, p, m) on this pipeline rank: warm-up and timed steps, timelines kept.
RankReport measure_run(Communicator& group, const cases::PipelineCase& c, const PipelineBenchOptions& options) {
  const std::unique_ptr<cases::PipelineSetup> setup = cases::setup_pipeline_case(group, c);
  pp::Executor& executor = *setup->executor;
  executor.record_timeline(true);
  const ClockOffset clock = estimate_clock_offset(group);
  const parallel::BatchSource source = parallel::batches_of(setup->config);
  struct Timed {
    std::vector<pp::Event> events;
    double peak = 0, step = 0, first = 0, last = 0;
  };
  std::vector<Timed> timed;
  for (int s = 0; s < options.warmup + options.steps; ++s) {
    group.barrier();  // every step starts together
    const parallel::StepStats stats = setup->trainer->step(source, static_cast<std::uint64_t>(s));
    if (s < options.warmup) continue;
    Timed t;
    t.events = executor.timeline();
    for (pp::Event& e : t.events) {
      e.start += clock.offset_seconds;
      e.end += clock.offset_seconds;
    }
    t.peak = static_cast<double>(executor.peak_activation_bytes());
    t.step = stats.seconds;
    // The schedule's span: the first start of anything (work or wait) to the last work's end.
    t.first = std::numeric_limits<double>::infinity();
    t.last = -t.first;
    for (const pp::Event& e : t.events) {
      if (e.action.stage < 0) continue;
      t.first = std::min(t.first, e.start);
      if (!e.wait) t.last = std::max(t.last, e.end);
    }
    group.all_reduce({&t.first, 1, DataType::float64, MemorySpace::host}, {&t.first, 1, DataType::float64, MemorySpace::host},
                     ReduceOp::min);
    group.all_reduce({&t.last, 1, DataType::float64, MemorySpace::host}, {&t.last, 1, DataType::float64, MemorySpace::host},
                     ReduceOp::max);
    group.all_reduce({&t.step, 1, DataType::float64, MemorySpace::host}, {&t.step, 1, DataType::float64, MemorySpace::host},
                     ReduceOp::max);
    timed.push_back(std::move(t));
  }
  // The step whose makespan is the median (every rank picks the same one: the spans agree).
  std::vector<std::size_t> order(timed.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return timed[a].last - timed[a].first < timed[b].last - timed[b].first;
  });
  const Timed& kept = timed[order[order.size() / 2]];
  RankReport r;
  r.offset = clock.offset_seconds;
  r.uncertainty = clock.uncertainty_seconds;
  r.peak = kept.peak;
  std::vector<double> steps;
  for (const Timed& t : timed) steps.push_back(t.step);
  r.step = percentile(steps, 0.5);
  // Action costs and kept bytes over every timed step; the events of the kept one, from its start.
  std::vector<double> costs[4];
  std::map<int, std::vector<double>> kept_bytes, released_bytes;
  for (const Timed& t : timed)
    for (const pp::Event& e : t.events) {
      if (e.wait || e.action.stage < 0) continue;
      costs[kind_index(e.action.work)].push_back(e.end - e.start);
      if (e.action.work == pp::Work::forward) kept_bytes[e.action.stage].push_back(static_cast<double>(e.kept_bytes));
      if (e.action.work == pp::Work::input_grad) released_bytes[e.action.stage].push_back(-static_cast<double>(e.kept_bytes));
    }
  for (int k = 0; k < 4; ++k) r.cost[k] = percentile(costs[k], 0.5);
  for (const auto& [stage, bytes] : kept_bytes) r.kept[stage] = percentile(bytes, 0.5);
  for (const auto& [stage, bytes] : released_bytes) r.released[stage] = percentile(bytes, 0.5);
  for (pp::Event e : kept.events) {
    e.start -= kept.first;
    e.end -= kept.first;
    r.events.push_back(e);
  }
  return r;
}

}  // namespace

PipelineBenchPlan plan_pipeline_bench(const PipelineBenchOptions& options, int world) {
  if (options.rows < 1) throw UsageError("--rows must be at least 1");
  if (options.steps < 1) throw UsageError("--steps must be at least 1");
  if (options.warmup < 0) throw UsageError("--warmup must not be negative");
  if (options.chunks < 1 || options.chunks > 64) throw UsageError("--chunks: " + std::to_string(options.chunks) + " is out of range (1 to 64)");
  check_swept_layers(options.layers);
  PipelineBenchPlan plan;
  plan.model = options.model;
  plan.config = find_model_preset(options.model).config;
  plan.config.dtype = parse_data_type(options.dtype);
  if (plan.config.dtype != DataType::float32 && plan.config.dtype != DataType::float64)
    throw UsageError("--dtype " + options.dtype + ": models train in float32 or float64");
  std::vector<std::string> schedules = split_names(options.schedules, "--schedules");
  if (schedules.empty()) throw UsageError("--schedules names no schedule");
  for (const std::string& s : schedules) pp::make_schedule(s, 1, 1, 1);  // unknown names refused, listing the known
  std::vector<int> stages = parse_whole_numbers(options.stages, "--stages");
  if (stages.empty()) {
    for (int p = 2; p < world; p *= 2) stages.push_back(p);
    stages.push_back(world);
  }
  for (int p : stages)
    if (p > world) throw UsageError("--stages " + std::to_string(p) + " exceeds the world of " + std::to_string(world) + " ranks");
  const std::vector<int> given_m = parse_whole_numbers(options.micro_batches, "--micro-batches");
  for (int m : given_m)
    if (m < 1 || m > kMostMicroBatches)
      throw UsageError("--micro-batches: " + std::to_string(m) + " is out of range (1 to " + std::to_string(kMostMicroBatches) + ")");
  const int most = *std::max_element(stages.begin(), stages.end());
  // Every stage needs a layer: blocks enough for the most stages any schedule makes.
  plan.config.layers = options.layers > 0 ? options.layers : std::max(plan.config.layers, std::max(options.chunks, 2) * most);
  for (int p : stages)
    for (const std::string& name : schedules) {
      const std::vector<int> ms = given_m.empty() ? std::vector<int>{p, 2 * p, 4 * p} : given_m;
      for (int m : ms) {
        try {
          const pp::Schedule s = pp::make_schedule(name, p, m, options.chunks);
          if (s.stage_count() > model::gpt_top_level_layers(plan.config))
            throw UsageError("pipeline: " + std::to_string(s.stage_count()) + " stages for a model of " +
                             std::to_string(model::gpt_top_level_layers(plan.config)) + " layers; pass more --layers");
        } catch (const UsageError& e) {
          if (std::string(e.what()).find("stages for a model") != std::string::npos) throw;
          ++plan.skipped;  // this schedule cannot take this m (interleaving's multiples, ...)
          continue;
        }
        plan.runs.push_back({name, p, m});
      }
    }
  if (plan.runs.empty()) throw UsageError("bench pipeline: no schedule can take the micro-batches given (--micro-batches)");
  return plan;
}

std::size_t pipeline_bench_bytes_per_rank(const PipelineBenchPlan& plan, const PipelineBenchOptions& options) {
  // Bounded by the whole model on one rank: parameters, gradients, two AdamW moments, and the
  // activations of every micro-batch at once (GPipe) with the logits and their gradient.
  const auto& c = plan.config;
  int most_m = 1;
  for (const auto& r : plan.runs) most_m = std::max(most_m, r.micro_batches);
  const double e = static_cast<double>(size_of(c.dtype));
  const double rows = static_cast<double>(options.rows) * most_m;
  return estimated_bytes(
      e * 4.0 * static_cast<double>(theory::gpt_parameters(c)) +
      static_cast<double>(most_m) * static_cast<double>(c.layers) *
          static_cast<double>(theory::parity_block_activation_bytes(c, 1)) * static_cast<double>(options.rows) +
      3.0 * e * rows * static_cast<double>(c.sequence) * static_cast<double>(c.vocabulary));
}

namespace {
// Every rank's action costs from the calibration: one micro-batch (`step`, costed once per
// benchmark) through the top-level layers of its stages (balanced by `parameters` as the run
// balances them), a rank's chunks averaged (the simulator costs them alike); messages as
// `measured` has them.
pp::Costs predicted_costs(const pp::Schedule& schedule, const theory::StepEstimate& step,
                          const std::vector<std::int64_t>& parameters, const pp::Costs& measured) {
  const std::vector<model::LayerRange> stages = pp::balance_stages(parameters, schedule.stage_count());
  const std::vector<int> owner = schedule.stage_ranks();
  const auto ranks = static_cast<std::size_t>(schedule.ranks.size());
  pp::Costs costs = measured;
  costs.forward.assign(ranks, 0);
  costs.backward.assign(ranks, 0);
  costs.input_grad.assign(ranks, 0);
  costs.weight_grad.assign(ranks, 0);
  std::vector<int> held(ranks, 0);
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const auto r = static_cast<std::size_t>(owner[s]);
    ++held[r];
    for (int l = stages[s].begin; l < stages[s].end; ++l) {
      const theory::LayerCost& cost = step.layer_costs.at(static_cast<std::size_t>(l));
      costs.forward[r] += cost.forward_s;
      costs.backward[r] += cost.backward_s;
      costs.input_grad[r] += cost.backward_s - cost.weight_grad_s;
      costs.weight_grad[r] += cost.weight_grad_s;
    }
  }
  for (std::size_t r = 0; r < ranks; ++r)
    for (std::vector<double>* v : {&costs.forward, &costs.backward, &costs.input_grad, &costs.weight_grad})
      (*v)[r] /= std::max(held[r], 1);
  return costs;
}
}  // namespace

PipelineBenchOutcome run_pipeline_bench(Session& session, const PipelineBenchPlan& plan, const PipelineBenchOptions& options,
                                        const PointToPoint& p2p, const theory::Calibration& calibration) {
  Communicator& world = session.world();
  PipelineBenchOutcome out;
  out.p2p = p2p;
  // Ranks per host against its cores (the session's count): past them, wall-clock idle is also
  // waiting for a core.
  out.cores_per_host = static_cast<int>(session.cores_per_host());
  out.ranks_per_host = static_cast<int>(session.ranks_per_host());
  out.oversubscribed = session.oversubscribed();
  const model::GptConfig& c = plan.config;
  const double e = static_cast<double>(size_of(c.dtype));
  const double message_bytes = static_cast<double>(options.rows) * static_cast<double>(c.sequence * c.hidden) * e;
  // The prediction's parts the runs share: one micro-batch costed from the calibration, and the
  // parameters of the model's top-level layers the stages are balanced by (rank 0 predicts).
  const theory::StepEstimate micro_batch_step =
      session.is_root() ? theory::reference_gpt_step(c, options.rows, calibration, true) : theory::StepEstimate{};
  const std::vector<std::int64_t> layer_parameters =
      session.is_root() ? pp::layer_parameters(*model::build_gpt(c)) : std::vector<std::int64_t>{};
  Progress progress("bench pipeline", plan.runs.size(), session.is_root() && !session.options().quiet);
  // --resume: a run is its row of /bench/pipeline (keyed by its place in the plan and what it
  // ran), with its ranks' rows and its timeline (keyed by that place).
  const RowKey by_run = [](const record::Table& t, std::size_t row) {
    return std::to_string(row) + " " + t.get_str("schedule")[row] + " p" + std::to_string(t.get_i64("stages")[row]) +
           " m" + std::to_string(t.get_i64("micro_batches")[row]);
  };
  const RowKey by_index = [](const record::Table& t, std::size_t row) { return std::to_string(t.get_i64("run")[row]); };
  for (std::size_t index = 0; index < plan.runs.size(); ++index) {
    const PipelineBenchRun& run = plan.runs[index];
    const std::string what = run.schedule + " p" + std::to_string(run.stages) + " m" + std::to_string(run.micro_batches);
    progress.update(index, what);
    // Its row is journaled last (after the ranks' and the timeline's), so a row found means the
    // others were kept too.
    if (session.restore_row("/bench/pipeline", std::to_string(index) + " " + what, by_run, out.runs).found) {
      session.restore_rows("/bench/pipeline_ranks", std::to_string(index), by_index, static_cast<std::size_t>(run.stages),
                           out.ranks);
      session.restore_rows("/bench/pipeline_timeline", std::to_string(index), by_index, Session::kAnyCount, out.timeline);
      continue;
    }
    cases::PipelineCase pc;
    pc.schedule = run.schedule;
    pc.micro_batches = run.micro_batches;
    pc.chunks = options.chunks;
    pc.model = c;
    pc.precision = std::string(name_of(c.dtype));
    pc.rows_per_micro_batch = options.rows;
    auto group = first_ranks(world, run.stages);
    const std::string mine = group ? measure_run(*group, pc, options).text() : std::string();
    const std::vector<std::string> reports = world.all_gather_strings(mine);
    if (!session.is_root()) continue;

    const pp::Schedule schedule = pp::make_schedule(run.schedule, run.stages, run.micro_batches, options.chunks);
    const int p = run.stages;
    std::vector<RankReport> ranks;
    for (int r = 0; r < p; ++r) ranks.push_back(RankReport::parse(reports[static_cast<std::size_t>(r)]));
    // Measured: the span and each rank's busy time of the kept step.
    double makespan = 0;
    std::vector<double> busy(static_cast<std::size_t>(p), 0.0);
    for (int r = 0; r < p; ++r)
      for (const pp::Event& ev : ranks[static_cast<std::size_t>(r)].events)
        if (!ev.wait) {
          busy[static_cast<std::size_t>(r)] += ev.end - ev.start;
          makespan = std::max(makespan, ev.end);
        }
    // Simulated with the measured costs (a kind a rank never ran costs nothing there).
    pp::Costs costs;
    for (const RankReport& rr : ranks) {
      const auto known = [](double x) { return std::isfinite(x) ? x : 0.0; };
      costs.forward.push_back(known(rr.cost[0]));
      costs.backward.push_back(known(rr.cost[1]));
      costs.input_grad.push_back(known(rr.cost[2]));
      costs.weight_grad.push_back(known(rr.cost[3]));
    }
    if (p2p.measured) {
      costs.alpha_seconds = p2p.model.alpha_seconds;
      costs.seconds_per_byte = p2p.model.beta_seconds_per_byte;
      costs.message_bytes = message_bytes;
    }
    const pp::Timeline simulated = pp::simulate(schedule, costs);
    const double predicted_makespan =
        pp::simulate(schedule, predicted_costs(schedule, micro_batch_step, layer_parameters, costs)).makespan;
    const pp::Timeline counted = pp::validate(schedule);
    const auto mean_cost = [&](int k) {
      double sum = 0;
      int n = 0;
      for (const RankReport& rr : ranks)
        if (std::isfinite(rr.cost[k])) {
          sum += rr.cost[k];
          ++n;
        }
      return n ? sum / n : std::nan("");
    };
    const double f = mean_cost(0), b = mean_cost(1), i = mean_cost(2), w = mean_cost(3);
    const int chunks = schedule.stage_count() / p;
    double measured_bubble = 0, simulated_bubble = 0, uncertainty = 0, peak = 0, formula_peak = 0;
    const std::int64_t run_row = static_cast<std::int64_t>(out.runs.rows());
    const std::size_t first_rank_row = out.ranks.rows(), first_timeline_row = out.timeline.rows();
    for (int r = 0; r < p; ++r) {
      const RankReport& rr = ranks[static_cast<std::size_t>(r)];
      const double idle = makespan - busy[static_cast<std::size_t>(r)];
      const double formula_bytes = in_flight_bytes(schedule.ranks[static_cast<std::size_t>(r)], rr.kept, rr.released);
      measured_bubble += idle / makespan / p;
      simulated_bubble += simulated.bubble_fraction(r) / p;
      uncertainty = std::max(uncertainty, rr.uncertainty);
      peak = std::max(peak, rr.peak);
      formula_peak = std::max(formula_peak, formula_bytes);
      record::Table& t = out.ranks;
      t.put({{"run", run_row}, {"rank", r}, {"stages_held", stages_held(schedule, r)},
             {"in_flight", counted.peak_held[static_cast<std::size_t>(r)]},
             {"formula_in_flight", formula_in_flight(schedule, options.chunks, r)},
             {"peak_activation_bytes", std::llround(rr.peak)},
             {"formula_activation_bytes", std::llround(formula_bytes)},
             {"busy_seconds", busy[static_cast<std::size_t>(r)]}, {"idle_seconds", idle},
             {"measured_bubble", idle / makespan}, {"simulated_bubble", simulated.bubble_fraction(r)},
             {"forward_seconds", rr.cost[0]}, {"backward_seconds", rr.cost[1]}, {"input_grad_seconds", rr.cost[2]},
             {"weight_grad_seconds", rr.cost[3]}, {"clock_offset_seconds", rr.offset},
             {"clock_uncertainty_seconds", rr.uncertainty}});
      const auto interval = [&](const char* source, int stage, const char* work, int micro_batch, double start, double end) {
        record::Table& tl = out.timeline;
        tl.put({{"run", run_row}, {"source", source}, {"rank", r}, {"stage", stage}, {"work", work},
                {"micro_batch", micro_batch}, {"start_seconds", start}, {"end_seconds", end}});
      };
      for (const pp::Event& ev : rr.events)
        interval("measured", ev.action.stage, ev.wait ? "wait" : work_name(ev.action.work), ev.action.micro_batch, ev.start, ev.end);
      for (const pp::Interval& iv : simulated.ranks[static_cast<std::size_t>(r)])
        interval("simulated", iv.action.stage, work_name(iv.action.work), iv.action.micro_batch, iv.start, iv.end);
    }
    record::Table& t = out.runs;
    t.put({{"schedule", run.schedule}, {"model", plan.model}, {"config", c.describe()}, {"stages", p},
           {"chunks", chunks}, {"micro_batches", run.micro_batches}, {"rows_per_micro_batch", options.rows},
           {"world_size", world.size()}, {"step_seconds", ranks[0].step}, {"makespan_seconds", makespan},
           {"simulated_makespan_seconds", simulated.makespan}, {"measured_bubble", measured_bubble},
           {"simulated_bubble", simulated_bubble},
           {"closed_form_bubble", closed_form_bubble(schedule, options.chunks, f, i, w)},
           {"clock_uncertainty_seconds", uncertainty}, {"forward_seconds", f}, {"backward_seconds", b},
           {"input_grad_seconds", i}, {"weight_grad_seconds", w}, {"message_seconds", costs.message_seconds()},
           {"activation_message_bytes", message_bytes}, {"peak_activation_bytes", std::llround(peak)},
           {"formula_activation_bytes", std::llround(formula_peak)}, {"predicted_makespan_seconds", predicted_makespan},
           {"predicted_over_measured", session.oversubscribed() ? std::nan("") : predicted_makespan / makespan}});
    // Kept if the run is cut short; the run's row last, as the mark that its ranks' rows and
    // timeline are complete.
    session.record_rows({{"/bench/pipeline_ranks", &out.ranks, first_rank_row},
                         {"/bench/pipeline_timeline", &out.timeline, first_timeline_row},
                         {"/bench/pipeline", &t, t.rows() - 1}});
  }
  progress.finish();
  if (session.is_root() && !session.options().quiet)
    std::fprintf(stderr, "[bench pipeline] %zu runs (%zu schedule and m pairs the schedule cannot take skipped)%s\n",
                 out.runs.rows(), plan.skipped,
                 out.oversubscribed ? "; ranks outnumber cores: compare the simulated bubble" : "");
  return out;
}

void record_pipeline_bench(Session& session, const PipelineBenchOutcome& outcome, const PipelineBenchOptions& options) {
  if (!session.is_root()) return;
  auto& file = session.results();
  file.write_table(outcome.runs);
  file.write_table(outcome.ranks);
  file.write_table(outcome.timeline);
  const std::string g = "/bench/pipeline";
  file.set_attribute(g, "timed_steps", static_cast<std::int64_t>(options.steps));
  file.set_attribute(g, "warmup_steps", static_cast<std::int64_t>(options.warmup));
  file.set_attribute(g, "alpha_s", outcome.p2p.measured ? outcome.p2p.model.alpha_seconds : std::nan(""));
  file.set_attribute(g, "beta_s_per_byte", outcome.p2p.measured ? outcome.p2p.model.beta_seconds_per_byte : std::nan(""));
  file.set_attribute(g, "cores_per_host", static_cast<std::int64_t>(outcome.cores_per_host));
  file.set_attribute(g, "ranks_per_host", static_cast<std::int64_t>(outcome.ranks_per_host));
  const bool oversubscribed = outcome.oversubscribed;
  file.set_attribute(g, "oversubscribed", static_cast<std::int64_t>(oversubscribed ? 1 : 0));
  file.set_attribute(g, "note",
                     oversubscribed ? std::string("ranks outnumber cores on a host (") + std::to_string(outcome.ranks_per_host) +
                                          " ranks, " + std::to_string(outcome.cores_per_host) +
                                          " cores): a rank also waits for a core, so measured idle means little; compare "
                                          "the simulated bubble (the simulator fed with the measured action costs)"
                                    : std::string("one core or more per rank: measured idle is waiting for messages"));
  file.set_attribute(g, "formulas",
                     std::string("theory/pipeline.hpp: bubble (idle over step) GPipe and 1F1B (p-1)/(m+p-1); interleaved "
                                 "x/(1+x), x = (p-1)/(v m); ZB-H1 x/(1+x), x = (p-1)(F+I-W)/(m(F+I+W)); in flight GPipe m, "
                                 "1F1B min(m, p-r), interleaved min(m v, 2(p-r-1)+(v-1)p+1) chunks"));
}

namespace {

class BenchPipeline final : public CommandWith<PipelineBenchOptions> {
 public:
  BenchPipeline()
      : CommandWith({.name = "bench pipeline",
                     .help = "Pipeline schedules on real ranks against m (and p): step time, each rank's timeline on "
                             "aligned clocks, measured bubble beside the simulator fed with the measured action costs and "
                             "the closed form, peak activation bytes per rank beside the in-flight formula",
                     .order = 70,
                     .in_run = true,
                     .tables = {&kPipelineBenchTable, &kPipelineRanksTable, &kPipelineTimelineTable, &kPointToPointTable,
                                &kCalibrateTable},
                     .resume_probe = ResumeProbe{{"-q", "--np", "2", "--schedules", "gpipe,1f1b,zb-h1", "--steps", "3", "--warmup", "0"},
                                                 "bench/pipeline",
                                                 "schedule,stages,chunks,micro_batches,activation_message_bytes",
                                                 {1, 4},
                                                 "TERM",
                                                 {"bench/point_to_point", "bench/pipeline_ranks"}}}) {}

  void declare(CommandOptions& o) override {
    PipelineBenchOptions& p = options_;
    std::string names;
    for (const auto& n : parallel::pipeline::schedule_names()) names += (names.empty() ? "" : ", ") + n;
    o.add("--schedules", p.schedules, "Schedules, comma-separated: " + names);
    o.add("-p,--stages", p.stages, "Pipeline ranks p, comma-separated; each runs on the first p ranks [default: 2, 4, "
                                   "8, ... below the world, and the world]");
    o.add("-m,--micro-batches", p.micro_batches, "Micro-batches m, comma-separated [default: p, 2p, 4p]; a schedule "
                                                 "skips an m it cannot take");
    o.add("-v,--chunks", p.chunks, "Chunks per rank of interleaved");
    o.add("--model", p.model, "GPT preset:" + model_presets_help());
    o.add("--layers", p.layers, "Transformer blocks [default: the preset's, at least as many as the most stages]");
    o.add("--rows", p.rows, "Sequences per micro-batch");
    o.add("--steps", p.steps, "Timed steps (the one of median makespan is kept)", {1, 2});
    o.add("--warmup", p.warmup, "Untimed steps first");
    o.add("--dtype", p.dtype, "float32 or float64");
  }

  std::optional<int> prepare(std::optional<int> world_size) override {
    if (world_size) plan_pipeline_bench(options_, *world_size);  // refused before ranks start
    return std::nullopt;
  }

  int execute(Job& job) override {
    Session& s = job.session;
    const PipelineBenchPlan plan = plan_pipeline_bench(options_, s.world().size());
    s.admit(pipeline_bench_bytes_per_rank(plan, options_), "the pipeline benchmark");
    const PointToPoint& p2p = job.point_to_point(1 << 20);  // the source of the simulated messages
    record_pipeline_bench(s, run_pipeline_bench(s, plan, options_, p2p, job.calibration(plan.config.dtype)), options_);
    return kExitOk;
  }
};

const RegisteredCommand<BenchPipeline> kBenchPipeline;

}  // namespace
}  // namespace parity::cli
