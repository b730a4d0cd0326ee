// parity bench tensor: tensor parallelism (with and without sequence parallelism) of a fixed
// GPT against the tensor-parallel size t. Each size runs on the first t ranks (the others wait),
// or one grid (--grid tp=..,dp=..) runs on every rank. TensorMeasured beside theory/tensor.hpp:
//   - the step: time, tokens/s, the time in the tp group's collectives (its share of the step),
//     and their alpha-beta prediction from a ping-pong in the same run;
//   - bytes a rank sent per step in the tp group, per layer (embedding, block, head, loss),
//     against the formula (must match exactly);
//   - activation bytes a rank keeps per block, measured by the memory tracker, against parity's
//     formula (must match) and Korthikanti's 16-bit figure;
//   - parameters and optimizer-state bytes per rank against the sharded count (must match).
#include "bench/commands/bench_tensor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "bench/cli/progress.hpp"
#include "bench/cli/shared.hpp"
#include "bench/commands/command.hpp"
#include "bench/commands/presets.hpp"
#include "reference/core/error.hpp"
#include "reference/cuda/device.hpp"
#include "reference/parallel/grid.hpp"
#include "reference/parallel/techniques/techniques.hpp"
#include "reference/parallel/tensor/tensor_parallel.hpp"
#include "reference/theory/collectives.hpp"
#include "reference/theory/model.hpp"
#include "reference/theory/tensor.hpp"

namespace parity::cli {
namespace {

using parallel::Axis;

std::vector<bool> parse_sequence_parallel(const std::string& text) {
  std::vector<bool> out;
  for (const std::string& s : split_names(text, "--sp")) {
    if (s == "off") out.push_back(false);
    else if (s == "on") out.push_back(true);
    else throw UsageError("--sp: '" + s + "' is not known (off, on, or both: off,on)");
  }
  if (out.empty()) throw UsageError("--sp names neither off nor on");
  return out;
}

model::GptConfig config_of(const TensorBenchOptions& options) {
  model::GptConfig c = find_model_preset(options.model).config;
  c.dtype = parse_data_type(options.dtype);
  if (c.dtype != DataType::float32 && c.dtype != DataType::float64)
    throw UsageError("--dtype " + options.dtype + ": models train in float32 or float64");
  return c;
}



// What one run measured on the group's first rank.
struct TensorMeasured {
  StepTiming<1> step;  // its median step and, the part, the time in the tp group's collectives
  double embedding = 0, block = 0, head = 0, loss = 0;
  double activation = 0, parameters = 0, optimizer_bytes = 0;
};


// --resume: a row of /bench/tensor is found by its grid and whether sequence parallelism was on.
std::string tensor_key(std::int64_t tp, std::int64_t dp, bool sequence_parallel) {
  return std::to_string(tp) + "|" + std::to_string(dp) + "|" + (sequence_parallel ? "sp" : "nosp");
}
std::string tensor_row_key(const record::Table& t, std::size_t row) {
  return tensor_key(t.get_i64("tp")[row], t.get_i64("dp")[row], t.get_i64("sequence_parallel")[row] != 0);
}
}  // namespace

void check_tensor_bench_options(const TensorBenchOptions& options) {
  if (options.batch < 1) throw UsageError("--batch must be at least 1");
  if (options.steps < 1) throw UsageError("--steps must be at least 1");
  if (options.warmup < 0) throw UsageError("--warmup must not be negative");
  try {
    config_of(options).validate();
  } catch (const UsageError& e) {
    throw UsageError(std::string("--model: ") + e.what());
  }
  parse_sequence_parallel(options.sequence_parallel);
  if (!options.grid.empty()) parallel::parse_grid(options.grid);
}

TensorBenchPlan plan_tensor_bench(const TensorBenchOptions& options, int world) {
  check_tensor_bench_options(options);
  TensorBenchPlan plan;
  plan.model = options.model;
  plan.config = config_of(options);
  const std::vector<bool> sp = parse_sequence_parallel(options.sequence_parallel);
  std::vector<std::pair<int, int>> grids;  // (tp, dp)
  if (!options.grid.empty()) {
    const parallel::GridSpec spec = parallel::parse_grid(options.grid);
    for (Axis a : {Axis::cp, Axis::ep, Axis::pp})
      if (spec.size(a) != 1)
        throw UsageError("--grid " + options.grid + ": bench tensor runs tp and dp; " + std::string(parallel::name_of(a)) +
                         " must be 1");
    parallel::GridLayout(spec, world);  // refuses a grid that is not the world
    grids.emplace_back(spec.size(Axis::tp), spec.size(Axis::dp));
  } else if (!options.sizes.empty()) {
    for (const int t : parse_whole_numbers(options.sizes, "--tp")) {
      if (t > world) throw UsageError("--tp " + std::to_string(t) + " exceeds the world of " + std::to_string(world) + " ranks");
      grids.emplace_back(t, 1);
    }
  } else {
    // Every size the world holds that divides the model (and, for SP, its sequence).
    for (int t = 1; t <= world; ++t) {
      bool fits = true;
      try {
        parallel::validate_tensor_parallel(plan.config, t, false);
      } catch (const UsageError&) {
        fits = false;
      }
      if (fits) grids.emplace_back(t, 1);
    }
  }
  for (const auto& [t, dp] : grids)
    for (bool on : sp) {
      // In a sweep, SP is for sizes above 1 (a size of 1 has nothing to shard); named alone, refused.
      if (on && t == 1 && (grids.size() > 1 || sp.size() > 1)) continue;
      parallel::validate_tensor_parallel(plan.config, t, on);
      plan.runs.push_back({t, dp, on});
    }
  if (plan.runs.empty()) throw UsageError("bench tensor: nothing to run (--tp and --sp name no run)");
  return plan;
}

std::size_t tensor_bench_bytes_per_rank(const TensorBenchPlan& plan, std::int64_t batch) {
  // The single device's share (t = 1) bounds every run: parameters, gradients, two AdamW
  // moments; the blocks' activations; logits and their gradient; transient [B, s, h] tensors.
  const auto& c = plan.config;
  const double e = static_cast<double>(size_of(c.dtype));
  const double b = static_cast<double>(batch), s = static_cast<double>(c.sequence), h = static_cast<double>(c.hidden);
  return estimated_bytes(
      static_cast<double>(theory::parity_block_activation_bytes(c, 1)) * b * c.layers +
      e * (4.0 * static_cast<double>(theory::gpt_parameters(c)) + 3.0 * b * s * static_cast<double>(c.vocabulary) +
           12.0 * b * s * h));
}

TensorBenchOutcome run_tensor_bench(Session& session, const TensorBenchPlan& plan, const TensorBenchOptions& options,
                                    const PointToPoint& p2p, const theory::Calibration& calibration) {
  Communicator& world = session.world();
  TensorBenchOutcome out;
  out.p2p = p2p;
  const model::GptConfig& c = plan.config;
  const std::int64_t e = static_cast<std::int64_t>(size_of(c.dtype));
  Progress progress("bench tensor", plan.runs.size(), session.is_root() && !session.options().quiet);
  for (std::size_t run_index = 0; run_index < plan.runs.size(); ++run_index) {
    const TensorBenchRun& run = plan.runs[run_index];
    const std::string label = "tp" + std::to_string(run.tp) + (run.dp > 1 ? " x dp" + std::to_string(run.dp) : "") +
                              (run.sequence_parallel ? " sp" : "");
    progress.update(run_index, label);
    const int ranks = run.tp * run.dp;
    // --resume: a run (one row) the interrupted run finished.
    const Session::Restored restored = session.restore_row(
        "/bench/tensor", tensor_key(run.tp, run.dp, run.sequence_parallel), tensor_row_key, out.table,
        [](const record::Table& from, std::size_t row) -> std::int64_t {
          return from.get_i64("bytes_match")[row] == 0 || from.get_i64("memory_match")[row] == 0;
        });
    if (restored.found) {
      out.mismatches += static_cast<std::size_t>(restored.value);
      continue;
    }
    auto group = first_ranks(world, ranks);
    TensorMeasured m;
    if (group) {
      parallel::GridSpec spec;
      spec.set(Axis::tp, run.tp).set(Axis::dp, run.dp);
      parallel::Grid grid(*group, spec);
      parallel::TensorParallelConfig tc;
      tc.sequence_parallel = run.sequence_parallel;
      const parallel::TensorParallel tp(grid.group(Axis::tp), tc);
      auto model = parallel::build_tensor_parallel_gpt(c, tp);
      model->to(session.space());
      m.parameters = static_cast<double>(model->parameter_count());
      const parallel::RowRange rows = parallel::batch_shard(options.batch, grid.coordinate(Axis::dp), run.dp);
      // Activations a block keeps: one forward of this rank's rows, measured between its hooks.
      {
        auto& tracker = MemoryTracker::process();
        std::vector<std::int64_t> kept;
        std::int64_t before = 0;
        std::vector<std::pair<model::Layer*, model::HookId>> hooks;
        for (model::Layer* layer : model->layers())
          if (std::string(layer->kind()) == "block")
            hooks.emplace_back(layer, layer->add_hook([&](model::Layer&, model::HookPoint point, const model::PassContext&) {
              if (point == model::HookPoint::before_forward) before = tracker.usage(MemoryCategory::activations, session.space()).current;
              if (point == model::HookPoint::after_forward)
                kept.push_back(tracker.usage(MemoryCategory::activations, session.space()).current - before);
            }));
        const model::Batch batch = model::gpt_batch(c, 0, rows.first, rows.rows, options.batch).to(session.space());
        const model::PassContext context{0, 0, true, rows.first};
        const Tensor logits = model->forward(batch.inputs, context);
        model->backward(Tensor::zeros_like(logits, "dlogits", MemoryCategory::activations), context);
        for (auto& [layer, id] : hooks) layer->remove_hook(id);
        model->zero_grad();
        m.activation = kept.empty() ? 0 : static_cast<double>(*std::max_element(kept.begin(), kept.end()));
      }
      const std::int64_t state_before = MemoryTracker::process().usage(MemoryCategory::optimizer_state, session.space()).current;
      model::AdamW optimizer({}, c.dtype);
      parallel::DataParallelConfig dc;
      dc.global_batch = options.batch;
      auto trainer = parallel::make_tensor_parallel_trainer(grid, tp, *model, optimizer, dc);
      m.optimizer_bytes = static_cast<double>(
          MemoryTracker::process().usage(MemoryCategory::optimizer_state, session.space()).current - state_before);
      std::vector<StepTiming<1>> steps;
      const parallel::BatchSource source = parallel::batches_of(c);
      for (int s = 0; s < options.warmup + options.steps; ++s) {
        group->barrier();  // every step starts together, so the slowest rank sets its time
        tp.reset_counters();
        const parallel::StepStats stats = trainer->step(source, static_cast<std::uint64_t>(s));
        if (s < options.warmup) continue;
        steps.push_back({stats.seconds, {tp.seconds()}});
      }
      m.step = median_step(steps);
      std::map<std::string, double> bytes = tp.bytes_by_layer();
      m.embedding = bytes["embedding"];
      m.head = bytes["lm_head"];
      m.loss = bytes["loss"];
      for (int i = 0; i < c.layers; ++i) m.block += bytes["blocks." + std::to_string(i)] / c.layers;
    }
    // The slowest rank's median step and its communication; the first rank's counts (every rank's
    // are the same by construction of the shards).
    auto root_value = [&](double x) { return gather_from_ranks(world, x)[0]; };
    const StepTiming<1> slowest = slowest_rank_step(world, m.step, ranks);
    const double step = slowest.seconds, comm = slowest.parts[0];
    TensorMeasured r;
    for (auto [field, value] : {std::pair{&r.embedding, m.embedding}, {&r.block, m.block}, {&r.head, m.head},
                                {&r.loss, m.loss}, {&r.activation, m.activation}, {&r.parameters, m.parameters},
                                {&r.optimizer_bytes, m.optimizer_bytes}})
      *field = root_value(value);
    if (!session.is_root()) continue;
    const std::int64_t rank_rows = parallel::batch_shard(options.batch, 0, run.dp).rows;
    const theory::TensorParallelBytes formula = theory::tensor_parallel_bytes_per_rank(
        c, rank_rows, run.tp, run.sequence_parallel, static_cast<double>(e), static_cast<double>(theory::statistic_bytes(c.dtype)));
    const std::int64_t formula_activation =
        theory::tensor_parallel_block_activation_bytes(c, rank_rows, run.tp, run.sequence_parallel);
    const std::int64_t formula_parameters = theory::tensor_parallel_parameters_per_rank(c, run.tp);
    // The collectives on the ping-pong's link, each at the efficiency the job's collectives of
    // its kind reached at their size (the hidden states of the rank's rows).
    const double hidden_bytes = static_cast<double>(rank_rows * c.sequence * c.hidden) * static_cast<double>(e);
    const theory::TensorParallelEfficiency efficiency{calibration.collective_efficiency_at(hidden_bytes, 1.0, "all_reduce"),
                                                      calibration.collective_efficiency_at(hidden_bytes, 1.0, "all_gather"),
                                                      calibration.collective_efficiency_at(hidden_bytes, 1.0, "reduce_scatter")};
    // The regions' copies and the collectives' buffers, from the level that holds the step's
    // working set, as the step's own ops are priced.
    const theory::StepSplit split{run.tp, run.sequence_parallel, formula_parameters, {}};
    const double working_set = theory::reference_gpt_working_set(c, rank_rows, true, split);
    const theory::TensorParallelMemory memory{
        [&](double bytes) { return 2 * bytes * calibration.stream_seconds_per_byte(std::max(working_set, 2 * bytes)); },
        [&](double bytes) { return calibration.fetch_seconds(bytes, working_set); }};
    // With SP the measured time also holds the sums of the sequence-sharded gradients.
    const double gradient_sums =
        run.sequence_parallel
            ? theory::sequence_parallel_gradient_seconds(c, run.tp, static_cast<double>(e), p2p.model, efficiency.all_reduce)
            : 0.0;
    const double predicted = p2p.measured ? theory::tensor_parallel_predicted_seconds(c, rank_rows, run.tp, run.sequence_parallel,
                                                                                     static_cast<double>(e), static_cast<double>(theory::statistic_bytes(c.dtype)),
                                                                                     p2p.model, efficiency, memory) +
                                                gradient_sums
                                          : std::nan("");
    const double measured_total = r.embedding + c.layers * r.block + r.head + r.loss;
    const bool bytes_match = std::llround(r.embedding) == std::llround(formula.embedding) &&
                             std::llround(r.block) == std::llround(formula.block) &&
                             std::llround(r.head) == std::llround(formula.head) && std::llround(r.loss) == std::llround(formula.loss);
    const bool memory_match = std::llround(r.activation) == formula_activation &&
                              std::llround(r.parameters) == formula_parameters &&
                              std::llround(r.optimizer_bytes) == 2 * formula_parameters * e;
    if (!bytes_match || !memory_match) ++out.mismatches;
    record::Table& t = out.table;
    t.put({{"model", plan.model}, {"config", c.describe()}, {"tp", run.tp}, {"dp", run.dp},
           {"sequence_parallel", run.sequence_parallel ? 1 : 0}, {"world_size", ranks}, {"batch", options.batch},
           {"rank_batch", rank_rows}, {"step_seconds", step},
           {"tokens_per_second", static_cast<double>(options.batch * c.sequence) / step}, {"tp_comm_seconds", comm},
           {"compute_seconds", step - comm}, {"comm_share", comm / step},
           {"predicted_comm_seconds", run.tp == 1 ? 0.0 : predicted}, {"bytes_embedding", r.embedding},
           {"bytes_block", r.block}, {"bytes_head", r.head}, {"bytes_loss", r.loss}, {"bytes_total", measured_total},
           {"formula_bytes_embedding", formula.embedding}, {"formula_bytes_block", formula.block},
           {"formula_bytes_head", formula.head}, {"formula_bytes_loss", formula.loss},
           {"formula_bytes_total", formula.total(c.layers)}, {"bytes_match", bytes_match ? 1 : 0},
           {"activation_bytes_per_block", std::llround(r.activation)},
           {"formula_activation_bytes_per_block", formula_activation}});
    t.f64("korthikanti_activation_bytes_per_block", "B")
        .push_back(theory::korthikanti_tensor_parallel_activation_bytes(c.sequence, rank_rows, c.hidden, c.heads, run.tp,
                                                                        run.sequence_parallel));
    t.put({{"parameters_per_rank", std::llround(r.parameters)}, {"formula_parameters_per_rank", formula_parameters},
           {"optimizer_state_bytes", std::llround(r.optimizer_bytes)},
           {"formula_optimizer_state_bytes", 2 * formula_parameters * e}, {"memory_match", memory_match ? 1 : 0}});
    // The step predicted from rank 0's calibration: its share op by op, the tensor-parallel
    // collectives, and the gradients' ring all-reduce over dp (2 (dp - 1) messages of 1/dp).
    const double compute =
        theory::reference_gpt_step(c, rank_rows, calibration, true, split).total();
    const double gradient_bytes = static_cast<double>(formula_parameters * e);
    const double dp_comm = run.dp == 1 ? 0.0
                           : p2p.measured ? theory::ring_all_reduce_seconds(run.dp, gradient_bytes, p2p.model) /
                                                calibration.collective_efficiency_at(gradient_bytes, 1.0)
                                          : std::nan("");
    const double predicted_step = compute + (run.tp == 1 ? 0.0 : predicted) + dp_comm;
    t.put({{"predicted_step_seconds", predicted_step},
           {"predicted_over_measured", session.oversubscribed() ? std::nan("") : predicted_step / step}});
    session.record_rows("/bench/tensor", t, t.rows() - 1);  // kept if the run is cut short
  }
  progress.finish();
  if (session.is_root() && !session.options().quiet)
    std::fprintf(stderr, "[bench tensor] %zu runs; bytes, activations and parameters %s\n", out.table.rows(),
                 out.mismatches ? "differ from the formulas in some rows (see bytes_match, memory_match)"
                                : "equal the formulas in every row");
  return out;
}

void record_tensor_bench(Session& session, const TensorBenchOutcome& outcome, const TensorBenchOptions& options) {
  if (!session.is_root()) return;
  auto& file = session.results();
  file.write_table(outcome.table);
  file.set_attribute("/bench/tensor", "timed_steps", static_cast<std::int64_t>(options.steps));
  file.set_attribute("/bench/tensor", "warmup_steps", static_cast<std::int64_t>(options.warmup));
  file.set_attribute("/bench/tensor", "alpha_s", outcome.p2p.measured ? outcome.p2p.model.alpha_seconds : std::nan(""));
  file.set_attribute("/bench/tensor", "beta_s_per_byte",
                     outcome.p2p.measured ? outcome.p2p.model.beta_seconds_per_byte : std::nan(""));
  file.set_attribute("/bench/tensor", "formulas",
                     std::string("theory/tensor.hpp, docs/tensor-parallelism.md: bytes per block 8(t-1)/t bsh e (SP 10), "
                                 "embedding 2, head 2 (SP 3), loss 6(t-1)/t bs e; activations per block e(bs(4h+12h/t+4)"
                                 "+b(a/t)s^2), SP e(b(s/t)(16h+4)+b(a/t)s^2)"));
}

namespace {

class BenchTensor final : public CommandWith<TensorBenchOptions> {
 public:
  BenchTensor()
      : CommandWith({.name = "bench tensor",
                     .help = "Tensor parallelism (Megatron) with and without sequence parallelism against the "
                             "tensor-parallel size: step time, tokens/s, the tp group's communication and its alpha-beta "
                             "prediction, bytes per layer, activation and parameter bytes per rank, beside the formulas "
                             "(which must match)",
                     .order = 60,
                     .in_run = true,
                     .tables = {&kTensorBenchTable, &kPointToPointTable, &kCalibrateTable, &kCalibrateLinksTable, &kCalibrateCollectivesTable},
                     // Three blocks (tp1, tp2, tp2 with SP) at 2 ranks, cut after one and after two.
                     .resume_probe = ResumeProbe{{"-q", "--np", "2", "--steps", "5"},
                                                 "bench/tensor",
                                                 "tp,dp,sequence_parallel,bytes_total,formula_bytes_total",
                                                 {1, 2},
                                                 "TERM",
                                                 {"bench/point_to_point", "bench/calibrate_links"}}}) {}

  void declare(CommandOptions& o) override {
    TensorBenchOptions& t = options_;
    o.add("--model", t.model, "GPT preset:" + model_presets_help());
    o.add("--tp", t.sizes, "Tensor-parallel sizes, comma-separated; each runs on the first t ranks [default: every size "
                           "up to the world that divides the heads and the vocabulary]");
    o.add("--sp", t.sequence_parallel, "Sequence parallelism: off, on, or off,on (both; sizes above 1)");
    o.add("--grid", t.grid, "One grid over every rank instead of the sweep, e.g. tp=2,dp=2 (its product must be the "
                            "world size)");
    o.add("--batch", t.batch, "Sequences per step (the global batch)", {2, 2});
    o.add("--steps", t.steps, "Timed steps (the median is reported)", {1, 3});
    o.add("--warmup", t.warmup, "Untimed steps first");
    o.add("--dtype", t.dtype, "float32 or float64");
  }

  std::optional<int> prepare(std::optional<int>) override {
    check_tensor_bench_options(options_);
    return std::nullopt;
  }

  int execute(Job& job) override {
    Session& s = job.session;
    const TensorBenchPlan plan = plan_tensor_bench(options_, s.world().size());
    s.admit(tensor_bench_bytes_per_rank(plan, options_.batch), "the tensor benchmark");
    const PointToPoint& p2p = job.point_to_point(4 << 20);  // the source of the alpha-beta predictions
    const theory::Calibration calibration = job.calibration_with_collectives(plan.config.dtype);
    const TensorBenchOutcome outcome = run_tensor_bench(s, plan, options_, p2p, calibration);
    record_tensor_bench(s, outcome, options_);
    return outcome.mismatches ? kExitFailed : kExitOk;
  }
};

const RegisteredCommand<BenchTensor> kBenchTensor;

}  // namespace
}  // namespace parity::cli
