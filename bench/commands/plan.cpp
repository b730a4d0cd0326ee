// parity plan: memory and step time of a model on a cluster under every layout that fits, from
// the step model of reference/theory/planner.hpp; --validate checks it against published runs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <cstdio>

#include "bench/commands/plan.hpp"

#include "bench/cli/shared.hpp"
#include "bench/commands/command.hpp"
#include "reference/core/error.hpp"
#include "reference/core/provenance.hpp"
#include "reference/core/text.hpp"
#include "reference/parallel/pipeline/simulator.hpp"
#include "reference/record/output.hpp"
#include "reference/record/results_file.hpp"
#include "reference/theory/planner.hpp"

namespace parity::cli {

inline const record::TableSpec kPlanLayoutsTable{"/plan/layouts",
    "parity plan: every layout evaluated (or the --top ones), its memory per GPU by category and its "
    "predicted step time by part (reference/theory/planner.hpp, docs/planner.md)",
    {{"model", ColumnType::string}, {"cluster", ColumnType::string}, {"gpus", ColumnType::int64},
     {"global_batch", ColumnType::int64}, {"tp", ColumnType::int64}, {"pp", ColumnType::int64},
     {"dp", ColumnType::int64}, {"cp", ColumnType::int64}, {"ep", ColumnType::int64}, {"v", ColumnType::int64},
     {"schedule", ColumnType::string}, {"micro_batch", ColumnType::int64}, {"micro_batches", ColumnType::int64},
     {"zero", ColumnType::int64}, {"recompute", ColumnType::string}, {"sp", ColumnType::int64},
     {"parameters", ColumnType::int64}, {"params_bytes", ColumnType::float64, "B"},
     {"grads_bytes", ColumnType::float64, "B"}, {"optimizer_bytes", ColumnType::float64, "B"},
     {"activation_bytes", ColumnType::float64, "B"}, {"memory_bytes", ColumnType::float64, "B"},
     {"fits", ColumnType::int64}, {"compute_s", ColumnType::float64, "s"}, {"recompute_s", ColumnType::float64, "s"},
     {"tp_comm_s", ColumnType::float64, "s"}, {"pp_comm_s", ColumnType::float64, "s"},
     {"ep_comm_s", ColumnType::float64, "s"}, {"cp_comm_s", ColumnType::float64, "s"},
     {"bubble_s", ColumnType::float64, "s"}, {"dp_comm_s", ColumnType::float64, "s"},
     {"optimizer_s", ColumnType::float64, "s"}, {"step_time_s", ColumnType::float64, "s"},
     {"tokens_per_s", ColumnType::float64, "1/s"}, {"mfu", ColumnType::float64}, {"hfu", ColumnType::float64},
     {"tflops_per_gpu", ColumnType::float64, "TFLOP/s"},
     {"simulated", ColumnType::int64, "", false}}};

inline const record::TableSpec kPlanScalingTable{"/plan/scaling",
    "parity plan --scaling: the fastest layout that fits at each GPU count, with the global batch fixed "
    "(strong) or grown with the GPUs (weak)",
    {{"mode", ColumnType::string}, {"gpus", ColumnType::int64}, {"global_batch", ColumnType::int64},
     {"layout", ColumnType::string}, {"fits", ColumnType::int64}, {"step_time_s", ColumnType::float64, "s"},
     {"tokens_per_s", ColumnType::float64, "1/s"}, {"mfu", ColumnType::float64},
     {"speedup", ColumnType::float64}, {"efficiency", ColumnType::float64}}};

double pipeline_actions(const theory::PlanLayout& l, int micro_batches) {
  const std::string name = l.schedule != theory::PlanSchedule::one_f_one_b ? theory::name_of(l.schedule)
                           : l.v > 1                                        ? "interleaved"
                                                                            : "1f1b";
  return static_cast<double>(parallel::pipeline::action_count(name, l.pp, micro_batches, l.v));
}

theory::PlanPrediction with_simulated_pipeline(const theory::PlanLayout& l, theory::PlanPrediction p) {
  // A schedule holds every action of every rank: past about a million the closed form stands,
  // which for these uniform costs the simulator matches but for its messages' placement.
  if (l.pp == 1 || p.micro_batches < 1 || pipeline_actions(l, p.micro_batches) > kMostSimulatedActions) return p;
  namespace pl = parallel::pipeline;
  const int m = p.micro_batches;
  const pl::Schedule schedule = l.schedule == theory::PlanSchedule::zb_h1 ? pl::zb_h1(l.pp, m)
                                : l.schedule == theory::PlanSchedule::zb_h2 ? pl::zb_h2(l.pp, m)
                                : l.schedule == theory::PlanSchedule::zb_v  ? pl::zb_v(l.pp, m)
                                : l.v > 1                               ? pl::interleaved_1f1b(l.pp, m, l.v)
                                                                        : pl::one_f_one_b(l.pp, m);
  // Blocking sends, as the step model's point-to-point: an action holds its rank while its
  // output is sent, and the message is there when it ends. A split backward's input gradient
  // sends; its weight gradient (the stage's weight-gradient products) sends nothing.
  const bool split = schedule.split_backward();
  const double weight = split ? p.stage_weight_grad_s / l.v : 0;
  const pl::Costs costs =
      pl::Costs::uniform(l.pp, p.stage_forward_s / l.v + p.message_s, p.stage_backward_s / l.v - weight + p.message_s, weight);
  const double makespan = pl::simulate(schedule, costs).makespan;
  const double work = p.micro_batches * (p.stage_forward_s + p.stage_backward_s);
  const double closed_form_step = p.step_s;
  p.step_s += makespan - (work + p.pp_comm_s + p.bubble_s);
  p.bubble_s = makespan - work - p.pp_comm_s;
  p.simulated = true;
  // The rates scale with the step's inverse.
  const double faster = closed_form_step / p.step_s;
  p.tokens_per_s *= faster;
  p.mfu *= faster;
  p.hfu *= faster;
  p.tflops_per_gpu *= faster;
  return p;
}

namespace {

namespace th = theory;

// How many of the fastest layouts (by the closed form) are timed again with the simulator.
constexpr std::size_t kSimulated = 64;

// Sorts fitting layouts first, fastest first: by the closed form, then the first kSimulated
// (at least `keep`) again with the schedule simulator.
void rank_layouts(std::vector<th::PlanCandidate>& all, std::size_t keep) {
  const auto faster = [](const th::PlanCandidate& a, const th::PlanCandidate& b) {
    if (a.prediction.fits != b.prediction.fits) return a.prediction.fits;
    return a.prediction.tokens_per_s > b.prediction.tokens_per_s;
  };
  std::stable_sort(all.begin(), all.end(), faster);
  const std::size_t n = std::min(all.size(), std::max(kSimulated, keep));
  double budget = kMostSimulatedActionsInAll;
  for (std::size_t i = 0; i < n; ++i) {
    const double actions = pipeline_actions(all[i].layout, all[i].prediction.micro_batches);
    if (all[i].layout.pp == 1 || actions > budget) continue;
    budget -= actions;
    all[i].prediction = with_simulated_pipeline(all[i].layout, all[i].prediction);
  }
  std::stable_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), faster);
}

// The fastest layout that fits at every power-of-two GPU count from one node to `most`: with
// the global batch fixed (strong) and with it grown in proportion (weak; `batch` at one node).
// Speedup and efficiency are against the smallest count that fits, in tokens per second.
record::Table scaling(const th::PlanModel& m, const th::PlanCluster& c, int most, std::int64_t batch,
                      const th::PlanFixed& fixed) {
  record::Table t(kPlanScalingTable);
  std::printf("# scaling of %s on %s to %d GPUs (fastest layout that fits at each count)\n", m.name.c_str(),
              c.name.c_str(), most);
  std::printf("# %-6s %6s %8s %-36s %9s %12s %6s %8s %10s\n", "mode", "gpus", "batch", "layout", "step(s)", "tokens/s",
              "MFU", "speedup", "efficiency");
  for (const char* mode : {"strong", "weak"}) {
    double base_rate = 0;
    int base_gpus = 0;
    for (int n = c.gpus_per_node; n <= most; n *= 2) {
      const std::int64_t b = std::string(mode) == "strong" ? batch : batch * (n / c.gpus_per_node);
      const std::optional<th::PlanCandidate> best = th::plan_best(m, c, n, b, fixed);
      const double rate = best ? best->prediction.tokens_per_s : 0;
      if (best && base_gpus == 0) {
        base_rate = rate;
        base_gpus = n;
      }
      // Strong: tokens/s over the base's; weak: per GPU, against the base's per GPU.
      const double speedup = base_gpus ? rate / base_rate : 0;
      const double ideal = base_gpus ? static_cast<double>(n) / base_gpus : 0;
      const double efficiency = base_gpus ? speedup / ideal : 0;
      t.put({{"mode", mode}, {"gpus", n}, {"global_batch", b}, {"layout", best ? best->layout.describe() : ""},
             {"fits", best ? 1 : 0}, {"step_time_s", best ? best->prediction.step_s : std::nan("")},
             {"tokens_per_s", best ? rate : std::nan("")}, {"mfu", best ? best->prediction.mfu : std::nan("")},
             {"speedup", best ? speedup : std::nan("")}, {"efficiency", best ? efficiency : std::nan("")}});
      if (best)
        std::printf("  %-6s %6d %8lld %-36s %9.3f %12.4g %6.3f %8.2f %10.3f\n", mode, n, static_cast<long long>(b),
                    best->layout.describe().c_str(), best->prediction.step_s, rate, best->prediction.mfu, speedup,
                    efficiency);
      else
        std::printf("  %-6s %6d %8lld no layout fits or can run\n", mode, n, static_cast<long long>(b));
    }
  }
  return t;
}

void add_row(record::Table& t, const th::PlanModel& m, const th::PlanCluster& c, int gpus, std::int64_t batch,
             const th::PlanCandidate& x) {
  const th::PlanLayout& l = x.layout;
  const th::PlanPrediction& p = x.prediction;
  t.put({{"model", m.name}, {"cluster", c.name}, {"gpus", gpus}, {"global_batch", batch}});
  for (const auto& [name, value] : {std::pair{"tp", l.tp}, {"pp", l.pp}, {"dp", l.dp}, {"cp", l.cp}, {"ep", l.ep}, {"v", l.v}})
    t.i64(name).push_back(value);
  t.str("schedule").push_back(l.pp == 1                                 ? "none"
                              : l.schedule != th::PlanSchedule::one_f_one_b ? th::name_of(l.schedule)
                              : l.v > 1                                   ? "interleaved"
                                                                          : "1f1b");
  t.put({{"micro_batch", l.micro_batch}, {"micro_batches", p.micro_batches}, {"zero", l.zero},
         {"recompute", th::name_of(l.recompute)}, {"sp", l.sp ? 1 : 0}, {"parameters", th::plan_parameters(m)},
         {"params_bytes", p.parameter_bytes}, {"grads_bytes", p.gradient_bytes}, {"optimizer_bytes", p.optimizer_bytes},
         {"activation_bytes", p.activation_bytes}, {"memory_bytes", p.memory_bytes()}, {"fits", p.fits ? 1 : 0}});
  for (const auto& [name, value] : {std::pair{"compute_s", p.compute_s}, {"recompute_s", p.recompute_s},
                                    {"tp_comm_s", p.tp_comm_s}, {"pp_comm_s", p.pp_comm_s}, {"ep_comm_s", p.ep_comm_s},
                                    {"cp_comm_s", p.cp_comm_s},
                                    {"bubble_s", p.bubble_s},
                                    {"dp_comm_s", p.dp_comm_s}, {"optimizer_s", p.optimizer_s}, {"step_time_s", p.step_s}})
    t.f64(name, "s").push_back(value);
  t.put({{"tokens_per_s", p.tokens_per_s}, {"mfu", p.mfu}, {"hfu", p.hfu}, {"tflops_per_gpu", p.tflops_per_gpu},
         {"simulated", p.simulated ? 1 : 0}});
}

// The layout column as wide as the longest layout shown (at least 34).
void print_header(int width) {
  std::printf("# %-*s %9s %9s %8s %7s %7s %7s %7s %7s %7s %7s %7s %6s %6s %8s\n", width, "layout", "mem(GB)", "step(s)",
              "compute", "recomp", "tp", "pp", "ep", "cp", "bubble", "dp", "optim", "MFU", "HFU", "TFLOP/s");
}

// A figure in `width` columns with `decimals` decimals, or in three significant digits where that
// would not fit (a cluster description of implausible rates gives steps of 1e200 s).
std::string cell(double value, int width, int decimals) {
  char text[64];
  if (std::isfinite(value) && std::fabs(value) < std::pow(10.0, width - decimals - 2))
    std::snprintf(text, sizeof text, " %*.*f", width, decimals, value);
  else
    std::snprintf(text, sizeof text, " %*.3g", width, value);
  return text;
}

void print_row(const th::PlanCandidate& x, int width) {
  const th::PlanPrediction& p = x.prediction;
  std::string row = "  " + x.layout.describe();
  row.resize(std::max(row.size(), static_cast<std::size_t>(width) + 2), ' ');
  row += cell(p.memory_bytes() / 1e9, 9, 1) + cell(p.step_s, 9, 3) + cell(p.compute_s, 8, 3);
  for (double part : {p.recompute_s, p.tp_comm_s, p.pp_comm_s, p.ep_comm_s, p.cp_comm_s, p.bubble_s, p.dp_comm_s, p.optimizer_s})
    row += cell(part, 7, 3);
  row += cell(p.mfu, 6, 3) + cell(p.hfu, 6, 3) + cell(p.tflops_per_gpu, 8, 1);
  std::printf("%s%s\n", row.c_str(), p.fits ? "" : "  (does not fit)");
}

void explain(const th::PlanModel& m, const th::PlanCluster& c, const th::PlanCandidate& x) {
  const th::PlanPrediction& p = x.prediction;
  std::printf("# %s on %s, %s\n", m.name.c_str(), c.name.c_str(), x.layout.describe().c_str());
  std::printf("#   memory per GPU: parameters %.2f GB, gradients %.2f GB, optimizer %.2f GB, activations %.2f GB: "
              "%.2f GB of %.0f GB (%s)\n",
              p.parameter_bytes / 1e9, p.gradient_bytes / 1e9, p.optimizer_bytes / 1e9, p.activation_bytes / 1e9,
              p.memory_bytes() / 1e9, c.memory_GB, p.fits ? "fits" : "does not fit");
  std::printf("#   step %.4f s over %d micro-batches: compute %.4f (recompute %.4f), tensor-parallel %.4f, "
              "point-to-point %.4f, expert all-to-all %.4f, ring attention exposed %.4f, bubble %.4f, data-parallel %.4f, "
              "optimizer %.4f\n",
              p.step_s, p.micro_batches, p.compute_s, p.recompute_s, p.tp_comm_s, p.pp_comm_s, p.ep_comm_s, p.cp_comm_s, p.bubble_s,
              p.dp_comm_s, p.optimizer_s);
  if (p.simulated)
    std::printf("#   the pipeline (%d micro-batches, fill, drain and messages) timed by the schedule simulator\n",
                p.micro_batches);
  else if (x.layout.pp > 1)
    std::printf("#   the pipeline (%d micro-batches, fill, drain and messages) from the closed form: its schedule of "
                "%.0f actions is past what is simulated (%.0f a layout, %.0f in a search)\n",
                p.micro_batches, pipeline_actions(x.layout, p.micro_batches), kMostSimulatedActions,
                kMostSimulatedActionsInAll);
  std::printf("#   %.0f tokens/s; MFU %.3f (model FLOPs, no recompute), HFU %.3f (with the recompute forward); "
              "%.1f TFLOP/s per GPU in Megatron's convention (Narayanan et al. 2021, Eq. 3)\n",
              p.tokens_per_s, p.mfu, p.hfu, p.tflops_per_gpu);
}

// The fastest layout that fits, ranked as the search ranks (the simulated pipeline included);
// none when nothing fits.
std::optional<th::PlanCandidate> best_that_fits(const th::PlanModel& m, const th::PlanCluster& c, int gpus,
                                                std::int64_t global_batch, const th::PlanFixed& fixed) {
  std::vector<th::PlanCandidate> all = th::plan_search(m, c, gpus, global_batch, fixed);
  rank_layouts(all, 1);
  if (all.empty() || !all.front().prediction.fits) return std::nullopt;
  return all.front();
}

int validate() {
  const th::PlanCluster& c = th::plan_cluster_presets()[0];
  std::printf("# %s: predicted against published TFLOP/s per GPU (tp and pp as published, full recompute; "
              "micro-batch and interleaving searched)\n", th::published_runs().front().source);
  std::printf("# %-10s %5s %5s %6s %6s %10s %10s %8s  %s\n", "model", "tp", "pp", "gpus", "batch", "published", "predicted",
              "ratio", "best layout");
  int outside = 0;
  double sum = 0;
  for (const th::PublishedRun& run : th::published_runs()) {
    const auto best = best_that_fits(run.model, c, run.gpus, run.global_batch, th::published_fixed(run));
    if (!best) {
      std::printf("  %-10s no layout fits\n", run.model.name.c_str());
      ++outside;
      continue;
    }
    const double ratio = run.tflops_per_gpu / best->prediction.tflops_per_gpu;  // predicted / published step time
    sum += std::abs(ratio - 1);
    outside += std::abs(ratio - 1) > 0.10;
    std::printf("  %-10s %5d %5d %6d %6lld %10.0f %10.1f %8.3f  %s\n", run.model.name.c_str(), run.tp, run.pp, run.gpus,
                static_cast<long long>(run.global_batch), run.tflops_per_gpu, best->prediction.tflops_per_gpu, ratio,
                best->layout.describe().c_str());
  }
  std::printf("# mean |predicted / published step time - 1| = %.3f, %d of %zu rows outside 10%%\n",
              sum / static_cast<double>(th::published_runs().size()), outside, th::published_runs().size());
  // Runs whose whole layout is stated: nothing searched, held to 10% as well.
  const auto& timed = th::published_step_times();
  std::printf("# %s: predicted against published seconds per step, every key of the layout as the run's\n",
              timed.front().source);
  std::printf("# %-18s %6s %6s %10s %10s %8s  %s\n", "run", "gpus", "batch", "published", "predicted", "ratio", "layout");
  int timed_outside = 0;
  double timed_sum = 0;
  for (const th::PublishedStepTime& run : timed) {
    const auto best =
        best_that_fits(th::parse_plan_model(run.model), c, run.gpus, run.global_batch, th::parse_plan_fixed(run.fixed));
    if (!best) {
      std::printf("  %-18s %6d %6lld no layout fits\n", run.name.c_str(), run.gpus, static_cast<long long>(run.global_batch));
      ++timed_outside;
      continue;
    }
    const double ratio = best->prediction.step_s / run.seconds;
    timed_sum += std::abs(ratio - 1);
    timed_outside += std::abs(ratio - 1) > 0.10;
    std::printf("  %-18s %6d %6lld %10.2f %10.2f %8.3f  %s\n", run.name.c_str(), run.gpus,
                static_cast<long long>(run.global_batch), run.seconds, best->prediction.step_s, ratio,
                best->layout.describe().c_str());
  }
  const std::size_t rows = th::published_runs().size() + timed.size();
  std::printf("# mean |predicted / published step time - 1| = %.3f, %d of %zu rows outside 10%%; over both tables "
              "%.3f, %d of %zu outside\n",
              timed_sum / static_cast<double>(timed.size()), timed_outside, timed.size(),
              (sum + timed_sum) / static_cast<double>(rows), outside + timed_outside, rows);
  outside += timed_outside;
  // Beside it, not held to 10%: the fastest layout that fits with the keys each source states.
  std::printf("# beside (not held to 10%%): other published runs, the keys they state fixed, the rest searched\n");
  std::printf("# %-40s %6s %6s %10s %10s %8s  %s\n", "run", "gpus", "batch", "published", "predicted", "ratio", "best layout");
  for (const th::PublishedSpotCheck& run : th::published_spot_checks()) {
    const auto best = best_that_fits(th::parse_plan_model(run.model), th::parse_plan_cluster(run.cluster), run.gpus,
                                     run.global_batch, th::parse_plan_fixed(run.fixed));
    if (!best) {
      std::printf("  %-40s %6d %6lld no layout fits\n", run.source, run.gpus, static_cast<long long>(run.global_batch));
      continue;
    }
    const th::PlanPrediction& p = best->prediction;
    const double predicted = run.mfu ? p.mfu : p.tflops_per_gpu;
    std::printf("  %-40s %6d %6lld %10.3g %10.3g %8.3f  %s (%s)\n", run.source, run.gpus, static_cast<long long>(run.global_batch),
                run.figure, predicted, predicted / run.figure, best->layout.describe().c_str(),
                run.mfu ? "MFU" : "TFLOP/s per GPU");
  }
  return outside == 0 ? kExitOk : kExitFailed;
}

class Plan final : public Command {
 public:
  Plan()
      : Command({.name = "plan",
                 .help = "Predict memory per GPU and time per step of a model on a cluster for every parallel layout "
                         "(tp with sp, pp with v, dp with ZeRO, ep, cp, micro-batch, recompute), rank them by throughput and print "
                         "the best with their breakdown; --validate checks the model against published runs",
                 .order = 105,
                 .ranks = false,
                 .tables = {&kPlanLayoutsTable, &kPlanScalingTable}}) {}

  void declare(CommandOptions& o) override {
    std::string models, clusters;
    for (const auto& m : th::plan_model_presets()) models += " " + m.name;
    for (const auto& c : th::plan_cluster_presets()) clusters += " " + c.name;
    const Option model = o.add("--model", model_, "A preset (" + models.substr(1) + "), optionally followed by ,key=value; key=value pairs "
                             "(layers, hidden, heads, kv_heads, ffn_hidden, gated_mlp, vocab, sequence, tied, bias, norm, "
                             "positions, dropout, experts, top_k, capacity_factor, moe_every); or a JSON file of them");
    const Option cluster = o.add("--cluster", cluster_, "A preset (" + clusters.substr(1) + ") or a JSON file of its fields");
    const Option precision = o.add("--precision", precision_, "The type the matrix products run in: its dense peak (bf16, fp16, fp8, tf32, fp32, "
                                     "fp64, as the cluster has them) is the products' rate and MFU's denominator; "
                                     "parameters, gradients, optimizer state and activations stay as mixed precision "
                                     "keeps them [default: bf16, or a calibrated cluster's measured type]");
    const Option gpus = o.add("--gpus", gpus_, "GPUs of the job").range(1, th::kPlanMostGpus);
    const Option batch = o.add("--global-batch", global_batch_, "Sequences per optimizer step").range(1, 1 << 24);
    const Option fix = o.add("--fix", fixed_, "Keys held fixed: tp, pp, dp, ep, cp, v, schedule (1f1b: v 1; interleaved: v > 1; or, never searched, the "
                           "zero-bubble zb-h1, zb-h2 (v 1) and zb-v (v 2), timed by the schedule simulator), micro_batch, zero (0-3), "
                           "recompute (none, selective, full), sp (on, off), attention (flash, the default, or unfused: products around a "
                           "softmax that stores the scores), overlap (on, the default: the data-parallel reduction in buckets during "
                           "backward; off: after the flush); e.g. tp=8,pp=2,recompute=full");
    o.add("--top", top_, "Layouts printed (and written with --out), fastest first").range(1, 1 << 20);
    const Option explain = o.flag("--explain", explain_, "Explain the fastest layout that fits: memory by category and time by part");
    const Option out =
        o.add("--out", out_, "Also write the layouts to this result file (HDF5, /plan/layouts; with --scaling /plan/scaling)").path();
    o.flag("--force", force_, "Overwrite an existing --out");
    const Option scaling = o.flag("--scaling", scaling_, "Also the fastest layout at every power-of-two GPU count from one node to --gpus: "
                                  "strong (--global-batch fixed) and weak (--global-batch at one node, grown with the "
                                  "GPUs); written to /plan/scaling with --out");
    // The published runs bring their own models, clusters and layouts, and --validate writes no
    // file: the options of a search would be ignored beside it, so they are refused.
    Option validate = o.flag("--validate", validate_,
                             "Check the model against published runs (Narayanan et al. 2021, Table 1; Korthikanti et "
                             "al. 2022, Table 5), on their own models, clusters and layouts (so taken without the "
                             "options of a search): exit 1 when a row's predicted step time is more than 10% from the "
                             "published one");
    for (const Option* other : {&model, &cluster, &precision, &gpus, &batch, &fix, &explain, &out, &scaling})
      validate.excludes(*other);
  }

  int run_here() override {
    if (validate_) return validate();
    if (model_.empty() || gpus_ == 0 || global_batch_ == 0)
      throw UsageError("plan needs --model, --gpus and --global-batch (or --validate)");
    const th::PlanModel m = th::parse_plan_model(model_);
    const th::PlanCluster parsed = th::parse_plan_cluster(cluster_);
    const th::PlanCluster c = precision_.empty() ? parsed : th::with_precision(parsed, precision_);
    const th::PlanFixed fixed = th::parse_plan_fixed(fixed_);
    // Whole nodes, or part of one: the model places tp within a node and the rest across nodes.
    if (gpus_ > c.gpus_per_node && gpus_ % c.gpus_per_node != 0)
      throw UsageError("--gpus " + std::to_string(gpus_) + " is not a whole number of " + c.name + "'s nodes of " +
                       std::to_string(c.gpus_per_node) + " GPUs");
    if (!out_.empty()) {  // refused before the search, and never one of its own inputs
      record::check_output_path(out_, force_);
      // --model and --cluster may name presets, not files: only files are compared.
      const auto file = [](const std::string& name) {
        std::error_code error;
        return std::filesystem::is_regular_file(name, error) ? name : std::string();
      };
      refuse_output_onto("--out", out_, {{"--model", file(model_)}, {"--cluster", file(cluster_)}});
    }
    const auto start = std::chrono::steady_clock::now();
    std::size_t evaluated = 0;
    std::vector<th::PlanCandidate> all = th::plan_search(m, c, gpus_, global_batch_, fixed, &evaluated);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (all.empty()) {
      // Say why the fixed layout cannot run.
      th::PlanLayout l;
      l.tp = fixed.tp.value_or(1);
      l.pp = fixed.pp.value_or(1);
      l.cp = fixed.cp.value_or(1);
      l.v = fixed.v.value_or(1);
      l.ep = fixed.ep.value_or(1);
      l.micro_batch = fixed.micro_batch.value_or(1);
      l.sp = fixed.sp.value_or(false);
      l.schedule = fixed.schedule.value_or(th::PlanSchedule::one_f_one_b);
      const std::int64_t model_parallel = static_cast<std::int64_t>(l.tp) * l.pp * l.cp;
      std::string why;
      if (!fixed.dp && gpus_ % model_parallel != 0) {
        // What else is wrong with the fixed sizes comes first (tp against the heads, pp against
        // the layers): asked of them on as many GPUs as they take.
        if (model_parallel <= gpus_) {
          th::PlanLayout alone = l;
          alone.dp = 1;
          why = th::plan_layout_problem(m, c, alone, static_cast<int>(model_parallel), global_batch_);
          if (why.rfind("the global batch", 0) == 0 || why.rfind("interleaving", 0) == 0) why.clear();
        }
        if (why.empty())
          why = "tp x pp x cp = " + std::to_string(model_parallel) + " does not divide the " + std::to_string(gpus_) + " GPUs";
      } else {
        l.dp = fixed.dp.value_or(static_cast<int>(gpus_ / model_parallel));
        why = th::plan_layout_problem(m, c, l, gpus_, global_batch_);
      }
      if (why.empty()) why = "no value of the keys not fixed divides the GPUs, heads, layers and batch";
      throw UsageError("no layout of " + m.name + " on " + std::to_string(gpus_) + " GPUs can run: " + why);
    }
    rank_layouts(all, static_cast<std::size_t>(top_));
    if (!std::isfinite(all.front().prediction.step_s))
      throw UsageError("cluster " + quoted_input(cluster_, 200) + ": its figures give steps past the largest number of seconds a double "
                       "holds (1.8e308)");
    const std::size_t fitting = static_cast<std::size_t>(
        std::count_if(all.begin(), all.end(), [](const th::PlanCandidate& x) { return x.prediction.fits; }));
    std::printf("# %s (%.2fB parameters) on %d GPUs of %s (%s, %.4g TFLOP/s dense), global batch %lld: %zu layout%s "
                "evaluated in %.3f s, %zu fit%s in %.4g GB\n",
                m.name.c_str(), static_cast<double>(th::plan_parameters(m)) / 1e9, gpus_, c.name.c_str(),
                c.peak_type.c_str(), c.peak_TFLOPs, static_cast<long long>(global_batch_), evaluated,
                evaluated == 1 ? "" : "s", seconds, fitting, fitting == 1 ? "s" : "", c.memory_GB);
    if (fitting == 0) {
      const auto least = std::min_element(all.begin(), all.end(), [](const th::PlanCandidate& a, const th::PlanCandidate& b) {
        return a.prediction.memory_bytes() < b.prediction.memory_bytes();
      });
      const th::PlanPrediction& p = least->prediction;
      char text[400];
      std::snprintf(text, sizeof text,
                    "%.1f GB per GPU (%s: parameters %.1f, gradients %.1f, optimizer %.1f, activations %.1f GB), %.1f GB "
                    "more than the %.4g GB usable",
                    p.memory_bytes() / 1e9, least->layout.describe().c_str(), p.parameter_bytes / 1e9,
                    p.gradient_bytes / 1e9, p.optimizer_bytes / 1e9, p.activation_bytes / 1e9,
                    (p.memory_bytes() - th::usable_memory_bytes(c)) / 1e9, th::usable_memory_bytes(c) / 1e9);
      // A layout fixed whole is shown and written all the same; a search in which nothing fits is refused.
      if (all.size() > 1) throw UsageError(std::string("no layout fits: the smallest needs ") + text);
      std::printf("# the layout does not fit: it needs %s\n", text);
    }
    const std::size_t shown = std::min<std::size_t>(all.size(), static_cast<std::size_t>(top_));
    int width = 34;
    for (std::size_t i = 0; i < shown; ++i) width = std::max(width, static_cast<int>(all[i].layout.describe().size()));
    print_header(width);
    for (std::size_t i = 0; i < shown; ++i) print_row(all[i], width);
    if (explain_) explain(m, c, all.front());
    std::optional<record::Table> scaled;
    if (scaling_) scaled = scaling(m, c, gpus_, global_batch_, fixed);
    if (!out_.empty()) {
      record::ResultsFile file(out_, force_);
      file.set_attribute("/", "parity_version", parity_version());
      file.set_attribute("/", "git_commit", git_commit());
      file.set_attribute("/", "subcommand", std::string("plan"));
      file.set_attribute("/", "start_time_utc", utc_now_iso8601());
      record::Table t(kPlanLayoutsTable);
      for (std::size_t i = 0; i < shown; ++i) add_row(t, m, c, gpus_, global_batch_, all[i]);
      file.write_table(t);
      file.set_attribute("/plan/layouts", "evaluated", static_cast<std::int64_t>(evaluated));
      file.set_attribute("/plan/layouts", "gpu", c.gpu);
      file.set_attribute("/plan/layouts", "usable_memory_bytes", th::usable_memory_bytes(c));
      file.set_attribute("/plan/layouts", "peak_TFLOPs", c.peak_TFLOPs);
      file.set_attribute("/plan/layouts", "precision", c.peak_type);
      file.set_attribute("/plan/layouts", "pipeline",
                         "the " + std::to_string(kSimulated) + " fastest layouts by the closed form (at least --top) timed "
                         "again by the schedule simulator with blocking sends (simulated = 1), then ranked");
      if (scaled) file.write_table(*scaled);
      file.set_attribute("/", "end_time_utc", utc_now_iso8601());
      file.commit();
      std::printf("# %zu layouts written to %s\n", shown, out_.c_str());
    }
    return kExitOk;
  }

 private:
  std::string model_, cluster_ = "a100-80gb-dgx", fixed_, out_, precision_;
  int gpus_ = 0, top_ = 10;
  std::int64_t global_batch_ = 0;
  bool explain_ = false, force_ = false, validate_ = false, scaling_ = false;
};

const RegisteredCommand<Plan> kPlan;

}  // namespace
}  // namespace parity::cli
