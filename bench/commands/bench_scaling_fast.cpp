// parity bench scaling --path fast: strong and weak scaling of the fast GPT step as one
// data-parallel job on the ranks' GPUs (fast_data_parallel.hpp), and the overlap of its gradient
// sums with backward at the full world, in the rows of /bench/scaling and /bench/overlap.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "bench/cli/progress.hpp"
#include "bench/cli/shared.hpp"
#include "bench/commands/bench_parallel.hpp"
#include "bench/commands/fast_data_parallel.hpp"
#include "bench/commands/presets.hpp"
#include "reference/comm/algorithms.hpp"
#include "reference/core/error.hpp"

namespace parity::cli {
namespace {

// The medians of one world size's timed steps, the slowest rank's, and what the sums moved.
struct FastTimed {
  double step = 0, exposed = 0;
  int sums = 0;
  std::uint64_t bytes = 0;
};

// The exposed time is the median step's share that the profiled step (one more, with events
// between its parts) waited for the sums: the two are different steps, so the profiled step's
// milliseconds taken as they are could exceed the median step. The slowest rank's step and its
// own exposed share are taken together (slowest_rank_step).
FastTimed time_fast_steps(Communicator& world, Communicator* group, const model::GptConfig& config, std::int64_t batch,
                          DataType dtype, bool overlap, const ParallelBenchOptions& options, const std::string& model) {
  FastTimed out;
  StepTiming<1> mine;  // zero where this rank is not in the group
  if (group) {
    const FastSteps run = run_fast_steps(*group, config, batch, dtype, overlap, options.warmup, options.steps);
    if (!std::isfinite(run.last_loss))
      throw Error("bench scaling " + model + ": the fast step's loss is not finite at " + std::to_string(group->size()) +
                  " ranks");
    mine.seconds = percentile(run.seconds, 0.5);
    // No sums: nothing exposed; a profile without time (not measured): not known.
    const double profiled = run.parts.total_ms(), share = run.parts.sync_ms / profiled;
    mine.parts[0] = !run.data_parallel ? 0.0 : profiled > 0 && share >= 0 ? mine.seconds * std::min(1.0, share) : std::nan("");
    out.sums = run.sums_per_step;
    out.bytes = run.bytes_per_step;
  }
  const StepTiming<1> slowest = slowest_rank_step(world, mine);
  out.step = slowest.seconds;
  out.exposed = slowest.parts[0];
  out.sums = static_cast<int>(max_over(world, out.sums));
  out.bytes = static_cast<std::uint64_t>(max_over(world, static_cast<double>(out.bytes)));
  return out;
}

}  // namespace

std::size_t fast_scaling_bench_bytes(const ParallelBenchPlan& plan, const ParallelBenchOptions& options) {
  const model::GptConfig& config = find_model_preset(options.model).config;
  const fast::GptShape shape = fast_shape_of(config, std::max(options.batch, options.weak_batch));
  const std::string why = fast::unsupported_reason(shape);
  if (!why.empty()) throw UsageError("--path fast cannot train " + options.model + ": " + why);
  return fast::device_bytes(shape, fast_storage_of(plan.dtype));
}

ScalingBenchOutcome run_fast_scaling_bench(Session& session, const ParallelBenchPlan& plan,
                                           const ParallelBenchOptions& options, const PointToPoint& p2p,
                                           const theory::Calibration& links) {
  Communicator& world = session.world();
  ScalingBenchOutcome out;
  const int n_max = world.size();
  const model::GptConfig& config = find_model_preset(options.model).config;
  const std::string dtype_name(name_of(plan.dtype));
  const std::string description = config.describe() + " fast " + dtype_name;
  Progress progress("bench scaling", 2 * static_cast<std::size_t>(n_max) + 2, session.is_root() && !session.options().quiet);
  std::size_t done = 0;
  const AlgorithmDescriptor& ring = find_algorithm(Collective::all_reduce, "ring");
  const RowKey by_mode = [](const record::Table& t, std::size_t row) { return t.get_str("mode")[row]; };
  // The gradients' sums a step at n ranks: every bucket (and the token table) as a ring all-reduce
  // on the ping-pong's link, at the efficiency the job's all-reduce reached at its size.
  const fast::GptShape whole = fast_shape_of(config, 1);
  std::vector<double> bucket_bytes;
  for (const fast::GradientBucket& b : fast::gradient_buckets(whole))
    bucket_bytes.push_back(static_cast<double>(b.count) * static_cast<double>(size_of(plan.dtype)));
  bucket_bytes.push_back(static_cast<double>(whole.padded_vocabulary() * whole.hidden) * 4);  // the float32 token table
  const auto predicted_comm = [&](int n) {
    if (n == 1) return 0.0;
    if (!p2p.measured) return std::nan("");
    double seconds = 0;
    for (const double bytes : bucket_bytes)
      seconds += ring.predicted_seconds(n, bytes, p2p.model) / links.collective_efficiency_at(bytes, 1.0);
    return seconds;
  };
  for (const char* mode : {"strong", "weak"}) {
    const bool strong = std::string(mode) == "strong";
    int sizes = 0;  // the world sizes this mode measures
    for (int n = 1; n <= n_max; ++n) sizes += !strong || options.batch % n == 0;
    if (session.restore_rows("/bench/scaling", mode, by_mode, static_cast<std::size_t>(sizes), out.scaling).found) {
      done += static_cast<std::size_t>(n_max);
      continue;
    }
    const std::size_t first_row = out.scaling.rows();
    std::vector<ScalingPoint> points;
    for (int n = 1; n <= n_max; ++n) {
      progress.update(done++, std::string(mode) + " scaling at " + std::to_string(n) + " ranks");
      // The replicas train equal batches (the step divides the summed gradients by their count).
      if (strong && options.batch % n != 0) {
        if (session.is_root() && !session.options().quiet)
          std::fprintf(stderr, "[bench scaling] strong scaling at %d ranks skipped: --batch %lld does not split evenly "
                               "over them (the fast path's replicas train equal batches)\n",
                       n, static_cast<long long>(options.batch));
        continue;
      }
      const std::int64_t rank_batch = strong ? options.batch / n : options.weak_batch;
      auto group = first_ranks(world, n);
      const FastTimed t = time_fast_steps(world, group.get(), config, rank_batch, plan.dtype, true, options, options.model);
      points.push_back({n, rank_batch * n, rank_batch, t.step, t.exposed, predicted_comm(n),
                        static_cast<std::int64_t>(t.bytes), std::nan("")});
    }
    add_scaling_rows(out.scaling, mode, options.model, description, points, session.oversubscribed());
    session.record_rows("/bench/scaling", out.scaling, first_row);  // kept if the run is cut short
    if (session.is_root() && !session.options().quiet) print_scaling_summary(out.scaling, first_row);
  }
  // Overlap at the full world: the sums after backward and beside it (NCCL's stream). Another
  // backend sums each bucket as it comes, the step waiting: the in-order row alone, said so.
  const bool can_overlap = world.backend() == "nccl";
  if (!can_overlap && session.is_root() && !session.options().quiet)
    std::fprintf(stderr, "[bench scaling] the %s backend cannot sum beside backward (NCCL only): the overlap is "
                         "measured in order only\n", std::string(world.backend()).c_str());
  const RowKey by_bucket = [](const record::Table& t, std::size_t row) { return std::to_string(t.get_i64("bucket_bytes")[row]); };
  double total_bytes = 0;
  for (const double b : bucket_bytes) total_bytes += b;
  const auto mean_bucket = static_cast<std::int64_t>(total_bytes / static_cast<double>(bucket_bytes.size()));
  const std::size_t overlap_rows = can_overlap ? 2 : 1;
  if (!session.restore_rows("/bench/overlap", std::to_string(mean_bucket), by_bucket, overlap_rows, out.overlap).found) {
    const std::size_t first_row = out.overlap.rows();
    progress.update(done++, "gradient sums after backward");
    const FastTimed off = time_fast_steps(world, &world, config, options.weak_batch, plan.dtype, false, options, options.model);
    std::vector<const FastTimed*> measured = {&off};
    FastTimed on;
    if (can_overlap) {
      progress.update(done++, "gradient sums beside backward");
      on = time_fast_steps(world, &world, config, options.weak_batch, plan.dtype, true, options, options.model);
      measured.push_back(&on);
    }
    for (const FastTimed* t : measured)  // (the library's stream is not timed here: stream_seconds NaN)
      add_overlap_row(out.overlap, options.model,
                      {n_max, mean_bucket, static_cast<std::int64_t>(bucket_bytes.size()), t == &on, t->step,
                       t->step - t->exposed, t->exposed, std::nan(""), off.exposed});
    session.record_rows("/bench/overlap", out.overlap, first_row);
  }
  progress.finish();
  out.p2p = p2p;
  return out;
}

}  // namespace parity::cli
