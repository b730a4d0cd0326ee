// Session set-up and the result file's provenance.
#include "bench/cli/session.hpp"

#include <H5public.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <limits>
#include <map>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>

#include "reference/comm/nccl_communicator.hpp"
#include "reference/core/error.hpp"
#include "reference/core/provenance.hpp"
#include "reference/record/journal.hpp"
#include "reference/record/output.hpp"
#include "bench/cli/shared.hpp"
#include "bench/cli/supervisor.hpp"
#include "reference/cuda/device.hpp"
#include "reference/core/text.hpp"
#include "reference/ops/ops.hpp"

namespace parity::cli {

namespace fs = std::filesystem;

std::string default_output_path(const std::string& what) {
  std::string stamp = utc_now_iso8601();
  for (char& c : stamp)
    if (c == ':') c = '-';
  return "parity-" + what + "-" + stamp + ".h5";
}

std::unique_ptr<record::OutputLock> lock_default_output(const std::string& what, std::string& out) {
  const std::string first = default_output_path(what);
  const std::string stem = first.substr(0, first.size() - std::string(".h5").size());
  constexpr int kNames = 1000;
  for (int n = 1; n <= kNames; ++n) {
    const std::string name = n == 1 ? first : stem + "-" + std::to_string(n) + ".h5";
    std::error_code ec;
    if (fs::exists(fs::symlink_status(name, ec))) continue;  // a file, a folder, anything
    record::check_output_path(name, true);  // the folder's refusals (gone, /proc, not writable)
    std::unique_ptr<record::OutputLock> lock = record::OutputLock::try_take(name);
    if (lock == nullptr || fs::exists(fs::symlink_status(name, ec))) continue;  // made while we looked
    out = name;
    return lock;
  }
  throw UsageError("the default result names " + first + " to " + stem + "-" + std::to_string(kNames) +
                   ".h5 are all taken; name one with --out");
}

namespace {
// The result file --resume names: FILE, or FILE for FILE.journal.
fs::path resumed_file(const std::string& resume) {
  fs::path file = resume;
  if (file.extension() == ".journal") file.replace_extension();
  return file;
}
}  // namespace

namespace {
std::string joined_lines(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : "\n") + item;
  return out;
}
}  // namespace

void apply_resume(CommonOptions& o) {
  if (o.resume.empty()) return;
  const fs::path file = resumed_file(o.resume);
  if (!fs::exists(user_path_status("--resume", file.string())) &&
      !fs::exists(user_path_status("--resume", record::journal_path(file).string())))
    throw UsageError("--resume " + quoted_input(o.resume) + ": no such file (nor " +
                     quoted_input(record::journal_path(file).string()) + ")");
  if (o.out.empty()) o.out = file.string();
  if (same_path(o.out, file)) o.force = true;
}

void validate_device_options(const CommonOptions& o) {
  if (o.device != "cpu" && o.device != "cuda") throw UsageError("--device " + o.device + ": expected cpu or cuda");
  if (o.backend != "auto" && o.backend != "mpi" && o.backend != "nccl")
    throw UsageError("--backend " + o.backend + ": expected auto, mpi or nccl");
  if (o.device == "cpu" && o.backend == "nccl") throw UsageError("--backend nccl needs --device cuda");
  if (o.device == "cuda" && !cuda::compiled_with_cuda())
    throw UsageError("--device cuda: this parity was built without CUDA (configure with nvcc on PATH or -DPARITY_CUDA=ON)");
  if (o.backend == "nccl" && !compiled_with_nccl())
    throw UsageError("--backend nccl: this parity was built without NCCL");
}

Session::Session(MpiRuntime& mpi, const CommonOptions& options, std::string subcommand, std::string file_stem,
                 const std::vector<const record::TableSpec*>& resumable, std::vector<std::string> command_line,
                 std::vector<std::string> result_options)
    : options_(options), subcommand_(std::move(subcommand)), file_stem_(std::move(file_stem)),
      resumable_specs_(resumable), command_line_(std::move(command_line)), result_options_(std::move(result_options)),
      start_time_(utc_now_iso8601()), half_(parse_half_accumulate(options.half_accumulate)), mpi_(&mpi) {
  for (const record::TableSpec* spec : resumable_specs_) resumable_.push_back(spec->group);
  world_ = mpi_->world(options_.timeout_seconds);
  hosts_ = world_->all_gather_strings(process_host());
  // Ranks on each host against its cores: past them, every wall-clock figure also measures
  // waiting for a core (the file and the report say so beside each).
  {
    std::map<std::string, std::int64_t> ranks_on;
    for (const std::string& h : hosts_) ++ranks_on[h];
    const std::vector<std::string> cores = world_->all_gather_strings(std::to_string(online_cores()));
    cores_per_host_ = std::numeric_limits<std::int64_t>::max();
    for (std::size_t r = 0; r < hosts_.size(); ++r) {
      const std::int64_t c = std::stoll(cores[r]);
      ranks_per_host_ = std::max(ranks_per_host_, ranks_on[hosts_[r]]);
      cores_per_host_ = std::min(cores_per_host_, c);
      oversubscribed_ = oversubscribed_ || (c > 0 && ranks_on[hosts_[r]] > c);
    }
  }
  // Under parity's parent, each rank tells it its host, so that a stall line can name the host
  // of ranks that cannot report (a host cut off).
  if (std::getenv(record::OutputLock::kHeldVariable) != nullptr) {
    std::fprintf(stderr, "parity: rank %d runs on %s\n", world_->rank(), process_host().c_str());
    std::fflush(stderr);
  }
  if (options_.np > 1 && options_.np != world_->size()) {
    const std::string message = "--np " + std::to_string(options_.np) + " but the launcher started " +
                                std::to_string(world_->size()) + " ranks; drop --np under mpirun or srun";
    agree_on_root([&] { throw UsageError(message); });
  }
  if (options_.inject_stall_rank >= world_->size()) {
    const std::string message = "--inject-stall " + std::to_string(options_.inject_stall_rank) +
                                " is not a rank of the world (ranks 0-" + std::to_string(world_->size() - 1) + ")";
    agree_on_root([&] { throw UsageError(message); });
  }
  if (!options_.inject_interrupt.empty())
    agree_on_root([&] { interrupt_ = parse_injected_interrupt(options_.inject_interrupt, resumable_); });
  const bool named = !options_.out.empty();  // parity's parent (--np) names it for the ranks
  if (!named) options_.out = default_output_path(file_stem_);
  agree_on_root([&] {
    if (named) record::check_output_path(options_.out, options_.force);
    else lock_ = lock_default_output(file_stem_, options_.out);  // checked as it chooses
    record::check_free_space(options_.out, options_.result_bytes);
    // parity's parent (--np) holds the lock for the whole job; otherwise rank 0 takes it.
    const char* held = std::getenv(record::OutputLock::kHeldVariable);
    supervised_ = held != nullptr && fs::absolute(options_.out).string() == held;
    if (!supervised_ && lock_ == nullptr) lock_ = std::make_unique<record::OutputLock>(options_.out);
  });
  if (options_.device == "cuda") use_gpu();
  // The result file and its journal exist from here on, with the run's provenance, so that a
  // run cut short keeps what it finished; --resume's rows are read before the journal starts.
  agree_on_root([&] {
    load_resumed();
    open_results();
  });
}

void Session::load_resumed() {
  if (options_.resume.empty()) return;
  const fs::path file = resumed_file(options_.resume);
  const fs::path journal = record::journal_path(file);
  // A journal left beside the file is newer than it (a resumed run cut short again).
  const bool from_journal = fs::exists(journal);
  const std::string source = from_journal ? journal.string() : file.string();
  record::FileInfo info;
  if (from_journal) {
    const record::JournalReading reading = record::read_journal(journal);
    if (reading.damaged_at && is_root())
      std::fprintf(stderr, "parity: %s is damaged at byte %zu: what was journaled after it runs again\n",
                   printable_line(journal.string(), 300).c_str(), *reading.damaged_at);
    const auto text = [&](const char* name) {
      const record::Attribute* a = reading.contents.attribute("/", name);
      return a && std::holds_alternative<std::string>(*a) ? std::get<std::string>(*a) : std::string();
    };
    const record::Attribute* size = reading.contents.attribute("/", "world_size");
    info.subcommand = text("subcommand");
    info.device = text("device");
    info.half_accumulate = text("half_accumulate");
    info.options = text("options");
    info.world_size = size && std::holds_alternative<std::int64_t>(*size) ? std::get<std::int64_t>(*size) : 0;
    for (const auto& group : reading.contents.groups)
      if (group.table) resumed_[group.path] = *group.table;
  } else {
    info = record::inspect(file);
    for (const std::string& group : resumable_)
      if (record::has_table(file, group)) resumed_[group] = record::read_table(file, group);
  }
  // Each column the run writes has, in the file, the type the run gives it (a file edited or of
  // another program would fail at the first row appended, after the work).
  for (const record::TableSpec* spec : resumable_specs_) {
    const auto table = resumed_.find(spec->group);
    if (table == resumed_.end()) continue;
    for (const record::ColumnSpec& want : spec->columns)
      for (const record::Column& got : table->second.columns())
        if (got.name == want.name && got.values.index() != static_cast<std::size_t>(want.type))
          throw UsageError("--resume " + source + ": column " + spec->group + "/" + got.name + " holds " +
                           std::string(record::name_of(static_cast<record::ColumnType>(got.values.index()))) + ", not " +
                           std::string(record::name_of(want.type)) + "; the file was not written by this run's command");
  }
  const auto differs = [&](const std::string& what, const std::string& then, const std::string& now) {
    if (!then.empty() && then != now)
      throw UsageError("--resume " + source + " was a run with " + what + " " + then + ", this one has " + now +
                       "; resume it with the same command");
  };
  // What the rows measured is known from the file's record of the run; without it (an attribute
  // removed or of another type) nothing can be compared, and nothing is taken.
  const auto recorded = [&](const char* what, bool present) {
    if (!present)
      throw UsageError("--resume " + source + " does not record " + what +
                       ", so what its rows measured cannot be told; start afresh");
  };
  recorded("the subcommand it ran", !info.subcommand.empty());
  recorded("its world size", info.world_size > 0);
  recorded("its options", !info.options.empty());
  differs("the subcommand", info.subcommand, subcommand_);
  differs("world size", info.world_size ? std::to_string(info.world_size) : "", std::to_string(world_->size()));
  differs("device", info.device, on_gpu() ? "cuda" : "cpu");
  differs("--half-accumulate", info.half_accumulate, std::string(name_of(half_)));
  // Every option that changes results, as recorded: each must be there, with the value given now.
  std::map<std::string, std::string> then;
  std::size_t at = 0;
  while (at < info.options.size()) {
    const std::size_t end = std::min(info.options.find('\n', at), info.options.size());
    const std::string item = info.options.substr(at, end - at);
    if (const std::size_t eq = item.find('='); eq != std::string::npos) then[item.substr(0, eq)] = item.substr(eq + 1);
    at = end + 1;
  }
  for (const std::string& item : result_options_) {
    const std::size_t eq = item.find('=');
    const auto was = then.find(item.substr(0, eq));
    if (was == then.end())
      throw UsageError("--resume " + source + " does not record " + item.substr(0, eq) +
                       ", so what its rows measured cannot be told; start afresh");
    if (was->second != item.substr(eq + 1))
      throw UsageError("--resume " + source + " was a run with " + was->first + " " + quoted_input(was->second, 200) +
                       ", this one has " + quoted_input(item.substr(eq + 1), 200) +
                       ": its rows measured something else; resume it with the same options, or start afresh");
  }
  if (!options_.quiet) {
    std::size_t rows = 0;
    for (const auto& [group, table] : resumed_) rows += table.rows();
    std::fprintf(stderr, "[%s] resuming from %s: %zu finished rows to take\n", subcommand_.c_str(), source.c_str(), rows);
  }
}

void Session::open_results() {
  results_ = std::make_unique<record::ResultsFile>(options_.out, options_.force);
  for (const auto& [name, value] : provenance()) results_->set_attribute("/", name, value);
  for (const auto& [group, table] : resumed_) results_->carry_rows(group, table);
  if (!supervised_) arm_partial_results(record::journal_path(options_.out).string(), options_.out);
}

void Session::record_rows(const std::string& group, const record::Table& table, std::size_t first) {
  record_rows({{group, &table, first}});
}

void Session::record_rows(const std::vector<record::RowsOf>& parts) {
  if (!is_root()) return;
  std::vector<record::RowsOf> with_taken = parts;
  for (record::RowsOf& part : with_taken) {
    const auto it = taken_.find(part.group);
    if (it == taken_.end()) continue;
    part.taken.insert(part.taken.end(), it->second.begin(), it->second.end());
    taken_.erase(it);
  }
  results().append_rows(with_taken);
  for (const record::RowsOf& part : parts) count_injected_block(part.group);
}

Session::Restored Session::restore_row(const std::string& group, const std::string& key, const RowKey& key_of,
                                       record::Table& into,
                                       const std::function<std::int64_t(const record::Table&, std::size_t)>& also) {
  if (options_.resume.empty()) return {};
  std::int64_t found[2] = {0, 0};
  if (is_root()) {
    if (const record::Table* from = resumed(group)) {
      auto& index = resumed_index_[group];
      if (index.empty())
        for (std::size_t row = 0; row < from->rows(); ++row) index.emplace(key_of(*from, row), row);
      if (const auto hit = index.find(key); hit != index.end()) {
        found[1] = take_rows(group, *from, {hit->second}, into, also);
        found[0] = 1;
      }
    }
  }
  Communicator& comm = host_world();
  comm.broadcast({found, 2, DataType::int64, MemorySpace::host}, {found, 2, DataType::int64, MemorySpace::host}, 0);
  return {found[0] != 0, found[1]};
}

Session::Restored Session::restore_rows(const std::string& group, const std::string& key, const RowKey& key_of,
                                        std::size_t expected, record::Table& into,
                                        const std::function<std::int64_t(const record::Table&, std::size_t)>& also) {
  if (options_.resume.empty()) return {};
  std::int64_t found[2] = {0, 0};
  if (is_root()) {
    if (const record::Table* from = resumed(group)) {
      std::vector<std::size_t> rows;
      for (std::size_t row = 0; row < from->rows(); ++row)
        if (key_of(*from, row) == key) rows.push_back(row);
      if (!rows.empty() && (expected == kAnyCount || rows.size() == expected)) {
        found[1] = take_rows(group, *from, rows, into, also);
        found[0] = 1;
      }
    }
  }
  Communicator& comm = host_world();
  comm.broadcast({found, 2, DataType::int64, MemorySpace::host}, {found, 2, DataType::int64, MemorySpace::host}, 0);
  return {found[0] != 0, found[1]};
}

std::int64_t Session::take_rows(const std::string& group, const record::Table& from, const std::vector<std::size_t>& rows,
                                record::Table& into,
                                const std::function<std::int64_t(const record::Table&, std::size_t)>& also) {
  const std::size_t first = into.rows();
  std::int64_t sum = 0;
  for (std::size_t row : rows) {
    record::append_rows(into, from, row, row + 1);
    take_resumed(group, row);
    if (also) sum += also(from, row);
  }
  into.rows();  // the same columns as this run's rows
  record_rows(group, into, first);
  return sum;
}

void Session::take_resumed(const std::string& group, std::size_t row) {
  if (!is_root()) return;
  taken_[group].push_back(row);
  ++restored_rows_;  // rows of every table, as "finished rows to take" counts them
}

const record::Table* Session::resumed(const std::string& group) const {
  const auto it = resumed_.find(group);
  return it == resumed_.end() ? nullptr : &it->second;
}

void Session::keep_partial_results(const std::string& reason) noexcept {
  if (!is_root() || !results_) return;
  disarm_partial_results();
  try {
    results_->abandon();
    results_.reset();
    // Under parity's parent the journal is left to it: it outlives every rank, and its line is
    // the one the user sees.
    if (!supervised_) write_partial_results(record::journal_path(options_.out).string(), options_.out, reason);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parity: could not keep partial results: %s\n", printable_line(e.what()).c_str());
  }
  results_.reset();
}

void Session::use_gpu() {
  // A rank without a GPU refuses; the others learn of it here instead of waiting for it.
  std::string problem;
  try {
    placement_ = cuda::select_device_for(*world_);
  } catch (const UsageError& e) {
    problem = e.what();
  }
  for (const auto& p : world_->all_gather_strings(problem))
    if (!p.empty()) {
      agree_on_root([&] { throw UsageError(p); });
    }
  // The backend: every rank must choose the same, so the most crowded GPU decides.
  std::int64_t crowded = placement_.ranks_on_device;
  world_->all_reduce({&crowded, 1, DataType::int64, MemorySpace::host}, {&crowded, 1, DataType::int64, MemorySpace::host},
                     ReduceOp::max);
  const std::string nccl_problem =
      compiled_with_nccl() ? cuda::sharing_problem("nccl", static_cast<int>(crowded), nccl_version(),
                                                   std::getenv(cuda::kNcclMultiRankVariable))
                           : "this parity was built without NCCL";
  std::string backend = options_.backend;
  if (backend == "nccl" && !nccl_problem.empty()) agree_on_root([&] { throw UsageError("--backend nccl: " + nccl_problem); });
  if (backend == "auto") {
    backend = nccl_problem.empty() ? "nccl" : "mpi";
    if (!nccl_problem.empty() && is_root() && !options_.quiet)
      std::fprintf(stderr, "[device] using MPI with device buffers: %s\n", nccl_problem.c_str());
  }
  ranks_per_gpu_ = static_cast<int>(crowded);
  const auto devices = cuda::devices();
  rank_devices_ = world_->all_gather_strings(process_host() + " GPU " + std::to_string(placement_.device) + ": " +
                                             devices[static_cast<std::size_t>(placement_.device)].name);
  bootstrap_ = std::move(world_);
  world_ = backend == "nccl" ? make_nccl_communicator(*bootstrap_) : mpi_->world(options_.timeout_seconds, MemorySpace::cuda);
  space_ = MemorySpace::cuda;
  if (is_root() && !options_.quiet)
    std::fprintf(stderr, "[device] %d ranks, %s backend, %lld rank(s) per GPU at most; rank 0 on %s\n", world_->size(),
                 backend.c_str(), static_cast<long long>(crowded), rank_devices_.front().c_str());
}

Session::~Session() = default;

void Session::agree_on_root(const std::function<void()>& check) {
  std::int64_t failed = 0;
  if (is_root()) {
    try {
      check();
    } catch (const UsageError& e) {
      std::fprintf(stderr, "parity: %s\n", printable_line(e.what()).c_str());
      std::fflush(stderr);
      failed = 1;
    }
  }
  world_->broadcast({&failed, 1, DataType::int64, MemorySpace::host}, {&failed, 1, DataType::int64, MemorySpace::host}, 0);
  if (failed) throw Refused{};
}

void Session::admit(std::size_t bytes_per_rank, const std::string& what) {
  auto local = world_->split_by_host();
  std::string message;
  if (local->rank() == 0) {
    const unsigned long long available = available_memory_bytes();
    // In double: an estimate at the top of std::size_t (estimated_bytes) times the ranks must not wrap.
    const double needed = static_cast<double>(bytes_per_rank) * static_cast<double>(local->size());
    if (available != 0 && needed > static_cast<double>(available)) {
      char text[512];
      std::snprintf(text, sizeof(text), "%s needs %.2f GiB on %s (%d rank%s x %.2f GiB) but only %.2f GiB is available; lower the sizes (-e, --batch, --rows, --model) or the rank count",
                    what.c_str(), needed / 1073741824.0, process_host().c_str(), local->size(), local->size() == 1 ? "" : "s",
                    static_cast<double>(bytes_per_rank) / 1073741824.0, available / 1073741824.0);
      message = text;
    }
  }
  if (on_gpu() && message.empty()) {
    // Every rank on a GPU allocates the same, so the GPU must hold all of them at once.
    const std::size_t needed = estimated_bytes(static_cast<double>(bytes_per_rank) * placement_.ranks_on_device);
    message = cuda::fit_problem(needed, cuda::memory_info().free_bytes,
                                what + " on " + process_host() + " GPU " + std::to_string(placement_.device) + " (" +
                                    std::to_string(placement_.ranks_on_device) + " ranks x " +
                                    std::to_string(bytes_per_rank >> 20) + " MiB)");
    if (!message.empty()) message += "; lower the sizes or the ranks per GPU";
  }
  std::string first;
  for (const auto& m : world_->all_gather_strings(message))
    if (!m.empty()) { first = m; break; }
  if (!first.empty()) agree_on_root([&] { throw UsageError(first); });
  if (options_.inject_stall_rank != world_->rank()) return;
  // Sleep through the timeout. The stall is an operation of its own, so this rank's watchdog
  // fires too: at one rank nobody else would notice, and at several the message tells the
  // stalled rank (here) from the ones waiting for it in their next operation.
  const std::string text = "an injected stall (--inject-stall " + std::to_string(world_->rank()) + ")";
  Operation stalled;
  stalled.name = "an injected stall";  // what a signal handler can say of it
  stalled.text = text.c_str();
  Watchdog::Scope stall(world_->watchdog(), std::move(stalled));
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

InjectedInterrupt parse_injected_interrupt(const std::string& text, const std::vector<std::string>& groups) {
  const std::string usage = "--inject-interrupt '" + text + "': expected GROUP:N:SIGNAL, e.g. bench/tensor:2:TERM";
  const std::size_t first = text.find(':'), last = text.rfind(':');
  if (first == std::string::npos || first == last) throw UsageError(usage);
  InjectedInterrupt out;
  out.group = text.substr(0, first);
  if (out.group.empty() || out.group[0] != '/') out.group = "/" + out.group;
  if (std::find(groups.begin(), groups.end(), out.group) == groups.end()) {
    std::string known;
    for (const std::string& g : groups) known += (known.empty() ? "" : ", ") + g.substr(1);
    throw UsageError(usage + " (" + out.group.substr(1) + " is not a table this command writes: " +
                     (known.empty() ? "none" : known) + ")");
  }
  const std::string count = text.substr(first + 1, last - first - 1), name = text.substr(last + 1);
  char* end = nullptr;
  errno = 0;
  out.blocks = count.empty() ? 0 : std::strtol(count.c_str(), &end, 10);
  if (count.empty() || *end != '\0' || errno != 0 || out.blocks < 1)
    throw UsageError(usage + " (N: a whole number of blocks >= 1, not '" + count + "')");
  out.signal = name == "TERM" ? SIGTERM : name == "INT" ? SIGINT : name == "HUP" ? SIGHUP : 0;
  if (out.signal == 0) throw UsageError(usage + " (SIGNAL: TERM, INT or HUP, not '" + name + "')");
  return out;
}

std::string Session::parent_identity() {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  return std::to_string(getpid()) + "@" + host;
}

void Session::count_injected_block(const std::string& group) {
  if (!interrupt_ || group != interrupt_->group || ++injected_blocks_seen_ != interrupt_->blocks) return;
  // Where a user's signal goes: parity's parent when it supervises the ranks from this host
  // (it passes the signal on to mpirun), otherwise this process.
  pid_t target = getpid();
  if (const char* parent = std::getenv(kParentVariable); parent != nullptr && supervised_) {
    const std::string text = parent, mine = parent_identity();
    if (text.substr(text.find('@') + 1) == mine.substr(mine.find('@') + 1))
      target = static_cast<pid_t>(std::atol(text.c_str()));
  }
  // Nothing more is journaled before the signal lands, so the partial file holds exactly
  // these blocks, however loaded the machine. The wait is an operation: the line that reports
  // the signal names it.
  Operation waiting;
  waiting.name = "an injected interrupt";
  waiting.text = "waiting for the injected interrupt (--inject-interrupt)";
  Watchdog::Scope scope(world_->watchdog(), std::move(waiting));
  kill(target, interrupt_->signal);
  for (int i = 0; i < 6000; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::fprintf(stderr, "parity: --inject-interrupt: the signal sent to process %d did not end the job in 60 s; going on\n",
               static_cast<int>(target));
}

record::ResultsFile& Session::results() {
  require(is_root() && results_ != nullptr, "only rank 0 writes the result file, until it is committed");
  return *results_;
}

std::vector<std::pair<std::string, record::Attribute>> Session::provenance() const {
  auto devices = cuda::device_names();
  std::vector<std::pair<std::string, record::Attribute>> attributes = {
      {"parity_version", parity_version()},
      {"git_commit", git_commit()},
      {"command_line", quote_command_line(command_line_)},
      {"subcommand", subcommand_},
      {"start_time_utc", start_time_},
      {"world_size", static_cast<std::int64_t>(world_->size())},
      {"hosts", hosts_},
      {"backend", std::string(world_->backend())},
      {"device", std::string(on_gpu() ? "cuda" : "cpu")},
      {"cuda_compiled", static_cast<std::int64_t>(cuda::compiled_with_cuda() ? 1 : 0)},
      {"cuda_devices_visible", devices},
      {"mpi_library", MpiRuntime::library_version()},
      {"hdf5_version", std::to_string(H5_VERS_MAJOR) + "." + std::to_string(H5_VERS_MINOR) + "." + std::to_string(H5_VERS_RELEASE)},
      {"compiler", compiler_description()},
      {"cpu_model", cpu_model()},
      {"blas", ops::blas_description()},
      {"half_accumulate", std::string(name_of(half_))},
      {"timeout_seconds", options_.timeout_seconds},
      {"options", joined_lines(result_options_)},
      {"ranks_per_host", ranks_per_host_},
      {"cores_per_host", cores_per_host_},
      {"oversubscribed", static_cast<std::int64_t>(oversubscribed_ ? 1 : 0)},
  };
  if (!options_.resume.empty()) attributes.emplace_back("resumed_from", options_.resume);
  if (on_gpu()) {
    attributes.emplace_back("gpu", rank_devices_.front().substr(rank_devices_.front().find(": ") + 2));
    attributes.emplace_back("rank_devices", rank_devices_);
    attributes.emplace_back("ranks_per_gpu", static_cast<std::int64_t>(ranks_per_gpu_));
    attributes.emplace_back("cuda_version", cuda::version_description());
    if (compiled_with_nccl()) attributes.emplace_back("nccl_version", cuda::nccl_version_text(nccl_version()));
    attributes.emplace_back("mpi_cuda_aware", static_cast<std::int64_t>(MpiRuntime::cuda_aware() ? 1 : 0));
  }
  return attributes;
}

void Session::commit_results() {
  if (!is_root()) return;
  auto& file = results();
  file.set_attribute("/", "end_time_utc", utc_now_iso8601());
  if (!options_.resume.empty()) file.set_attribute("/", "resumed_rows", static_cast<std::int64_t>(restored_rows_));
  disarm_partial_results();
  file.commit();
  results_.reset();
  if (!options_.quiet) {
    if (!options_.resume.empty())
      std::fprintf(stderr, "[%s] %zu finished rows taken from %s (--resume), the rest run now\n", subcommand_.c_str(), restored_rows_,
                   options_.resume.c_str());
    std::fprintf(stderr, "[%s] results written to %s\n", subcommand_.c_str(), options_.out.c_str());
  }
  // A fault asked for and never injected: the run was not the interrupted one its caller meant.
  if (interrupt_ && injected_blocks_seen_ < interrupt_->blocks)
    std::fprintf(stderr, "parity: --inject-interrupt %s never fired: the run journaled %ld blocks of %s rows, not %ld\n",
                 printable_line(options_.inject_interrupt, 200).c_str(), injected_blocks_seen_, interrupt_->group.c_str(),
                 interrupt_->blocks);
}

}  // namespace parity::cli
