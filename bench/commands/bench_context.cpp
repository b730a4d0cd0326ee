// parity bench context: for each cp size (dividing the world, dp the rest), sequence length and
// variant, the context-parallel GPT (parallel/context) trains a few AdamW steps. Recorded per
// configuration, the slowest rank's figures: the step, the attention (forward and backward of
// every layer) and the part of it spent waiting on the cp group; for the ring the same steps again
// with each block's transfer waited for before its compute (the same transfers without overlap),
// so that the hidden share of the ring's communication is measured against its own baseline in
// the same run. Beside them the bytes a rank sent per layer and the activations a block keeps,
// each against its formula (theory/context.hpp); a figure off its formula fails the run.
#include "bench/commands/bench_context.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "bench/cli/progress.hpp"
#include "bench/cli/shared.hpp"
#include "bench/commands/command.hpp"
#include "bench/commands/presets.hpp"
#include "reference/core/error.hpp"
#include "reference/model/optimizer.hpp"
#include "reference/parallel/context/layers.hpp"
#include "reference/parallel/data/config.hpp"
#include "reference/parallel/grid.hpp"
#include "reference/parallel/techniques/techniques.hpp"
#include "reference/tensor/memory.hpp"
#include "reference/theory/context.hpp"
#include "reference/theory/model.hpp"

namespace parity::cli {

ContextBenchPlan plan_context_bench(const ContextBenchOptions& options, int world_size) {
  if (options.rows < 1) throw UsageError("--rows must be at least 1");
  if (options.steps < 1) throw UsageError("--steps must be at least 1");
  if (options.warmup < 0) throw UsageError("--warmup must be at least 0");
  ContextBenchPlan plan;
  plan.model = options.model;
  plan.config = preset_config(options.model, options.layers);
  if (plan.config.moe.enabled())
    throw UsageError("--model " + options.model + ": context parallelism takes dense GPTs, not mixture-of-experts layers");
  plan.config.dtype =
      training_type("--precision", options.precision, {DataType::float64, DataType::float32, DataType::bfloat16});
  for (const std::string& v : split_names(options.variants, "--variants")) {
    if (v != "ring" && v != "allgather" && v != "ulysses")
      throw UsageError("--variants: '" + v + "' is not ring, allgather or ulysses");
    plan.variants.push_back(v);
  }
  if (plan.variants.empty()) throw UsageError("--variants names no variant");
  for (const int sequence : parse_whole_numbers(options.sequences, "--sequences", 2)) plan.sequences.push_back(sequence);
  if (plan.sequences.empty()) throw UsageError("--sequences names no length");
  const bool ulysses = std::find(plan.variants.begin(), plan.variants.end(), "ulysses") != plan.variants.end();
  if (options.cp == "auto") {
    // 1, 2 and 4 where they divide the world, split every sequence into 2 cp chunks and (with
    // Ulysses) the heads; 1 alone while the world is unknown (a rank's first reading: it plans
    // again with the world).
    for (const int cp : {1, 2, 4}) {
      const bool splits = std::all_of(plan.sequences.begin(), plan.sequences.end(), [&](std::int64_t s) { return s % (2 * cp) == 0; });
      if (cp == 1 || (world_size > 0 && world_size % cp == 0 && splits && (!ulysses || plan.config.heads % cp == 0)))
        plan.cp.push_back(cp);
    }
  } else {
    plan.cp = parse_whole_numbers(options.cp, "--cp", 1);
  }
  if (plan.cp.empty()) throw UsageError("--cp names no size");
  for (const int cp : plan.cp) {
    if (world_size > 0 && world_size % cp != 0)
      throw UsageError("--cp " + std::to_string(cp) + " does not divide the world of " + std::to_string(world_size) +
                       " ranks (dp takes the rest)");
    for (const std::int64_t s : plan.sequences)
      if (s % (2 * cp) != 0)
        throw UsageError("--sequences " + std::to_string(s) + " does not split into 2 cp = " + std::to_string(2 * cp) +
                         " equal chunks (the load-balanced split) at --cp " + std::to_string(cp));
    if (cp > 1 && ulysses && plan.config.heads % cp != 0)
      throw UsageError("--variants ulysses: " + std::to_string(plan.config.heads) + " heads of --model " + options.model +
                       " do not split over --cp " + std::to_string(cp));
  }
  for (const std::int64_t s : plan.sequences) {
    model::GptConfig c = plan.config;
    c.sequence = s;
    c.validate();
  }
  return plan;
}

namespace {

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g s", s);
  return text;
}

struct Figures {
  // The median step, its parts attention and the ring's or the all-to-all's communication; the
  // serial ones with the ring's transfers not overlapped (ring only: NaN otherwise).
  StepTiming<2> timed, serial{NAN, {NAN, NAN}};
  double forward_bytes = 0, backward_bytes = 0, activation = 0;
};

// The activations one block keeps in a forward of this rank's rows, the largest over the blocks.
double block_activation_bytes(model::Model& m, const model::GptConfig& c, std::int64_t first_row, std::int64_t rows,
                              std::int64_t global_rows) {
  auto& tracker = MemoryTracker::process();
  std::int64_t before = 0, most = 0;
  std::vector<std::pair<model::Layer*, model::HookId>> hooks;
  for (model::Layer* layer : m.layers())
    if (std::string(layer->kind()) == "block")
      hooks.emplace_back(layer, layer->add_hook([&](model::Layer&, model::HookPoint point, const model::PassContext&) {
        const std::int64_t now = tracker.usage(MemoryCategory::activations, MemorySpace::host).current;
        if (point == model::HookPoint::before_forward) before = now;
        if (point == model::HookPoint::after_forward) most = std::max(most, now - before);
      }));
  const model::Batch batch = model::gpt_batch(c, 0, first_row, rows, global_rows);
  const model::PassContext context{0, 0, true, first_row};
  const Tensor logits = m.forward(batch.inputs, context);
  m.backward(Tensor::zeros_like(logits, "dlogits", MemoryCategory::activations), context);
  for (auto& [layer, id] : hooks) layer->remove_hook(id);
  m.zero_grad();
  return static_cast<double>(most);
}

}  // namespace

struct ContextBenchOutcome {
  record::Table table{kContextBenchTable};
  std::size_t failures = 0;
};

std::size_t context_bench_bytes_per_rank(const ContextBenchPlan& plan, int rows) {
  const double e = static_cast<double>(size_of(plan.config.dtype));
  // Attention works in float32 for a 16-bit model, as the runs below.
  const double w = static_cast<double>(size_of(is_half(plan.config.dtype) ? DataType::float32 : plan.config.dtype));
  const auto r = static_cast<double>(rows), h = static_cast<double>(plan.config.hidden);
  std::size_t most = 0;
  for (const int cp : plan.cp)
    for (const std::int64_t s : plan.sequences) {
      model::GptConfig c = plan.config;
      c.sequence = s;  // the position table grows with it
      const double local = static_cast<double>(s / cp);
      const double blocks = static_cast<double>(theory::context_block_activation_bytes(
                                s, rows, c.hidden, c.heads, cp, static_cast<std::int64_t>(e), static_cast<std::int64_t>(w),
                                theory::statistic_bytes(c.dtype))) *
                            c.layers;
      const double gathered = 2 * r * static_cast<double>(s) * h * w;
      const double scores = 2 * r * static_cast<double>(c.heads) * local * local * w;
      most = std::max(most, estimated_bytes(blocks + gathered + scores + gpt_training_bytes_beside_blocks(c, r, local)));
    }
  return most;
}

ContextBenchOutcome run_context_bench(Session& session, const ContextBenchPlan& plan, const ContextBenchOptions& options) {
  // Context parallelism's attention blocks have no device kernels: on a device run it runs on
  // the host world, and says so.
  Communicator& world = session.host_world();
  if (session.world().memory_space() == MemorySpace::cuda && session.is_root())
    std::fprintf(stderr, "[bench context] runs on the CPU: context parallelism's attention blocks have no device kernels "
                         "(--device cuda applies to the other benchmarks)\n");
  ContextBenchOutcome out;
  // Each cp > 1 runs every variant; cp 1 (no split: one device's attention per sequence) runs once.
  std::size_t runs = 0;
  for (const int cp : plan.cp) runs += plan.sequences.size() * (cp == 1 ? 1 : plan.variants.size());
  Progress progress("bench context", runs, session.is_root() && !session.options().quiet);
  std::size_t done = 0;
  const std::string precision(name_of(plan.config.dtype));
  const bool mixed = is_half(plan.config.dtype);
  const RowKey by_run = [](const record::Table& t, std::size_t row) {
    return t.get_str("variant")[row] + "/" + std::to_string(t.get_i64("cp")[row]) + "/" +
           std::to_string(t.get_i64("sequence")[row]);
  };
  for (const int cp : plan.cp) {
    if (world.size() % cp != 0)
      throw UsageError("--cp " + std::to_string(cp) + " does not divide the world of " + std::to_string(world.size()) +
                       " ranks (dp takes the rest)");
    const int dp = world.size() / cp;
    parallel::GridSpec spec;
    spec.set(parallel::Axis::cp, cp).set(parallel::Axis::dp, dp);
    parallel::Grid grid(world, spec);
    for (const std::int64_t sequence : plan.sequences) {
      model::GptConfig c = plan.config;
      c.sequence = sequence;
      for (const std::string& variant : cp == 1 ? std::vector<std::string>{"none"} : plan.variants) {
        const std::string label = variant + " cp" + std::to_string(cp) + " s" + std::to_string(sequence);
        if (session.restore_rows("/bench/context", variant + "/" + std::to_string(cp) + "/" + std::to_string(sequence),
                                 by_run, 1, out.table)
                .found) {
          progress.update(done++, label + " taken from the resumed file");
          continue;
        }
        parallel::ContextParallel context(grid.group(parallel::Axis::cp), {variant == "none" ? "ring" : variant, ""});
        auto m = parallel::build_context_parallel_gpt(c, context);
        const std::int64_t global_rows = static_cast<std::int64_t>(options.rows) * dp;
        const std::int64_t first_row = static_cast<std::int64_t>(grid.coordinate(parallel::Axis::dp)) * options.rows;
        Figures f;
        f.activation = block_activation_bytes(*m, c, first_row, options.rows, global_rows);
        auto optimizer = std::make_unique<model::AdamW>(model::AdamWConfig{}, mixed ? DataType::float32 : c.dtype);
        parallel::DataParallelConfig dc;
        dc.global_batch = global_rows;
        if (mixed) dc.precision = parallel::Precision::mixed;
        dc = parallel::checked_config(dc, dp, *m, *optimizer);
        Communicator& replicas = grid.group(parallel::AxisSet{parallel::Axis::dp, parallel::Axis::cp});
        parallel::Trainer trainer(*m, grid.group(parallel::Axis::dp), global_rows, 1,
                                  parallel::make_data_parallel_parts(replicas, *m, *optimizer, dc));
        const parallel::BatchSource source = parallel::batches_of(c);
        std::uint64_t step = 0;
        // One rank's median step with its attention and communication.
        const auto measure = [&](int count) {
          std::vector<StepTiming<2>> steps;
          for (int i = 0; i < count; ++i) {
            world.barrier();  // every step starts together, so the slowest rank sets its time
            context.reset_counters();
            const parallel::StepStats stats = trainer.step(source, step++);
            steps.push_back({stats.seconds, {context.attention_seconds(), context.communication_seconds()}});
          }
          return median_step(steps);
        };
        if (options.warmup > 0) measure(options.warmup);
        f.timed = measure(options.steps);
        f.forward_bytes = context.forward_bytes() / c.layers;  // the last step's
        f.backward_bytes = context.backward_bytes() / c.layers;
        if (variant == "ring") {
          context.set_overlap(false);
          f.serial = measure(options.steps);
        }
        // The slowest rank's median steps; the largest bytes and activations (the same on every rank by the split).
        const auto slowest = [&](double x) {
          const auto all = gather_from_ranks(world, x);
          double most = all.front();
          for (double v : all) most = std::isnan(v) || std::isnan(most) ? NAN : std::max(most, v);
          return most;
        };
        const StepTiming<2> timed = slowest_rank_step(world, f.timed), serial = slowest_rank_step(world, f.serial);
        const double step_s = timed.seconds, attention_s = timed.parts[0], communication_s = timed.parts[1],
                     serial_attention_s = serial.parts[0], serial_communication_s = serial.parts[1],
                     forward_bytes = slowest(f.forward_bytes), backward_bytes = slowest(f.backward_bytes),
                     activation = slowest(f.activation);
        const std::int64_t local = sequence / cp;
        const auto work = static_cast<double>(size_of(mixed ? DataType::float32 : c.dtype));
        // cp 1 runs as a ring of one (its backward hands dK and dV to itself: the ring's 2 cp blocks).
        const theory::ContextBytes formula = theory::context_attention_bytes(
            variant == "none" ? "ring" : variant, static_cast<double>(options.rows), static_cast<double>(local),
            static_cast<double>(c.hidden), static_cast<double>(c.hidden), c.heads, cp, work, work);
        const auto formula_activation = static_cast<double>(theory::context_block_activation_bytes(
            sequence, options.rows, c.hidden, c.heads, cp, static_cast<std::int64_t>(size_of(c.dtype)),
            static_cast<std::int64_t>(work), theory::statistic_bytes(c.dtype)));
        const double hidden = variant == "ring" && serial_communication_s > 0
                                  ? (serial_communication_s - communication_s) / serial_communication_s
                                  : NAN;
        record::Table& t = out.table;
        const std::size_t first = t.rows();
        t.put({{"variant", variant}, {"cp", cp}, {"dp", dp}, {"world_size", world.size()}, {"sequence", sequence},
               {"rows", options.rows}, {"precision", precision}, {"layers", c.layers}, {"step_s", step_s},
               {"tokens_per_s", static_cast<double>(global_rows * sequence) / step_s}, {"attention_s", attention_s},
               {"communication_s", communication_s}, {"serial_attention_s", serial_attention_s},
               {"serial_communication_s", serial_communication_s}, {"hidden_fraction", hidden},
               {"forward_bytes", forward_bytes}, {"backward_bytes", backward_bytes},
               {"formula_forward_bytes", formula.forward}, {"formula_backward_bytes", formula.backward},
               {"activation_bytes", activation}, {"formula_activation_bytes", formula_activation}});
        const bool off = forward_bytes != formula.forward || backward_bytes != formula.backward ||
                         activation != formula_activation;
        if (off) {
          ++out.failures;
          if (session.is_root())
            std::fprintf(stderr,
                         "[bench context] %s: OFF its formulas: bytes per layer %.0f forward, %.0f backward (formula "
                         "%.0f, %.0f); activations per block %.0f (formula %.0f)\n",
                         label.c_str(), forward_bytes, backward_bytes, formula.forward, formula.backward, activation,
                         formula_activation);
        }
        session.record_rows("/bench/context", t, first);  // kept if the run is cut short
        progress.update(done++, label + ": step " + seconds_text(step_s) + ", attention " + seconds_text(attention_s) +
                                    (std::isnan(hidden) ? "" : ", ring transfers hidden " + std::to_string(static_cast<int>(std::lround(100 * hidden))) + "%"));
      }
    }
  }
  progress.finish();
  return out;
}

namespace {

class BenchContext final : public CommandWith<ContextBenchOptions> {
 public:
  BenchContext()
      : CommandWith({.name = "bench context",
                     .help = "Context parallelism (docs/context-parallelism.md): a GPT trained with each sequence split over "
                             "cp ranks (ring, all-gather or Ulysses attention; dp the rest of the world) at each cp and "
                             "sequence length; step and attention time, the time waited on the cp group with the ring's "
                             "transfers overlapped and not (the hidden share), and bytes per layer and activations per "
                             "block against their formulas",
                     .order = 95,
                     .in_run = true,
                     .tables = {&kContextBenchTable},
                     .resume_probe = ResumeProbe{{"-q", "--np", "2", "--model", "tiny", "--cp", "1,2", "--sequences", "64,128,192", "--steps", "1"},
                                                 "bench/context",
                                                 "variant,cp,sequence,forward_bytes,backward_bytes,formula_forward_bytes,activation_bytes",
                                                 {2, 5}}}) {}

  void declare(CommandOptions& o) override {
    ContextBenchOptions& p = options_;
    o.add("--model", p.model, "GPT preset (dense):" + model_presets_help(), {std::string("tiny"), std::string("tiny")});
    o.add("--layers", p.layers, "Transformer blocks L (0: the preset's)", {1, 0});
    o.add("--precision", p.precision,
          "float64, float32 or bfloat16 (bfloat16: float32 master weights and optimizer state, attention in float32)");
    o.add("--variants", p.variants, "Comma-separated: ring, allgather, ulysses (heads divisible by cp)");
    o.add("--cp", p.cp,
          "Comma-separated cp sizes, each dividing the world (dp the rest; 1: no split, the baseline); auto: 1, 2 "
          "and 4 where they divide it, split the sequences into 2 cp chunks and (Ulysses) the heads",
          {std::string("1,2"), std::string("1,2,4")});
    o.add("--sequences", p.sequences,
          "Comma-separated sequence lengths, each divisible by 2 cp; the CPU attention's time grows as the square "
          "(16384 on the tiny model takes minutes a step)",
          {std::string("64,128"), std::string("256,1024")});
    o.add("--rows", p.rows, "Sequences per data-parallel rank");
    o.add("--warmup", p.warmup, "Untimed steps first", {1, 1});
    o.add("--steps", p.steps, "Timed steps (the ring's again without overlap)", {2, 3});
  }

  std::optional<int> prepare(std::optional<int> world_size) override {
    plan_context_bench(options_, world_size.value_or(0));  // refused before ranks start
    return std::nullopt;
  }

  void prepare_for_run(int world_size) override {
    // parity run: the cp sizes that divide its world.
    if (options_.cp == "auto") return;
    std::string kept;
    for (const int cp : parse_whole_numbers(options_.cp, "--cp", 1))
      if (world_size % cp == 0) kept += (kept.empty() ? "" : ",") + std::to_string(cp);
    options_.cp = kept.empty() ? "1" : kept;
  }

  int execute(Job& job) override {
    Session& s = job.session;
    const ContextBenchPlan plan = plan_context_bench(options_, s.world().size());
    s.admit(context_bench_bytes_per_rank(plan, options_.rows), "the context benchmark");
    const ContextBenchOutcome outcome = run_context_bench(s, plan, options_);
    if (s.is_root()) {
      auto& file = s.results();
      file.write_table(outcome.table);
      file.set_attribute("/bench/context", "model", plan.model + ": " + plan.config.describe());
    }
    return outcome.failures ? kExitFailed : kExitOk;
  }
};

const RegisteredCommand<BenchContext> kBenchContext;

}  // namespace
}  // namespace parity::cli
