// parity state export / parity state import: a GPT's training state to and from a file of its
// parameters under Hugging Face's GPT-2 names and layouts (GPT2LMHeadModel: transformer.h.0.
// attn.c_attn.weight, its Conv1D weights [in, out]), the file bench/gpt2_torch.py turns into a
// PyTorch state_dict and back. Export also writes parity's logits of a few rows, so that a
// PyTorch GPT-2 built from the export can be checked against them.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>

#include <unistd.h>

#include "bench/cli/progress.hpp"
#include "bench/cli/shared.hpp"
#include "bench/cli/supervisor.hpp"
#include "bench/commands/bench_state.hpp"
#include "bench/commands/command.hpp"
#include "bench/commands/gpt2_file.hpp"
#include "bench/commands/presets.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/parallel/state/store.hpp"
#include "reference/core/error.hpp"
#include "reference/core/text.hpp"
#include "reference/model/model.hpp"
#include "reference/ops/ops.hpp"
#include "reference/parallel/batches.hpp"
#include "reference/parallel/state/whole.hpp"
#include "reference/record/arrays.hpp"
#include "reference/record/output.hpp"
#include "correctness/cases/compare.hpp"

namespace parity::cli {

namespace fs = std::filesystem;

// The result group `state train` writes (docs/results-schema.md).
inline const record::TableSpec kStateTrainTable{"/state/train",
    "a GPT trained under a layout, saving its training state as it goes: every step's loss, and whether the state "
    "was saved after it (a restarted run holds the steps it ran)",
    {{"step", ColumnType::int64}, {"loss", ColumnType::float64}, {"seconds", ColumnType::float64, "s"},
     {"saved", ColumnType::int64}, {"layout", ColumnType::string}, {"world_size", ColumnType::int64}}};

namespace {

constexpr const char* kGpt2Schema = "parity-gpt2";
constexpr std::int64_t kGpt2Version = 1;

const char* const kStateHelp =
    "The training state (docs/training-state.md): a GPT's parameters to and from a file under Hugging Face's GPT-2 "
    "names, which bench/gpt2_torch.py turns into a PyTorch state_dict and back";

struct ExportOptions {
  std::string from, out;
  int tokens = 2;
  std::string values = "master";
  bool force = false;
};

// Never an --out among the saves a command reads or writes (--force would replace one of their
// files: a restart would destroy the save it goes on from).
// saves_below: only the folders under `dir` hold saves (state train's step-N), not `dir` itself.
void refuse_out_inside(const std::string& out_path, const std::string& dir, const char* option, const char* what,
                       bool saves_below = false) {
  if (out_path.empty()) return;
  std::error_code dir_error, out_error;
  fs::path saves = fs::weakly_canonical(fs::absolute(dir), dir_error);
  fs::path out = fs::weakly_canonical(fs::absolute(out_path), out_error);
  if (saves_below) out = out.parent_path();
  if (!saves.has_filename()) saves = saves.parent_path();  // "sd/"
  const auto [end, rest] = std::mismatch(saves.begin(), saves.end(), out.begin(), out.end());
  if (!dir_error && !out_error && end == saves.end() && (!saves_below || rest != out.end()))
    throw UsageError("--out " + quoted_input(out_path, 200) + " is inside " + option + " " + quoted_input(dir, 200) + ", " +
                     what + "; choose another --out");
}

int state_export(const ExportOptions& o) {
  // Logits of a few rows are a check, not a workload: [rows, sequence, vocabulary] doubles.
  if (o.tokens < 0 || o.tokens > 4096) throw UsageError("--tokens must be from 0 to 4096 rows");
  if (o.values != "master" && o.values != "model")
    throw UsageError("--values must be master (the float32 masters of a mixed-precision state) or model");
  record::check_output_path(o.out, o.force);
  refuse_out_inside(o.out, o.from, "--from", "the saves it reads");
  const parallel::WholeState state = parallel::read_whole_training_state(o.from);
  if (!state.model)
    throw UsageError(o.from + ": the save does not name the GPT it trains (its index has no /model)");
  model::GptConfig config = *state.model;
  // The values: the masters where a mixed-precision state has them (and --values master).
  std::map<std::string, const parallel::WholeTensor*> values;
  for (const auto& [ours, theirs] : parallel::gpt2_names(config)) {
    auto it = state.tensors.find(o.values == "master" ? ours + "/master" : ours);
    if (it == state.tensors.end()) it = state.tensors.find(ours);
    if (it == state.tensors.end()) throw UsageError(o.from + ": the save has no " + ours + " (a GPT of another shape?)");
    values[theirs] = &it->second;
  }
  config.dtype = values.begin()->second->dtype;
  config.dropout = 0;
  const fs::path out(o.out);
  const record::DiscardedOnSignal discarded(out.string() + ".tmp");
  record::ArrayWriter file(out.string() + ".tmp", kGpt2Schema, kGpt2Version);
  write_gpt2_config(file, config);
  file.set_attribute("/", "source", fs::absolute(o.from).string());
  file.set_attribute("/", "next_step", static_cast<std::int64_t>(state.next_step));
  for (const auto& [theirs, t] : values) {
    file.write("/" + theirs, t->dtype, t->bytes.data(), t->bytes.size() / size_of(t->dtype));
    std::vector<std::int64_t> shape(t->shape.begin(), t->shape.end());
    file.set_attribute("/" + theirs, "shape", shape);
  }
  if (o.tokens > 0) {
    // Parity's logits of the first rows of step 0's batch, in the values' precision.
    auto m = model::build_gpt(config);
    for (model::Parameter* p : m->parameters()) {
      const parallel::WholeTensor& t = state.tensors.count(p->name + "/master") && o.values == "master"
                                           ? state.tensors.at(p->name + "/master")
                                           : state.tensors.at(p->name);
      if (t.dtype != p->value.dtype() || t.shape != p->value.shape())
        throw UsageError(o.from + ": " + p->name + " is " + std::string(name_of(t.dtype)) + " " + to_string(t.shape) +
                         ", the model holds " + p->value.describe());
      std::memcpy(p->value.raw(), t.bytes.data(), t.bytes.size());
    }
    const model::Batch batch = parallel::batches_of(config)(0, 0, o.tokens, o.tokens);
    model::PassContext context{0, 0, false, 0};
    const Tensor logits = m->forward(batch.inputs, context);
    const Tensor tokens = cast(batch.inputs, DataType::int64, "tokens", MemoryCategory::workspace);
    file.write("/parity/tokens", DataType::int64, tokens.raw(), static_cast<std::size_t>(tokens.numel()));
    file.set_attribute("/parity/tokens", "shape", std::vector<std::int64_t>(tokens.shape().begin(), tokens.shape().end()));
    const Tensor wide = cast(logits, DataType::float64, "logits", MemoryCategory::workspace);
    file.write("/parity/logits", DataType::float64, wide.raw(), static_cast<std::size_t>(wide.numel()));
    file.set_attribute("/parity/logits", "shape", std::vector<std::int64_t>(wide.shape().begin(), wide.shape().end()));
    file.set_attribute("/parity/logits", "dtype_computed", std::string(name_of(config.dtype)));
  }
  if (o.force && fs::exists(out)) fs::remove(out);
  file.commit_as(out);
  std::printf("exported %zu tensors of %s (step %llu) to %s%s\n", values.size(), config.describe().c_str(),
              static_cast<unsigned long long>(state.next_step), o.out.c_str(),
              o.tokens > 0 ? (" with parity's logits of " + std::to_string(o.tokens) + " rows").c_str() : "");
  return kExitOk;
}

struct ImportOptions {
  std::string from, out;
};

// The first element of t that is a NaN or an infinity, if any (16-bit types by their bits).
std::optional<std::size_t> first_non_finite(const parallel::WholeTensor& t) {
  const std::size_t n = t.bytes.size() / size_of(t.dtype);
  std::optional<std::size_t> found;
  visit_data_type(t.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (std::size_t i = 0; i < n && !found; ++i) {
      T value;
      std::memcpy(&value, t.bytes.data() + i * sizeof(T), sizeof(T));
      if (!std::isfinite(to_double(value))) found = i;
    }
  });
  return found;
}

int state_import(const ImportOptions& o) {
  // The root saves go under: refused here, before any reading, if it cannot be one.
  if (o.out.empty()) throw UsageError("--out is empty: name the folder to save the training state under");
  record::ArrayReader file(o.from, kGpt2Schema, kGpt2Version);
  model::GptConfig config = read_gpt2_config(file, o.from);
  const std::vector<std::pair<std::string, std::string>> names = parallel::gpt2_names(config);
  parallel::WholeState state;
  bool first = true;
  for (const auto& [ours, theirs] : names) {
    const std::string path = "/" + theirs;
    const auto tied = state.tensors.find(ours);
    if (tied != state.tensors.end()) {
      // The tied table, taken from transformer.wte; a head the file holds beside it must be it.
      if (!file.has(path)) continue;
      std::vector<char> head(file.length(path) * size_of(tied->second.dtype));
      if (file.dtype(path) == tied->second.dtype) file.read(path, tied->second.dtype, 0, file.length(path), head.data());
      if (file.dtype(path) != tied->second.dtype || head != tied->second.bytes)
        throw UsageError(o.from + ": " + theirs + " differs from transformer.wte.weight, which the GPT ties it to (tie_word_embeddings 1)");
      continue;
    }
    if (!file.has(path)) throw UsageError(o.from + " has no " + theirs);
    parallel::WholeTensor t;
    t.dtype = file.dtype(path);
    if (first) config.dtype = t.dtype;
    first = false;
    if (t.dtype != config.dtype)
      throw UsageError(o.from + ": " + theirs + " is " + std::string(name_of(t.dtype)) + ", the others " +
                       std::string(name_of(config.dtype)));
    const std::size_t n = file.length(path);
    t.bytes.resize(n * size_of(t.dtype));
    file.read(path, t.dtype, 0, n, t.bytes.data());
    if (const std::optional<std::size_t> bad = first_non_finite(t))
      throw UsageError(o.from + ": " + theirs + " holds a NaN or an infinity at element " + std::to_string(*bad) +
                       " (a training state starts from finite values)");
    state.tensors[ours] = std::move(t);
  }
  // Every tensor the file holds is one of the GPT's (parity's own check data under /parity): a
  // tensor of a layer the attributes do not have means the attributes or the file are wrong.
  for (const std::string& member : file.members("/"))
    if (member != "parity" && std::none_of(names.begin(), names.end(), [&](const auto& n) { return n.second == member; }))
      throw UsageError(o.from + " holds " + quoted_input(member, 200) + ", which the GPT of its attributes (" + config.describe() +
                       ") does not have");
  config.validate();
  // Shapes from the model parity builds; AdamW's moments start at zero (and float32 masters of
  // 16-bit values), as a run from a pretrained model starts.
  const auto m = model::build_gpt(config);
  const bool mixed = is_half(config.dtype);
  for (const model::Parameter* p : m->parameters()) {
    parallel::WholeTensor& t = state.tensors.at(p->name);
    if (t.bytes.size() != static_cast<std::size_t>(p->value.numel()) * size_of(t.dtype))
      throw UsageError(o.from + ": " + p->name + " has " + std::to_string(t.bytes.size() / size_of(t.dtype)) +
                       " elements, the GPT of its attributes " + p->value.describe());
    t.shape = p->value.shape();
    const DataType state_type = mixed ? DataType::float32 : config.dtype;
    for (const char* moment : {"/exp_avg", "/exp_avg_sq"})
      state.tensors[p->name + moment] = {state_type, t.shape, std::vector<char>(t.bytes.size() / size_of(t.dtype) *
                                                                                     size_of(state_type), 0)};
    if (mixed) {
      Tensor half = Tensor::empty(p->name, t.shape, t.dtype, MemoryCategory::workspace);
      std::memcpy(half.raw(), t.bytes.data(), t.bytes.size());
      const Tensor wide = cast(half, DataType::float32, p->name, MemoryCategory::workspace);
      parallel::WholeTensor master{DataType::float32, t.shape, std::vector<char>(wide.bytes())};
      std::memcpy(master.bytes.data(), wide.raw(), wide.bytes());
      state.tensors[p->name + "/master"] = std::move(master);
    }
  }
  state.model = config;
  state.layout = "imported from " + o.from;
  const fs::path saved = parallel::write_whole_training_state(o.out, state);
  std::printf("imported %s from %s as %s (step 0, AdamW's moments zero)\n", config.describe().c_str(), o.from.c_str(),
              saved.string().c_str());
  return kExitOk;
}

class StateExport final : public CommandWith<ExportOptions> {
 public:
  StateExport()
      : CommandWith({.name = "state export",
                     .help = "A GPT's parameters from a saved training state (any layout) to a file under Hugging Face's "
                             "GPT-2 names and layouts, with parity's logits of a few rows; bench/gpt2_torch.py to-torch "
                             "makes a PyTorch state_dict of it",
                     .order = 150,
                     .ranks = false,
                     .parent_help = kStateHelp}) {}
  void declare(CommandOptions& o) override {
    o.add("--from", options_.from, "A save's directory, or a root whose newest complete save is taken").required();
    o.add("--out", options_.out, "The file to write (HDF5: one dataset per GPT-2 parameter, GPT2Config's attributes)")
        .required();
    o.add("--tokens", options_.tokens, "Rows of step 0's batch whose logits parity writes beside (0: none)")
        .show_default();
    o.add("--values", options_.values, "master: a mixed-precision state's float32 masters; model: its 16-bit values")
        .show_default();
    o.flag("--force", options_.force, "Overwrite --out");
  }
  int run_here() override { return state_export(options_); }
};

class StateImport final : public CommandWith<ImportOptions> {
 public:
  StateImport()
      : CommandWith({.name = "state import",
                     .help = "A GPT-2 file (state export's format; bench/gpt2_torch.py from-torch writes one from a PyTorch "
                             "state_dict) as a training state at step 0 that any layout restores",
                     .order = 151,
                     .ranks = false}) {}
  void declare(CommandOptions& o) override {
    o.add("--from", options_.from, "The GPT-2 file").required();
    o.add("--out", options_.out, "The root to save under (step-00000000 is made there)").required();
  }
  int run_here() override { return state_import(options_); }
};


// ---- parity state train: training that saves as it goes and goes on from its newest save ----

struct TrainOptions {
  std::string model = "tiny";
  std::string layout = "dp";
  std::string precision = "float32";
  int steps = 12;
  int save_every = 2;
  std::string dir;
  bool restart = false;
};

int state_train(Session& session, const TrainOptions& o) {
  Communicator& world = session.world();
  model::GptConfig config = find_model_preset(o.model).config;
  config.dtype = parse_data_type(o.precision);
  config.validate();
  const StateLayout layout = parse_state_layout(o.layout, "--layout");
  session.admit(state_bytes_per_rank(config, world.size(), 1, 0), "the training");
  const std::int64_t rows = std::max<std::int64_t>(8, world.size());
  StateTrainer t = build_state_trainer(session, config, layout, rows, "--layout");
  const parallel::BatchSource source = parallel::batches_of(config);
  const bool quiet = !session.is_root() || session.options().quiet;
  // Where training starts: step 0 in an empty --dir, or the newest complete save with --restart.
  std::uint64_t start = 0;
  int earlier_world = world.size();
  const auto newest = parallel::latest_training_state(o.dir);
  if (o.restart) {
    if (!newest) throw UsageError("--restart: no complete training state under " + o.dir + " to go on from");
    const parallel::LoadedState loaded = parallel::load_training_state(world, *t.trainer, *newest);
    start = loaded.next_step;
    earlier_world = std::max(earlier_world, loaded.world_size);
    if (!quiet)
      std::fprintf(stderr, "[state train] restarted from %s: step %llu, saved by %s on %d ranks\n", newest->c_str(),
                   static_cast<unsigned long long>(start), loaded.layout.c_str(), loaded.world_size);
  } else if (newest) {
    throw UsageError(o.dir + " holds a training state already (" + newest->string() +
                     "); --restart goes on from it, or name another --dir");
  }
  if (start > static_cast<std::uint64_t>(o.steps))
    throw UsageError("--steps " + std::to_string(o.steps) + ": the newest save is at step " + std::to_string(start));
  // Every save the run will make, checked before its first step (a save refused after the steps
  // before it would be refused again on every --restart): a complete save of a step is never
  // overwritten, a step-N never committed (no index.h5) is replaced (parallel::save_refused).
  for (std::uint64_t next = start + 1; next <= static_cast<std::uint64_t>(o.steps); ++next)
    if (next % static_cast<std::uint64_t>(o.save_every) == 0 || next == static_cast<std::uint64_t>(o.steps))
      if (const auto refused = parallel::save_refused(o.dir, next)) throw UsageError(*refused);
  record::Table table{kStateTrainTable};
  Progress progress("state train", static_cast<std::size_t>(o.steps), !quiet);
  for (std::uint64_t step = start; step < static_cast<std::uint64_t>(o.steps); ++step) {
    const parallel::StepStats stats = t.trainer->step(source, step);
    const bool save = (step + 1) % static_cast<std::uint64_t>(o.save_every) == 0 || step + 1 == static_cast<std::uint64_t>(o.steps);
    if (save)
      parallel::save_training_state(world, *t.trainer, o.dir, step + 1, {.layout = o.layout, .model = config});
    table.put({{"step", static_cast<std::int64_t>(step)}, {"loss", stats.loss}, {"seconds", stats.seconds},
               {"saved", save ? 1 : 0}, {"layout", o.layout}, {"world_size", world.size()}});
    // Journaled as it goes: a run cut short keeps the steps it took (and its saves, --restart).
    session.record_rows("/state/train", table, table.rows() - 1);
    char loss[32];
    std::snprintf(loss, sizeof loss, "%.4f", stats.loss);
    progress.update(static_cast<std::size_t>(step), "step " + std::to_string(step + 1) + " loss " + loss +
                                                        (save ? ", saved step " + std::to_string(step + 1) : ""));
  }
  progress.finish();
  // The run against single-device training of every step: the same data, one rank.
  const bool mixed = is_half(config.dtype);
  const parallel::ParameterValues trained = t.whole_values(mixed);
  const DataType state_type = mixed ? DataType::float32 : config.dtype;
  auto whole = model::build_gpt(config);
  const model::AdamW fresh(model::AdamWConfig{}, state_type);
  const parallel::ParameterValues origin = cases::values_of(*whole, &fresh);
  model::AdamW optimizer(model::AdamWConfig{}, state_type);
  parallel::ParameterValues reference;
  if (mixed) {
    const double scale = config.dtype == DataType::float16 ? parallel::LossScaling{}.initial_scale : 1;
    reference = cases::train_mixed_single_device(*whole, optimizer, source, rows, o.steps, scale).values;
  } else {
    for (int step = 0; step < o.steps; ++step)
      model::train_step(*whole, optimizer, source(static_cast<std::uint64_t>(step), 0, rows, rows),
                        static_cast<std::uint64_t>(step));
    reference = cases::values_of(*whole, &optimizer);
  }
  const cases::Difference d = cases::compare(trained, reference, origin);
  const double bound = tolerance::restore_relative_bound(
      config.dtype, tolerance::tensor_parallel_reduction_terms(rows * config.sequence, config.hidden, config.vocabulary),
      earlier_world, layout.tp, config.layers, o.steps, true);
  const double error = std::max(d.parameters, d.state);
  const bool passed = error <= bound;
  if (session.is_root()) {
    auto& file = session.results();
    file.write_table(table);
    file.set_attribute("/state/train", "model", o.model + ": " + config.describe());
    file.set_attribute("/state/train", "restarted_from", static_cast<std::int64_t>(o.restart ? start : -1));
    file.set_attribute("/state/train", "error", error);
    file.set_attribute("/state/train", "bound", bound);
    file.set_attribute("/state/train", "passed", static_cast<std::int64_t>(passed ? 1 : 0));
    if (!session.options().quiet)
      std::fprintf(stderr, "[state train] %d steps%s: parameters and state against one device %.3g (bound %.3g)%s\n",
                   o.steps, o.restart ? (", restarted at step " + std::to_string(start)).c_str() : "", error, bound,
                   passed ? "" : "  FAILED");
  }
  return passed ? kExitOk : kExitFailed;
}

class StateTrain final : public CommandWith<TrainOptions> {
 public:
  StateTrain()
      : CommandWith({.name = "state train",
                     .help = "Train a GPT under a layout over every rank, saving its training state every --save-every "
                             "steps under --dir; --restart goes on from the newest complete save there, on any number of "
                             "ranks and under any layout. At the end the parameters and optimizer state are compared with "
                             "training on one device (exit 1 beyond the bound): an elastic restart must equal "
                             "uninterrupted training",
                     .order = 152,
                     .tables = {&kStateTrainTable},
                     .no_probe_reason = "its rows are the steps of one run, which goes on from its own saves "
                                        "(--restart) rather than from the result file"}) {}
  void declare(CommandOptions& o) override {
    o.add("--model", options_.model, "GPT preset:" + model_presets_help()).show_default();
    o.add("--layout", options_.layout, "dp, zero1, zero2, zero3 or tp<T> (T dividing the ranks; dp over the rest)")
        .show_default();
    o.add("--precision", options_.precision, "float64, float32, bfloat16 or float16").show_default();
    o.add("--steps", options_.steps, "Optimizer steps in all (a restarted run counts the earlier ones)")
        .show_default();
    o.add("--save-every", options_.save_every, "Save the training state after every k steps (and after the last)")
        .show_default();
    o.add("--dir", options_.dir, "Directory of the saves (shared by every rank's host)").required();
    o.flag("--restart", options_.restart, "Go on from the newest complete save under --dir");
  }
  std::optional<int> prepare(std::optional<int>) override {
    if (options_.steps < 1) throw UsageError("--steps must be at least 1");
    if (options_.save_every < 1) throw UsageError("--save-every must be at least 1");
    parse_state_layout(options_.layout, "--layout");
    training_type("--precision", options_.precision, kTrainingTypes);
    preset_config(options_.model, 0);
    // The saves' directory, made now if it is not there (--restart needs it there): a name that
    // cannot be one is refused before any step, not at the first save.
    if (options_.dir.empty()) throw UsageError("--dir is empty: name the directory of the saves");
    // A run goes on from its saves (--restart), not from its result file: its rows are the steps
    // it takes, and a restart takes some again.
    if (!common().resume.empty())
      throw UsageError("state train goes on from its saves under --dir with --restart, not with --resume");
    setenv(kContinueVariable,
           ("--restart (from the newest save under " + quoted_input(options_.dir, 200) +
            "; with none yet, again without it) and another --out or --force")
               .c_str(),
           1);
    refuse_out_inside(common().out, options_.dir, "--dir", "among the saves", true);
    const std::string dir = "--dir " + quoted_input(options_.dir, 200);
    const fs::file_status status = user_path_status("--dir", options_.dir);
    if (fs::exists(status) && !fs::is_directory(status)) throw UsageError(dir + " is not a directory");
    refuse_kernel_view("--dir", options_.dir);
    if (!fs::exists(status) && !options_.restart) {
      std::error_code ec;
      fs::create_directories(options_.dir, ec);  // false for "a/" although it made a
      if (!fs::is_directory(options_.dir)) throw UsageError(dir + " cannot be made: " + ec.message());
    }
    if (fs::is_directory(options_.dir) && access(options_.dir.c_str(), W_OK | X_OK) != 0)
      throw UsageError(dir + " is not writable");
    return std::nullopt;
  }
  int execute(Job& job) override {
    return state_train(job.session, options_);
  }
};

const RegisteredCommand<StateTrain> kStateTrain;

const RegisteredCommand<StateExport> kStateExport;
const RegisteredCommand<StateImport> kStateImport;

}  // namespace
}  // namespace parity::cli
