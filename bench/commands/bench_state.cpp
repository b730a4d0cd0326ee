// parity bench state: for each layout (data parallelism, ZeRO 1-3, tensor parallelism over
// every rank), a GPT trained a step, its training state saved (parallel::save_training_state),
// restored into a fresh trainer of the same layout and checked equal element for element, and
// saved again asynchronously while a step runs. Each rank's seconds and bytes are recorded beside
// a sequential POSIX write and read of the same bytes on the same file system in the same run,
// and the bytes of all ranks beside the formula (every value and its optimizer state once).
#include "bench/commands/bench_state.hpp"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <utility>

#include "bench/cli/progress.hpp"
#include "bench/cli/shared.hpp"
#include "bench/commands/command.hpp"
#include "bench/commands/presets.hpp"
#include "reference/core/error.hpp"
#include "reference/core/text.hpp"
#include "reference/model/optimizer.hpp"
#include "reference/parallel/state/store.hpp"
#include "reference/parallel/techniques/techniques.hpp"
#include "reference/parallel/tensor/tensor_parallel.hpp"
#include "reference/theory/model.hpp"
#include "reference/theory/parallel.hpp"

namespace parity::cli {

namespace fs = std::filesystem;

StateLayout parse_state_layout(const std::string& name, const std::string& option) {
  StateLayout l;
  l.name = name;
  if (name == "dp") {
  } else if (name.size() == 5 && name.rfind("zero", 0) == 0 && name[4] >= '1' && name[4] <= '3') {
    l.zero = name[4] - '0';
  } else if (name.size() > 2 && name.size() < 6 && name.rfind("tp", 0) == 0 &&
             name.find_first_not_of("0123456789", 2) == std::string::npos && name[2] != '0') {
    l.tp = std::stoi(name.substr(2));
  } else {
    throw UsageError(option + ": '" + name + "' is not dp, zero1, zero2, zero3 or tp<T>");
  }
  return l;
}

StateTrainer build_state_trainer(Session& session, const model::GptConfig& config, const StateLayout& l,
                                 std::int64_t rows, const std::string& option) {
  Communicator& world = session.world();
  if (world.size() % l.tp != 0)
    throw UsageError(option + " " + l.name + ": " + std::to_string(l.tp) + " does not divide the world of " +
                     std::to_string(world.size()) + " ranks");
  if (l.tp > 1) parallel::validate_tensor_parallel(config, l.tp, false);
  StateTrainer b;
  const bool mixed = is_half(config.dtype);
  b.optimizer = std::make_unique<model::AdamW>(model::AdamWConfig{}, mixed ? DataType::float32 : config.dtype);
  parallel::DataParallelConfig dc;
  dc.global_batch = rows;
  dc.zero_stage = world.size() / l.tp > 1 ? l.zero : 0;
  if (mixed) dc.precision = parallel::Precision::mixed;
  if (config.dtype == DataType::float16) dc.loss_scaling.dynamic = true;
  parallel::GridSpec spec;
  spec.set(parallel::Axis::tp, l.tp).set(parallel::Axis::dp, world.size() / l.tp);
  b.grid = std::make_unique<parallel::Grid>(world, spec);
  if (l.tp > 1) {
    b.tp = std::make_unique<parallel::TensorParallel>(b.grid->group(parallel::Axis::tp), parallel::TensorParallelConfig{});
    b.model = parallel::build_tensor_parallel_gpt(config, *b.tp);
    b.model->to(session.space());
    b.trainer = parallel::make_tensor_parallel_trainer(*b.grid, *b.tp, *b.model, *b.optimizer, dc);
  } else {
    b.model = model::build_gpt(config);
    b.model->to(session.space());
    b.trainer = parallel::make_trainer(world, *b.model, *b.optimizer, dc);
  }
  return b;
}

parallel::ParameterValues StateTrainer::whole_values(bool master) {
  parallel::ParameterValues v = trainer->gathered(master);
  if (tp) v = parallel::gather_tensor_parallel(v, model->parameters(), tp->group(), nullptr);
  return v;
}

StateBenchPlan plan_state_bench(const StateBenchOptions& options) {
  if (options.repeats < 1) throw UsageError("--repeats must be at least 1");
  StateBenchPlan plan;
  plan.model = options.model;
  plan.config = preset_config(options.model, options.layers);
  plan.config.dtype = training_type("--precision", options.precision, kTrainingTypes);
  plan.config.validate();
  for (const std::string& name : split_names(options.layouts, "--layouts"))
    plan.layouts.push_back(parse_state_layout(name, "--layouts"));
  if (plan.layouts.empty()) throw UsageError("--layouts names no layout");
  if (!options.dir.empty()) {
    const fs::file_status status = user_path_status("--dir", options.dir);
    if (fs::exists(status) && !fs::is_directory(status))
      throw UsageError("--dir " + options.dir + " is not a directory");
    refuse_kernel_view("--dir", options.dir);
  }
  return plan;
}

namespace {

double seconds_of(const std::function<void()>& body) {
  const auto start = std::chrono::steady_clock::now();
  body();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Asks the kernel to drop a file's cached pages, so that reading it goes to the device where it
// can (best effort: a dirty or shared page may stay).
void drop_cached(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// A sequential POSIX write of `bytes` to `file` (forced to disk) and its read back after its
// cached pages are dropped: the file system's own rates for what a rank saves and loads.
std::pair<double, double> file_system_baseline(const fs::path& file, std::size_t bytes) {
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  std::vector<char> buffer(kChunk, 'p');
  const double write_s = seconds_of([&] {
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) throw UsageError("cannot write " + file.string() + ": " + std::strerror(errno));
    for (std::size_t done = 0; done < bytes;) {
      const std::size_t n = std::min(kChunk, bytes - done);
      const ssize_t w = ::write(fd, buffer.data(), n);
      if (w <= 0) {
        ::close(fd);
        throw Error("cannot write " + file.string() + ": " + std::strerror(errno));
      }
      done += static_cast<std::size_t>(w);
    }
    ::fsync(fd);
    ::close(fd);
  });
  drop_cached(file);
  const double read_s = seconds_of([&] {
    const int fd = ::open(file.c_str(), O_RDONLY);
    if (fd < 0) throw Error("cannot read " + file.string() + ": " + std::strerror(errno));
    while (::read(fd, buffer.data(), kChunk) > 0) {
    }
    ::close(fd);
  });
  std::error_code ec;
  fs::remove(file, ec);
  return {write_s, read_s};
}

char rank_file_name(int rank, char (&text)[32]) {
  std::snprintf(text, sizeof text, "rank-%05d.h5", rank);
  return text[0];
}

// A temporary directory of states is named parity-state-<host>-<pid>-XXXXXX after the rank that
// made it, so that a later run on the same host can tell the directories of runs that are gone
// (ended by a signal or killed, they could not remove their own) and remove them; a directory of
// another host (TMPDIR shared) or of a live process is left alone.
std::string states_prefix() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "host");
  return std::string("parity-state-") + host + "-";
}

void remove_orphaned_states(const fs::path& tmp, const std::string& prefix) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(tmp, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());  // <pid>-XXXXXX
    const std::size_t dash = rest.find('-');
    if (dash == 0 || dash == std::string::npos || rest.size() != dash + 7 ||
        rest.find_first_not_of("0123456789") != dash)
      continue;
    const long pid = std::strtol(rest.substr(0, dash).c_str(), nullptr, 10);
    if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    fs::remove_all(entry.path(), ec);
  }
}

// The states' directory, the same on every rank: --dir, or a fresh one under TMPDIR.
fs::path states_root(Session& session, const StateBenchOptions& options) {
  std::string made;
  session.agree_on_root([&] {
    if (!options.dir.empty()) {
      std::error_code ec;
      fs::create_directories(options.dir, ec);
      if (ec || !fs::is_directory(options.dir, ec))
        throw UsageError("--dir " + quoted_input(options.dir) + " cannot be made: " + (ec ? ec.message() : "not a directory"));
      made = options.dir;
      return;
    }
    const std::string prefix = states_prefix();
    remove_orphaned_states(fs::temp_directory_path(), prefix);
    std::string pattern = (fs::temp_directory_path() / (prefix + std::to_string(::getpid()) + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw UsageError("cannot make a temporary directory under " + fs::temp_directory_path().string() + ": " +
                       std::strerror(errno));
    made = pattern;
  });
  return session.world().all_gather_strings(made).front();
}

// Each timed or counted figure and its column, in the order the ranks send them; exact follows.
constexpr std::pair<const char*, double StateMeasured::*> kStateFigures[] = {
    {"bytes", &StateMeasured::bytes},
    {"file_bytes", &StateMeasured::file_bytes},
    {"save_s", &StateMeasured::save_s},
    {"load_s", &StateMeasured::load_s},
    {"load_bytes", &StateMeasured::load_bytes},
    {"fs_write_s", &StateMeasured::fs_write_s},
    {"fs_read_s", &StateMeasured::fs_read_s},
    {"step_s", &StateMeasured::step_s},
    {"async_staged_s", &StateMeasured::async_staged_s},
    {"async_step_s", &StateMeasured::async_step_s},
    {"async_finish_s", &StateMeasured::async_finish_s}};
static_assert(std::size(kStateFigures) + 1 == StateMeasured::kFields);

}  // namespace

std::array<double, StateMeasured::kFields> StateMeasured::as_row() const {
  std::array<double, kFields> row{};
  for (std::size_t i = 0; i < std::size(kStateFigures); ++i) row[i] = this->*kStateFigures[i].second;
  row[kFields - 1] = exact;
  return row;
}

StateMeasured StateMeasured::from_row(const double* row) {
  StateMeasured m;
  for (std::size_t i = 0; i < std::size(kStateFigures); ++i) m.*kStateFigures[i].second = row[i];
  m.exact = row[kFields - 1];
  return m;
}

void add_state_row(record::Table& table, const StateRowKey& key, const StateMeasured& m) {
  table.put({{"layout", key.layout}, {"precision", key.precision}, {"repeat", key.repeat}, {"rank", key.rank},
             {"world_size", key.world_size}, {"total_bytes", key.total_bytes}, {"formula_bytes", key.formula_bytes}});
  for (const auto& [column, figure] : kStateFigures) table.f64(column).push_back(m.*figure);  // units: the table's spec
  table.i64("restored_exactly").push_back(static_cast<std::int64_t>(m.exact));
}

struct StateBenchOutcome {
  record::Table table{kStateBenchTable};
  std::size_t failures = 0;
};

std::size_t state_bytes_per_rank(const model::GptConfig& config, int world_size, int trainers, int gathered) {
  const auto world = static_cast<double>(std::max(world_size, 1));
  const double rows = std::ceil(std::max(8.0, world) / world);
  const double trainer = gpt_training_bytes(config, rows);
  const double copy = 8.0 * 4.0 * static_cast<double>(theory::gpt_parameters(config));
  return estimated_bytes(trainers * trainer + gathered * copy);
}

StateBenchOutcome run_state_bench(Session& session, const StateBenchPlan& plan, const StateBenchOptions& options) {
  Communicator& world = session.world();
  StateBenchOutcome out;
  const std::int64_t rows = std::max<std::int64_t>(8, world.size());
  const fs::path root = states_root(session, options);
  const model::GptConfig& config = plan.config;
  const bool mixed = is_half(config.dtype);
  const auto parameters = model::build_gpt(config)->parameter_count();
  theory::StateBytes per;
  per.parameter = static_cast<double>(size_of(config.dtype));
  per.optimizer = (mixed ? 4.0 : 0.0) + 2.0 * static_cast<double>(size_of(mixed ? DataType::float32 : config.dtype));
  const double formula = theory::training_state_bytes(parameters, per);
  const std::string precision(name_of(config.dtype));
  const parallel::BatchSource source = parallel::batches_of(config);
  Progress progress("bench state", plan.layouts.size() * static_cast<std::size_t>(options.repeats),
                    session.is_root() && !session.options().quiet);
  std::size_t done = 0;
  const RowKey by_layout = [](const record::Table& t, std::size_t row) { return t.get_str("layout")[row]; };
  for (const StateLayout& layout : plan.layouts) {
    const std::size_t expected = static_cast<std::size_t>(options.repeats * world.size());
    if (session.restore_rows("/bench/state", layout.name, by_layout, expected, out.table).found) {
      done += static_cast<std::size_t>(options.repeats);
      progress.update(done - 1, layout.name + " taken from the resumed file");
      continue;
    }
    StateTrainer t = build_state_trainer(session, config, layout, rows, "--layouts");
    std::uint64_t step = 0;
    t.trainer->step(source, step++);  // the optimizer state exists from here on
    const std::size_t first_row = out.table.rows();
    for (int repeat = 0; repeat < options.repeats; ++repeat) {
      StateMeasured m;
      m.step_s = seconds_of([&] { t.trainer->step(source, step++); });
      const parallel::ParameterValues at_save = t.trainer->gathered(mixed);
      const fs::path saves = root / (layout.name + "-" + std::to_string(repeat));
      const parallel::SavedState saved = parallel::save_training_state(world, *t.trainer, saves, step,
                                                                           {.layout = layout.name, .model = config});
      m.save_s = saved.seconds;
      m.bytes = static_cast<double>(saved.bytes);
      char name[32];
      rank_file_name(world.rank(), name);
      m.file_bytes = static_cast<double>(fs::file_size(saved.directory / name));
      drop_cached(saved.directory / name);
      world.barrier();
      {
        StateTrainer fresh = build_state_trainer(session, config, layout, rows, "--layouts");
        const parallel::LoadedState loaded = parallel::load_training_state(world, *fresh.trainer, saved.directory);
        m.load_s = loaded.seconds;
        m.load_bytes = static_cast<double>(loaded.bytes);
        const parallel::ParameterValues restored = fresh.trainer->gathered(mixed);
        m.exact = restored.values == at_save.values && restored.state == at_save.state ? 1 : 0;
      }
      const auto [write_s, read_s] = file_system_baseline(
          root / ("fs-" + std::to_string(world.rank()) + ".bin"), std::max<std::size_t>(saved.bytes, std::size_t{1} << 20));
      m.fs_write_s = write_s;
      m.fs_read_s = read_s;
      // The asynchronous save: staged, then a step runs while the files are written.
      world.barrier();
      {
        std::unique_ptr<parallel::AsyncStateSave> async;
        m.async_staged_s = seconds_of([&] {
          async = std::make_unique<parallel::AsyncStateSave>(world, *t.trainer, root / (layout.name + "-async-" + std::to_string(repeat)),
                                                             step, parallel::StateSave{.layout = layout.name, .model = config});
        });
        m.async_step_s = seconds_of([&] { t.trainer->step(source, step++); });
        m.async_finish_s = seconds_of([&] { async->finish(); });
      }
      // Every rank's figures, in rank order.
      const std::array<double, StateMeasured::kFields> mine = m.as_row();
      std::vector<double> all(mine.size() * static_cast<std::size_t>(world.size()));
      world.all_gather({const_cast<double*>(mine.data()), mine.size(), DataType::float64, MemorySpace::host},
                       {all.data(), all.size(), DataType::float64, MemorySpace::host});
      for (int r = 0; r < world.size(); ++r) {
        const StateMeasured theirs = StateMeasured::from_row(all.data() + static_cast<std::size_t>(r) * mine.size());
        add_state_row(out.table, {layout.name, precision, repeat, r, world.size(), static_cast<double>(saved.total_bytes), formula},
                      theirs);
        if (theirs.exact != 1) ++out.failures;
      }
      if (static_cast<double>(saved.total_bytes) != formula) ++out.failures;
      if (session.is_root() && !options.keep) {
        std::error_code ec;
        fs::remove_all(saves, ec);
        fs::remove_all(root / (layout.name + "-async-" + std::to_string(repeat)), ec);
      }
      progress.update(done++, layout.name + " repeat " + std::to_string(repeat + 1) + ": saved " +
                                  std::to_string(saved.total_bytes) + " B in " + std::to_string(m.save_s) + " s");
    }
    session.record_rows("/bench/state", out.table, first_row);  // kept if the run is cut short
  }
  progress.finish();
  world.barrier();
  if (session.is_root() && !options.keep && options.dir.empty()) {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  return out;
}

namespace {

class BenchState final : public CommandWith<StateBenchOptions> {
 public:
  BenchState()
      : CommandWith({.name = "bench state",
                     .help = "The training state (docs/training-state.md): a GPT saved from each layout (dp, ZeRO 1-3, "
                             "tp over every rank) by every rank writing its own share, restored into a fresh trainer and "
                             "checked equal, and saved again asynchronously while a step runs; seconds and bytes per "
                             "rank beside a sequential write and read of the same bytes on the same file system, and "
                             "the bytes beside the formula",
                     .order = 105,
                     .in_run = true,
                     .tables = {&kStateBenchTable},
                     .resume_probe = ResumeProbe{{"-q", "--np", "2", "--model", "tiny", "--layouts", "dp,zero1,zero2,zero3,tp2", "--repeats", "1"},
                                                 "bench/state",
                                                 "layout,repeat,rank,bytes,total_bytes,formula_bytes,restored_exactly",
                                                 {1, 2}}}) {}

  void declare(CommandOptions& o) override {
    StateBenchOptions& p = options_;
    o.add("--model", p.model, "GPT preset:" + model_presets_help(), {std::string("tiny"), std::string("tiny")});
    o.add("--layers", p.layers, "Transformer blocks L (0: the preset's)");
    o.add("--precision", p.precision,
          "float64, float32, bfloat16 or float16 (16-bit: float32 master weights and optimizer state, saved too)");
    o.add("--layouts", p.layouts, "Comma-separated: dp, zero1, zero2, zero3, tp<T> (T dividing the world; dp over the rest)");
    o.add("--repeats", p.repeats, "Saves and restores of each layout", {2, 2});
    o.add("--dir", p.dir,
          "Directory for the saved states (made if missing; every rank must see it: a shared file system across hosts); "
          "default: a temporary directory, removed at the end (or by the next run on the host, where a signal or a "
          "kill ended this one first)");
    o.flag("--keep", p.keep, "Keep the saved states");
  }

  std::optional<int> prepare(std::optional<int>) override {
    plan_state_bench(options_);  // refused before ranks start
    return std::nullopt;
  }

  int execute(Job& job) override {
    Session& s = job.session;
    const StateBenchPlan plan = plan_state_bench(options_);
    // The trainer saved and the one restoring it, and their gathered states compared.
    s.admit(state_bytes_per_rank(plan.config, s.world().size(), 2, 2), "the state benchmark");
    const StateBenchOutcome outcome = run_state_bench(s, plan, options_);
    if (s.is_root()) {
      auto& file = s.results();
      file.write_table(outcome.table);
      file.set_attribute("/bench/state", "model", plan.model + ": " + plan.config.describe());
    }
    return outcome.failures ? kExitFailed : kExitOk;
  }
};

const RegisteredCommand<BenchState> kBenchState;

}  // namespace
}  // namespace parity::cli
