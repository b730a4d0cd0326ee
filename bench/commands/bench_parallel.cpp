// parity bench memory and parity bench scaling: data parallelism and ZeRO measured on the
// ranks given, at every world size from 1 to the job's (ranks beyond the world size in use
// wait), beside the formulas of theory/parallel.hpp.
//   memory:  peak bytes per category on every rank during a training step, per strategy (DP,
//            ZeRO-1/2/3) and precision, with the model-state formula (which must match) and
//            the bytes each rank sent against 2 Psi (n-1)/n or 3 Psi (n-1)/n.
//   scaling: strong (fixed global batch) and weak (fixed rows per rank) scaling of a DP step,
//            Amdahl fit, alpha-beta prediction of the gradient all-reduce; and the fraction of
//            communication that bucketed overlap hides behind backward.
#include "bench/commands/bench_parallel.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "bench/cli/progress.hpp"
#include "bench/cli/shared.hpp"
#include "bench/cli/sizes.hpp"
#include "bench/commands/bench_model.hpp"
#include "bench/commands/command.hpp"
#include "bench/commands/presets.hpp"
#include "reference/core/error.hpp"
#include "reference/core/text.hpp"
#include "reference/parallel/data/data_parallel.hpp"
#include "reference/parallel/techniques/techniques.hpp"
#include "reference/theory/model.hpp"
#include "reference/theory/parallel.hpp"

namespace parity::cli {
namespace {

// What a strategy trains: the model, how to make its batches, the optimizer.
struct Workload {
  std::string name, config;
  std::unique_ptr<model::Model> model;
  parallel::BatchSource batches;
  std::unique_ptr<model::Optimizer> optimizer;
  std::int64_t tokens_per_row = 1;
};

model::MlpConfig mlp_for(DataType dtype) {
  return {.inputs = 256, .width = 1024, .outputs = 256, .layers = 4, .dtype = dtype};
}

Workload make_workload(const std::string& model_name, parallel::Precision precision, DataType dtype, MemorySpace space) {
  Workload w;
  w.name = model_name;
  const DataType type = precision == parallel::Precision::mixed ? DataType::bfloat16 : dtype;
  if (model_name == "mlp") {
    const model::MlpConfig m = mlp_for(type);
    w.config = m.describe();
    w.model = model::build_mlp(m);
    w.batches = parallel::batches_of(m);
  } else {
    model::GptConfig g = find_model_preset(model_name).config;
    g.dtype = type;
    w.config = g.describe();
    w.model = model::build_gpt(g);
    w.batches = parallel::batches_of(g);
    w.tokens_per_row = g.sequence;
  }
  w.model->to(space);
  const DataType state = precision == parallel::Precision::mixed ? DataType::float32 : type;
  w.optimizer = std::make_unique<model::AdamW>(model::AdamWConfig{}, state);
  return w;
}

// The model's description and parameter count, from its config alone (no model is built).
struct WorkloadShape {
  std::string config;
  std::int64_t parameters = 0;
};
WorkloadShape shape_of(const std::string& model_name, DataType dtype) {
  if (model_name == "mlp") {
    const model::MlpConfig m = mlp_for(dtype);
    return {m.describe(), theory::mlp_parameters(m)};
  }
  model::GptConfig g = find_model_preset(model_name).config;
  g.dtype = dtype;
  return {g.describe(), theory::gpt_parameters(g)};
}


}  // namespace

ParallelBenchPlan plan_parallel_bench(const ParallelBenchOptions& options) {
  ParallelBenchPlan plan;
  if (options.batch < 1) throw UsageError("--batch must be at least 1");
  if (options.weak_batch < 1) throw UsageError("--weak-batch must be at least 1");
  if (options.steps < 1) throw UsageError("--steps must be at least 1");
  if (options.warmup < 0) throw UsageError("--warmup must not be negative");
  if (options.model != "mlp") find_model_preset(options.model);
  for (const std::string& s : split_names(options.strategies, "--strategies")) {
    const parallel::Technique* t = nullptr;
    try {
      t = &parallel::find_technique(s);
    } catch (const UsageError& e) {
      if (std::string(e.what()).rfind("ZeRO stage", 0) == 0) throw UsageError("--strategies: " + std::string(e.what()));
    }
    // The memory formulas are those of one step of synchronous data parallelism.
    if (!t || t->kind != parallel::Technique::Kind::data_parallel || t->micro_batches != 1)
      throw UsageError("--strategies: '" + s + "' is not known (dp, zero1, zero2, zero3)");
    plan.strategies.push_back(t);
  }
  if (plan.strategies.empty()) throw UsageError("--strategies names no strategy");
  for (const std::string& p : split_names(options.precisions, "--precision")) {
    parallel::parse_precision(p);  // refuses an unknown name
    plan.precisions.push_back(p);
  }
  if (plan.precisions.empty()) throw UsageError("--precision names no precision");
  for (const std::string& b : split_names(options.bucket_sizes, "--bucket-sizes")) {
    const std::size_t bytes = parse_size(b, "--bucket-sizes");
    if (bytes == 0) throw UsageError("--bucket-sizes: a gradient bucket of 0 bytes (sizes must be positive)");
    // Past any model's gradients (one bucket then), and past the int64 the file records it as.
    if (bytes > (std::size_t{1} << 40))
      throw UsageError("--bucket-sizes: " + quoted_input(b) + " is more than 1T bytes (one bucket holds every gradient long before)");
    if (std::find(plan.bucket_sizes.begin(), plan.bucket_sizes.end(), bytes) != plan.bucket_sizes.end())
      throw UsageError("--bucket-sizes names " + std::to_string(bytes) + " bytes twice");
    plan.bucket_sizes.push_back(bytes);
  }
  if (plan.bucket_sizes.empty()) throw UsageError("--bucket-sizes names no size");
  if (options.path != "reference" && options.path != "fast")
    throw UsageError("--path " + quoted_input(options.path) + " is not known (reference, fast)");
  plan.fast = options.path == "fast";
  if (!plan.fast && !options.dtype.empty())
    throw UsageError("--dtype is for --path fast (the reference path trains in float32)");
  if (plan.fast) {
    if (options.model == "mlp") throw UsageError("--path fast trains a GPT preset (--model gpt2-medium, ...), not the mlp");
    plan.dtype = options.dtype.empty() ? DataType::bfloat16 : parse_data_type(options.dtype);
    if (plan.dtype != DataType::bfloat16 && plan.dtype != DataType::float16)
      throw UsageError("--dtype " + quoted_input(options.dtype) + ": --path fast trains in bfloat16 or float16");
  }
  return plan;
}

std::size_t parallel_bench_bytes_per_rank(const ParallelBenchOptions& options) {
  // Plain DP in float64 holds the most model state: 8 + 8 + 16 bytes per parameter, plus
  // activations of the batch (bounded by the model bench's own estimate for GPT presets).
  const std::int64_t parameters = shape_of(options.model, DataType::float32).parameters;
  ModelBenchOptions m;
  m.models = options.model == "mlp" ? "tiny" : options.model;
  m.batch = std::max(options.batch, options.weak_batch);
  return estimated_bytes(static_cast<double>(parameters) * 40 +
                         static_cast<double>(model_bench_bytes_per_rank(plan_model_bench(m))));
}

void check_scaling_batch(Session& session, const ParallelBenchOptions& options) {
  if (options.batch < session.world().size())
    throw UsageError("--batch " + std::to_string(options.batch) + " is smaller than the world (" +
                     std::to_string(session.world().size()) + " ranks): every rank needs at least one row");
}

namespace {
std::string memory_key(const std::string& strategy, const std::string& precision, std::int64_t world_size) {
  return strategy + "|" + precision + "|" + std::to_string(world_size);
}
std::string memory_row_key(const record::Table& t, std::size_t row) {
  return memory_key(t.get_str("strategy")[row], t.get_str("precision")[row], t.get_i64("world_size")[row]);
}
}  // namespace

MemoryBenchOutcome run_memory_bench(Session& session, const ParallelBenchPlan& plan, const ParallelBenchOptions& options) {
  Communicator& world = session.world();
  MemoryBenchOutcome out;
  record::Table& t = out.table;
  const int n_max = world.size();
  Progress progress("bench memory", static_cast<std::size_t>(n_max) * plan.strategies.size() * plan.precisions.size(),
                    session.is_root() && !session.options().quiet);
  std::size_t done = 0;
  for (const std::string& precision_name : plan.precisions) {
    const parallel::Precision precision = parallel::parse_precision(precision_name);
    const DataType dtype = precision_name == "float64" ? DataType::float64 : DataType::float32;
    for (int n = 1; n <= n_max; ++n) {
      auto group = first_ranks(world, n);
      for (const parallel::Technique* strategy : plan.strategies) {
        const int stage = strategy->zero_stage;
        progress.update(done++, strategy->name + " " + precision_name + " at " + std::to_string(n) + " ranks");
        // --resume: a block (one row per rank of the group) the interrupted run finished.
        const std::string key = memory_key(strategy->name, precision_name, n);
        const Session::Restored restored = session.restore_rows(
            "/bench/memory", key, memory_row_key, static_cast<std::size_t>(n), t,
            [](const record::Table& from, std::size_t row) -> std::int64_t { return from.get_i64("matches_formula")[row] == 0; });
        if (restored.found) {
          out.mismatches += static_cast<std::size_t>(restored.value);
          continue;
        }
        const std::size_t first_row = t.rows();
        // Values of this rank's row (zeros on waiting ranks), gathered to rank 0 below.
        std::vector<double> row(10, 0.0);
        std::string config;
        std::int64_t psi = 0, padded = 0;
        theory::StateBytes per;
        std::vector<theory::ShardedUnit> units;
        if (group) {
          Workload w = make_workload(options.model, precision, dtype, session.space());
          config = w.config;
          psi = w.model->parameter_count();
          parallel::DataParallelConfig c;
          c.zero_stage = stage;
          c.global_batch = options.batch * n;
          c.precision = precision;
          auto trainer = parallel::make_trainer(*group, *w.model, *w.optimizer, c);
          padded = trainer->parts().optimizer->padded_parameters();
          units = trainer->parts().optimizer->units();
          for (int s = 0; s < options.warmup; ++s) trainer->step(w.batches, static_cast<std::uint64_t>(s));
          // Peak during the step = what was allocated when it began + the rise above that.
          std::array<std::int64_t, kMemoryCategoryCount> at_start{};
          for (MemoryCategory category : kAllMemoryCategories)
            at_start[static_cast<std::size_t>(category)] = MemoryTracker::process().usage(category, session.space()).current;
          const PeakScope scope(session.space());
          const parallel::StepStats stats = trainer->step(w.batches, static_cast<std::uint64_t>(options.warmup));
          for (MemoryCategory category : kAllMemoryCategories) {
            const auto i = static_cast<std::size_t>(category);
            row[i] = static_cast<double>(at_start[i] + scope.peak_above_start(category));
          }
          row[6] = static_cast<double>(stats.bytes_sent);
          row[7] = stats.seconds;
          row[8] = static_cast<double>(size_of(w.model->dtype()));
          row[9] = (precision == parallel::Precision::mixed ? 4.0 : 0.0) +
                   w.optimizer->state_count() * static_cast<double>(size_of(w.optimizer->state_dtype()));
        }
        const auto config_all = world.all_gather_strings(config);
        std::vector<std::vector<double>> all(row.size());
        for (std::size_t i = 0; i < row.size(); ++i) all[i] = gather_from_ranks(world, row[i]);
        const double psi_all = gather_from_ranks(world, static_cast<double>(psi))[0];
        const double padded_all = gather_from_ranks(world, static_cast<double>(padded))[0];
        if (!session.is_root()) continue;
        // Rank 0 always takes part, so its units and sizes stand for the group.
        for (int r = 0; r < n; ++r) {
          const auto i = static_cast<std::size_t>(r);
          per.parameter = per.gradient = all[8][i];
          per.optimizer = all[9][i];
          const auto formula = strategy->model_state_bytes(static_cast<std::int64_t>(psi_all),
                                                           static_cast<std::int64_t>(padded_all), n, per);
          const auto paper = strategy->model_state_bytes(static_cast<std::int64_t>(psi_all),
                                                         static_cast<std::int64_t>(psi_all), n, per);
          const double measured = all[0][i] + all[1][i] + all[2][i];
          t.put({{"strategy", strategy->name}, {"zero_stage", stage}, {"precision", precision_name},
                 {"model", options.model}, {"config", config_all[0]}, {"world_size", n}, {"rank", r},
                 {"parameters", static_cast<std::int64_t>(psi_all)},
                 {"padded_parameters", static_cast<std::int64_t>(padded_all)}});
          for (MemoryCategory category : kAllMemoryCategories)
            t.i64(std::string(name_of(category)) + "_bytes", "B")
                .push_back(static_cast<std::int64_t>(all[static_cast<std::size_t>(category)][i]));
          t.put({{"model_state_bytes", static_cast<std::int64_t>(measured)},
                 {"formula_parameters_bytes", formula.parameters}, {"formula_gradients_bytes", formula.gradients},
                 {"formula_optimizer_state_bytes", formula.optimizer_state},
                 {"formula_model_state_bytes", formula.total()}, {"paper_model_state_bytes", paper.total()},
                 {"bytes_per_parameter_p", per.parameter}, {"bytes_per_gradient_g", per.gradient},
                 {"optimizer_bytes_K", per.optimizer}});
          const bool match = std::llround(measured) == std::llround(formula.total());
          t.i64("matches_formula").push_back(match ? 1 : 0);
          if (!match) ++out.mismatches;
          t.put({{"bytes_sent", static_cast<std::int64_t>(all[6][i])},
                 {"formula_bytes_sent", strategy->bytes_sent_per_rank(units, n, per.gradient, 1)},
                 {"step_seconds", all[7][i]}});
        }
        session.record_rows("/bench/memory", t, first_row);  // kept if the run is cut short
      }
    }
  }
  progress.finish();
  if (session.is_root() && !session.options().quiet)
    std::fprintf(stderr, "[bench memory] %zu rows; model-state bytes %s the formula%s\n", t.rows(),
                 out.mismatches ? "differ from" : "equal", out.mismatches ? " in some rows (see matches_formula)" : " in every row");
  return out;
}

namespace {
// Median step statistics of `steps` timed steps (after `warmup`) of data parallelism on `group`.
struct Timed {
  StepTiming<3> step;  // the median step; its parts compute, exposed communication and the stream's
  double bytes = 0;
  std::size_t buckets = 0;
};
Timed time_steps(Communicator& group, const ParallelBenchOptions& options, std::int64_t global_batch,
                 std::size_t bucket_bytes, bool overlap) {
  Workload w = make_workload(options.model, parallel::Precision::model, DataType::float32, group.memory_space());
  parallel::DataParallelConfig c;
  c.global_batch = global_batch;
  c.bucket_bytes = bucket_bytes;
  c.overlap = overlap;
  const auto trainer_ptr = parallel::make_trainer(group, *w.model, *w.optimizer, c);
  parallel::Trainer& trainer = *trainer_ptr;
  std::vector<StepTiming<3>> steps;
  Timed out;
  for (int s = 0; s < options.warmup + options.steps; ++s) {
    group.barrier();  // every step starts together, so the slowest rank sets its time
    const parallel::StepStats stats = trainer.step(w.batches, static_cast<std::uint64_t>(s));
    if (s < options.warmup) continue;
    steps.push_back({stats.seconds, {stats.compute_seconds, stats.exposed_comm_seconds, stats.stream_seconds}});
    out.bytes = static_cast<double>(stats.bytes_sent);
  }
  out.step = median_step(steps);
  out.buckets = dynamic_cast<const parallel::BucketedAllReduce&>(*trainer.parts().syncs.front()).bucket_parameters().size();
  return out;
}

}  // namespace

double max_over(Communicator& world, double x) {
  const auto all = gather_from_ranks(world, x);
  return *std::max_element(all.begin(), all.end());
}

void add_scaling_rows(record::Table& t, const std::string& mode, const std::string& model, const std::string& config,
                      const std::vector<ScalingPoint>& points, bool oversubscribed) {
  const bool strong = mode == "strong";
  std::vector<int> ranks;
  std::vector<double> times;
  for (const ScalingPoint& p : points) {
    ranks.push_back(p.world_size);
    times.push_back(p.step_seconds);
  }
  const double t1 = times.front();
  // Amdahl's law describes a fixed problem: fitted to strong scaling only.
  const theory::AmdahlFit fit = strong ? theory::fit_amdahl(ranks, times, t1) : theory::AmdahlFit{std::nan(""), 0, 0};
  for (const ScalingPoint& p : points) {
    const int n = p.world_size;
    t.put({{"mode", mode}, {"model", model}, {"config", config}, {"world_size", n}, {"global_batch", p.global_batch},
           {"rank_batch", p.rank_batch}, {"step_seconds", p.step_seconds},
           {"speedup", strong ? t1 / p.step_seconds : n * t1 / p.step_seconds},
           {"efficiency", strong ? theory::parallel_efficiency(t1, p.step_seconds, n) : t1 / p.step_seconds},
           {"amdahl_serial_fraction", fit.serial_fraction},
           {"amdahl_speedup", strong ? theory::amdahl_speedup(fit.serial_fraction, n) : std::nan("")},
           {"exposed_comm_seconds", p.exposed_comm_seconds}, {"predicted_comm_seconds", p.predicted_comm_seconds},
           {"bytes_sent", p.bytes_sent}, {"predicted_step_seconds", p.predicted_step_seconds},
           {"predicted_over_measured", oversubscribed ? std::nan("") : p.predicted_step_seconds / p.step_seconds}});
  }
}

void add_overlap_row(record::Table& o, const std::string& model, const OverlapPoint& p) {
  o.put({{"world_size", p.world_size}, {"model", model}, {"bucket_bytes", p.bucket_bytes}, {"buckets", p.buckets},
         {"overlap", p.overlapped ? 1 : 0}, {"step_seconds", p.step_seconds}, {"compute_seconds", p.compute_seconds},
         {"exposed_comm_seconds", p.exposed_comm_seconds}, {"stream_seconds", p.stream_seconds},
         {"comm_seconds_alone", p.comm_seconds_alone}});
  o.f64("hidden_fraction").push_back(p.overlapped && p.comm_seconds_alone > 0
                                         ? 1 - p.exposed_comm_seconds / p.comm_seconds_alone
                                         : 0.0);
}

void print_scaling_summary(const record::Table& t, std::size_t first_row) {
  const std::size_t last = t.rows() - 1;
  const std::string& mode = t.get_str("mode")[last];
  std::fprintf(stderr, "[bench scaling] %s: speedup %.2f at %lld ranks (efficiency %.2f), Amdahl serial fraction %.3f\n",
               mode.c_str(), t.get_f64("speedup")[last], static_cast<long long>(t.get_i64("world_size")[last]),
               t.get_f64("efficiency")[last], t.get_f64("amdahl_serial_fraction")[first_row]);
}

ScalingBenchOutcome run_scaling_bench(Session& session, const ParallelBenchPlan& plan, const ParallelBenchOptions& options,
                                      const PointToPoint& p2p, const theory::Calibration& calibration) {
  Communicator& world = session.world();
  ScalingBenchOutcome out;
  const int n_max = world.size();
  const std::size_t bucket = plan.bucket_sizes.empty() ? parallel::DataParallelConfig{}.bucket_bytes : plan.bucket_sizes.back();
  Progress progress("bench scaling", 2 * static_cast<std::size_t>(n_max) + 2 * plan.bucket_sizes.size(),
                    session.is_root() && !session.options().quiet);
  std::size_t done = 0;
  // Gradient bytes and buckets, for the alpha-beta prediction of the all-reduces.
  const WorkloadShape shape = shape_of(options.model, DataType::float32);
  const double gradient_bytes = static_cast<double>(shape.parameters) * 4;
  const AlgorithmDescriptor& ring = find_algorithm(Collective::all_reduce, "ring");
  const RowKey by_mode = [](const record::Table& t, std::size_t row) { return t.get_str("mode")[row]; };
  const RowKey by_bucket = [](const record::Table& t, std::size_t row) { return std::to_string(t.get_i64("bucket_bytes")[row]); };
  for (const char* mode : {"strong", "weak"}) {
    const bool strong = std::string(mode) == "strong";
    // --resume: a mode the interrupted run finished (its rows are fitted together).
    if (session.restore_rows("/bench/scaling", mode, by_mode, static_cast<std::size_t>(n_max), out.scaling).found) {
      done += static_cast<std::size_t>(n_max);
      continue;
    }
    const std::size_t first_row = out.scaling.rows();
    std::vector<Timed> rows;  // at 1, 2, ..., n_max ranks
    for (int n = 1; n <= n_max; ++n) {
      progress.update(done++, std::string(mode) + " scaling at " + std::to_string(n) + " ranks");
      const std::int64_t global = strong ? options.batch : options.weak_batch * n;
      auto group = first_ranks(world, n);
      Timed timed;
      if (group) timed = time_steps(*group, options, global, bucket, true);
      timed.step = slowest_rank_step(world, timed.step);
      timed.buckets = static_cast<std::size_t>(max_over(world, static_cast<double>(timed.buckets)));
      rows.push_back(timed);
    }
    std::vector<ScalingPoint> points;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const int n = static_cast<int>(i) + 1;
      // Ring all-reduce of every bucket: 2(n-1) alpha + 2(n-1)/n bytes beta each.
      const double per_bucket = gradient_bytes / static_cast<double>(std::max<std::size_t>(rows[i].buckets, 1));
      // At the efficiency the job's all-reduce reached at the bucket's size.
      const double predicted = p2p.measured ? static_cast<double>(rows[i].buckets) *
                                                  ring.predicted_seconds(n, per_bucket, p2p.model) /
                                                  calibration.collective_efficiency_at(per_bucket, 1.0)
                                            : std::nan("");
      const std::int64_t global = strong ? options.batch : options.weak_batch * n;
      // The slowest rank's (the largest shard's) step from the calibration, the buckets'
      // all-reduces overlapped with its backward.
      const std::int64_t rows_on_rank = parallel::batch_shard(global, 0, n).rows;
      const theory::StepEstimate compute =
          options.model == "mlp" ? theory::reference_mlp_step(mlp_for(DataType::float32), rows_on_rank, calibration, true)
                                 : theory::reference_gpt_step(find_model_preset(options.model).config, rows_on_rank, calibration, true);
      const int buckets = static_cast<int>(std::max<std::size_t>(rows[i].buckets, 1));
      const double step = compute.total() + (n == 1 ? 0.0
                                                    : theory::overlapped_exposed_seconds(compute.backward_s, buckets,
                                                                                         predicted / buckets));
      points.push_back({n, global, rows_on_rank, rows[i].step.seconds, rows[i].step.parts[1], n == 1 ? 0.0 : predicted,
                        static_cast<std::int64_t>(rows[i].bytes), max_over(world, step)});
    }
    add_scaling_rows(out.scaling, mode, options.model, shape.config, points, session.oversubscribed());
    session.record_rows("/bench/scaling", out.scaling, first_row);  // kept if the run is cut short
    if (session.is_root() && !session.options().quiet)
      print_scaling_summary(out.scaling, first_row);
  }
  // Overlap at the full world: each bucket size with and without starting all-reduces in backward.
  for (std::size_t bytes : plan.bucket_sizes) {
    if (session.restore_rows("/bench/overlap", std::to_string(bytes), by_bucket, 2, out.overlap).found) {
      done += 2;
      continue;
    }
    const std::size_t first_row = out.overlap.rows();
    Timed off, on;
    progress.update(done++, "overlap off, buckets of " + std::to_string(bytes) + " B");
    off = time_steps(world, options, options.batch, bytes, false);
    progress.update(done++, "overlap on, buckets of " + std::to_string(bytes) + " B");
    on = time_steps(world, options, options.batch, bytes, true);
    // Each the slowest rank's median step with its parts; the communication alone is that of the
    // step without overlap.
    const StepTiming<3> without = slowest_rank_step(world, off.step), with = slowest_rank_step(world, on.step);
    const double alone = without.parts[1];
    for (const Timed* t : {&off, &on}) {
      const bool overlapped = t == &on;
      const StepTiming<3>& s = overlapped ? with : without;
      add_overlap_row(out.overlap, options.model,
                      {n_max, static_cast<std::int64_t>(bytes), static_cast<std::int64_t>(t->buckets), overlapped,
                       s.seconds, s.parts[0], s.parts[1], s.parts[2], alone});
    }
    session.record_rows("/bench/overlap", out.overlap, first_row);  // kept if the run is cut short
  }
  progress.finish();
  out.p2p = p2p;
  return out;
}

void record_memory_bench(Session& session, const MemoryBenchOutcome& memory) {
  if (!session.is_root()) return;
  auto& file = session.results();
  file.write_table(memory.table);
  file.set_attribute("/bench/memory", "model_state_formula",
                     std::string("Rajbhandari et al. 2020 with per-unit padding P: dp (p+g+K)Psi; zero1 (p+g)P + K P/n; "
                                 "zero2 p P + (g+K) P/n; zero3 (p+g+K) P/n"));
}

void record_scaling_bench(Session& session, const ScalingBenchOutcome& scaling) {
  if (!session.is_root()) return;
  auto& file = session.results();
  file.write_table(scaling.scaling);
  if (scaling.overlap.rows()) file.write_table(scaling.overlap);
  file.set_attribute("/bench/scaling", "alpha_s", scaling.p2p.measured ? scaling.p2p.model.alpha_seconds : std::nan(""));
  file.set_attribute("/bench/scaling", "beta_s_per_byte", scaling.p2p.measured ? scaling.p2p.model.beta_seconds_per_byte : std::nan(""));
  file.set_attribute("/bench/scaling", "alpha_beta_source",
                     std::string(scaling.p2p.measured ? "ping-pong between ranks 0 and 1 in this run (/bench/point_to_point)"
                                                      : "not measured (one rank)"));
}

namespace {

// What both commands share: their options, the ones both take, and the plan checked before any
// rank starts.
class ParallelBenchCommand : public CommandWith<ParallelBenchOptions> {
 public:
  using CommandWith::CommandWith;
  std::optional<int> prepare(std::optional<int>) override {
    plan_parallel_bench(options_);
    return std::nullopt;
  }

 protected:
  void declare_steps(CommandOptions& o) {
    o.add("--steps", options_.steps, "Timed steps (scaling: the median is reported; memory: the last is measured)",
          {2, 3});
    o.add("--warmup", options_.warmup, "Untimed steps first");
  }
};

class BenchMemory final : public ParallelBenchCommand {
 public:
  BenchMemory()
      : ParallelBenchCommand({.name = "bench memory",
                              .help = "Peak bytes per category on every rank for data parallelism and ZeRO stages 1-3 "
                                      "at world sizes 1 to --np, beside the ZeRO paper's model-state formulas (which "
                                      "must match), and the bytes each rank sent",
                              .order = 40,
                              .in_run = true,
                              .tables = {&kMemoryBenchTable},
                              .resume_probe = ResumeProbe{{"-q", "--np", "2", "--model", "tiny", "--batch", "2", "--steps", "1", "--warmup", "0"},
                                                          "bench/memory",
                                                          "strategy,zero_stage,precision,world_size,rank,model_state_bytes,matches_formula",
                                                          {3, 10}}}) {}

  void declare(CommandOptions& o) override {
    ParallelBenchOptions& p = options_;
    o.add("--model", p.model, "mlp (" + model::MlpConfig{256, 1024, 256, 4}.describe() +
                                  ") or a GPT preset:" + model_presets_help());
    o.add("--strategies", p.strategies, "dp, zero1, zero2, zero3, comma-separated");
    o.add("--precision", p.precisions, "mixed (bfloat16 parameters and gradients, float32 master weights and Adam "
                                       "moments: K = 12), float32, float64; comma-separated");
    o.add("--batch", p.batch, "Rows per rank");
    declare_steps(o);
  }

  int execute(Job& job) override {
    Session& s = job.session;
    const ParallelBenchPlan plan = plan_parallel_bench(options_);
    s.admit(parallel_bench_bytes_per_rank(options_), "the memory benchmark");
    const MemoryBenchOutcome outcome = run_memory_bench(s, plan, options_);
    record_memory_bench(s, outcome);
    return outcome.mismatches ? kExitFailed : kExitOk;
  }
};

class BenchScaling final : public ParallelBenchCommand {
 public:
  BenchScaling()
      : ParallelBenchCommand({.name = "bench scaling",
                              .help = "Strong and weak scaling of a data-parallel training step at 1 to --np ranks "
                                      "(speedup, efficiency, Amdahl fit, alpha-beta prediction of the gradient "
                                      "all-reduce) and the communication hidden by overlapping bucketed all-reduces "
                                      "with backward",
                              .order = 50,
                              .in_run = true,
                              .tables = {&kScalingBenchTable, &kOverlapBenchTable, &kPointToPointTable,
                                         &kCalibrateTable, &kCalibrateLinksTable, &kCalibrateCollectivesTable},
                              // Cut in the overlap sweep: the scaling modes before it are taken whole.
                              .resume_probe = ResumeProbe{{"-q", "--np", "2", "--steps", "3", "--warmup", "0", "--bucket-sizes", "64K,512K,4M"},
                                                          "bench/overlap",
                                                          "world_size,bucket_bytes,overlap,buckets",
                                                          {1, 2},
                                                          "TERM",
                                                          {"bench/point_to_point", "bench/scaling"}}}) {
    options_.model = "tiny";
    options_.precisions = "float32";  // scaling trains in float32
  }

  void declare(CommandOptions& o) override {
    ParallelBenchOptions& p = options_;
    o.add("--model", p.model, "mlp, or a GPT preset, trained in float32 (--path fast: in 16 bits; a GPT preset):" + model_presets_help());
    o.add("--batch", p.batch, "Global batch (rows) of strong scaling; at least the number of ranks");
    o.add("--weak-batch", p.weak_batch, "Rows per rank of weak scaling");
    o.add("--bucket-sizes", p.bucket_sizes,
          "Gradient bucket sizes for the overlap measurement at the full world, comma-separated (K, M suffixes; "
          "the reference path: the fast path sums a layer's gradients at a time)",
          {"64K", "64K,1M"});
    o.add("--path", p.path,
          "reference (the conformance ops in float32, any device) or fast (a GPT preset in 16 bits on tensor cores, "
          "--device cuda only: the ranks are one data-parallel job, strong scaling at the world sizes that divide "
          "--batch, and the overlap measured with the gradients' sums beside backward and after it)");
    o.add("--dtype", p.dtype, "With --path fast: bfloat16 (the default) or float16");
    declare_steps(o);
  }

  int execute(Job& job) override {
    Session& s = job.session;
    const ParallelBenchPlan plan = plan_parallel_bench(options_);
    check_scaling_batch(s, options_);
    if (plan.fast) {
      if (!s.on_gpu()) throw UsageError("--path fast runs on GPUs only: add --device cuda");
      s.admit(fast_scaling_bench_bytes(plan, options_), "the fast scaling benchmark");
      const PointToPoint& p2p = job.point_to_point(1 << 20);
      theory::Calibration links;  // the collectives' efficiencies alone: the compute runs no reference op
      links.collective_efficiency = job.collective_efficiency();
      record_scaling_bench(s, run_fast_scaling_bench(s, plan, options_, p2p, links));
      return kExitOk;
    }
    s.admit(parallel_bench_bytes_per_rank(options_), "the scaling benchmark");
    const PointToPoint& p2p = job.point_to_point(1 << 20);  // the source of the alpha-beta predictions
    const theory::Calibration calibration = job.calibration_with_collectives(DataType::float32);
    record_scaling_bench(s, run_scaling_bench(s, plan, options_, p2p, calibration));
    return kExitOk;
  }
};

const RegisteredCommand<BenchMemory> kBenchMemory;
const RegisteredCommand<BenchScaling> kBenchScaling;

}  // namespace
}  // namespace parity::cli
