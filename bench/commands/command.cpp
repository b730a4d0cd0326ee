// The command registry and the one way every command with ranks runs (command.hpp).
#include "bench/commands/command.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/cli/launcher.hpp"
#include "bench/cli/shared.hpp"
#include "bench/cli/session.hpp"
#include "bench/cli/supervisor.hpp"
#include "reference/comm/mpi_communicator.hpp"
#include "reference/core/error.hpp"
#include "reference/record/output.hpp"
#include "reference/core/text.hpp"

namespace parity::cli {

namespace fs = std::filesystem;

const PointToPoint& Job::point_to_point(std::size_t max_bytes) {
  if (!point_to_point_) {
    point_to_point_ = measure_point_to_point(session, max_bytes);
    record_point_to_point(session, *point_to_point_);
  }
  return *point_to_point_;
}

const theory::Calibration& Job::calibration(DataType dtype) {
  auto it = calibrations_.find(dtype);
  if (it == calibrations_.end()) it = calibrations_.emplace(dtype, measure_calibration(session, dtype, calibration_rows_)).first;
  return it->second;
}

const CollectiveEfficiency& Job::collective_efficiency() {
  if (!collective_efficiency_)
    collective_efficiency_ =
        measure_collective_efficiency(session, session.world(), "world", point_to_point(4 << 20).model, collective_rows_, collective_fits_);
  return *collective_efficiency_;
}

CollectiveEfficiency Job::collective_efficiency_at(const std::string& level, Communicator& group, const theory::AlphaBeta& link) {
  return measure_collective_efficiency(session, group, level, link, collective_rows_, collective_fits_);
}

theory::Calibration Job::calibration_with_collectives(DataType dtype) {
  theory::Calibration c = calibration(dtype);
  c.collective_efficiency = collective_efficiency();
  return c;
}

void Job::finish() {
  if (!session.is_root()) return;
  if (calibration_rows_.rows() > 0) session.results().write_table(calibration_rows_);
  if (collective_rows_.rows() > 0) session.results().write_table(collective_rows_);
  if (collective_fits_.rows() > 0) session.results().write_table(collective_fits_);
}

std::string Command::file_stem() const {
  std::string stem = info_.name;
  std::replace(stem.begin(), stem.end(), ' ', '-');
  return stem;
}

std::vector<std::string> Command::groups() const {
  std::vector<std::string> out;
  for (const record::TableSpec* t : tables()) out.push_back(t->group);
  return out;
}

int Command::execute(Job&) { throw Error("parity " + info_.name + " runs without ranks"); }

int Command::run_here() { throw Error("parity " + info_.name + " runs on ranks"); }

void Command::attach(CLI::App& app) {
  options_ = std::make_unique<CommandOptions>(app);
  declare(*options_);
}

std::vector<std::string> Command::result_options() const {
  return options_ == nullptr ? std::vector<std::string>{} : options_->result_options();
}

const CommandOptions& Command::options() const {
  require(options_ != nullptr, "parity " + info_.name + ": options read before the command line was built");
  return *options_;
}

namespace {
std::vector<Command*>& registry() {
  static std::vector<Command*> all;
  return all;
}
}  // namespace

void register_command(Command& command) {
  auto& all = registry();
  for (const Command* c : all)
    if (c->info().name == command.info().name) {
      // Before main: no one could catch an exception; a duplicate is a programming error.
      std::fprintf(stderr, "parity: the command '%s' is registered twice\n", command.info().name.c_str());
      std::abort();
    }
  all.push_back(&command);
  std::stable_sort(all.begin(), all.end(), [](const Command* a, const Command* b) { return a->info().order < b->info().order; });
}

const std::vector<Command*>& commands() { return registry(); }

namespace {

// parity's own arguments without --np and --hostfile, for the relaunched ranks.
std::vector<std::string> arguments_for_ranks(int argc, char** argv, const std::string& out) {
  std::vector<std::string> args = {self_executable()};
  bool out_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--np" || a == "--hostfile") {
      ++i;
      continue;
    }
    if (a.rfind("--np=", 0) == 0 || a.rfind("--hostfile=", 0) == 0) continue;
    if (a == "--out" || a.rfind("--out=", 0) == 0) out_given = true;
    args.push_back(a);
  }
  // A default name carries a time stamp: fix it once so every rank agrees on it.
  if (!out_given && !out.empty()) {
    args.push_back("--out");
    args.push_back(out);
  }
  return args;
}

// Outside a launcher, runs the ranks under mpirun, supervised, and returns the job's exit
// status; under one, returns nothing and the caller starts MPI in this process. One rank too
// runs under mpirun: started alone, Open MPI's MPI_Init ends the process itself when it fails
// (a component not found, a transport that cannot start), with pages of text and status 1,
// where the supervisor reads them into one line and status 2.
std::optional<int> maybe_relaunch(int argc, char** argv, CommonOptions& common, const std::string& file_stem) {
  validate_device_options(common);
  apply_resume(common);
  if (under_launcher()) {
    handle_interrupts(launcher_rank());
    return std::nullopt;
  }
  // Held here for the whole job, so a second run refuses at once; the ranks are told.
  std::unique_ptr<record::OutputLock> lock;
  if (common.out.empty()) {
    lock = lock_default_output(file_stem, common.out);  // checked as it chooses
  } else {
    record::check_output_path(common.out, common.force);
    lock = std::make_unique<record::OutputLock>(common.out);
  }
  setenv(record::OutputLock::kHeldVariable, fs::absolute(common.out).c_str(), 1);
  setenv(Session::kParentVariable, Session::parent_identity().c_str(), 1);
  lock->share_with_children();
  const timespec started = file_clock_now();
  // The file at --out before the job (with --force, or a resumed file written again): a job that
  // succeeds renames a new one into place, which no clock on a shared file system can blur.
  struct stat before {};
  const bool existed = stat(common.out.c_str(), &before) == 0;
  const Outcome outcome = relaunch({common.np, common.hostfile}, arguments_for_ranks(argc, argv, common.out));
  const fs::path journal = record::journal_path(common.out);
  // Cut short after rank 0 committed the file (its journal then removed): nothing was lost.
  if (outcome.status >= kExitStalled && !outcome.after_results && committed_since(journal.c_str(), common.out.c_str(), started))
    std::fprintf(stderr, "parity: %s had been written whole before that (complete = 1)\n", common.out.c_str());
  // A job cut short (a signal, a dead rank, a stall) leaves its journal: this process outlives
  // the ranks, so it keeps what they finished.
  std::string reason = outcome.line.rfind("parity: ", 0) == 0 ? outcome.line.substr(8) : outcome.line;
  if (reason.empty()) reason = "the job ended with status " + std::to_string(outcome.status);
  const int kept = write_partial_results(journal.string(), common.out, reason);
  record::remove_stale_temporaries(common.out);  // rank 0's, when it was killed outright
  // A launcher that ends well without having run the job (a wrapper that starts nothing): a
  // job that succeeds always commits its file.
  struct stat after {};
  const bool written = stat(common.out.c_str(), &after) == 0 && !fs::exists(journal) &&
                       (!existed || after.st_ino != before.st_ino || after.st_dev != before.st_dev);
  if (outcome.status == 0 && !written) {
    std::fprintf(stderr, "parity: the launcher ended with status 0 but no rank ran the job (%s was not written here); "
                 "check PARITY_MPIRUN and mpirun, and that rank 0 shares this directory\n", common.out.c_str());
    return kExitUsage;
  }
  return outcome.status != 0 ? outcome.status : kept;
}

// Runs the command's job in an MPI session; maps refusals and faults to exit codes.
int run_job(MpiRuntime& mpi, int argc, char** argv, Command& command) {
  std::unique_ptr<Session> session;
  try {
    session = std::make_unique<Session>(mpi, command.common(), command.info().name, command.file_stem(),
                                        command.tables(), std::vector<std::string>(argv, argv + argc), command.result_options());
    Job job(*session);
    const int status = command.execute(job);
    job.finish();
    session->commit_results();
    return status;
  } catch (const Session::Refused&) {
    if (session) session->keep_partial_results("refused: see the message before");
    return kExitUsage;
  } catch (const UsageError& e) {
    // Thrown identically on every rank (same arguments); only rank 0 speaks.
    if (!session || session->is_root()) std::fprintf(stderr, "parity: %s\n", printable_line(e.what()).c_str());
    if (session) session->keep_partial_results(std::string("refused: ") + e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    // A fault on one rank: end the whole job now rather than leave the others waiting. Abort
    // unwinds nothing, so what the run finished is kept and the temporary file removed first.
    if (session)
      session->keep_partial_results(std::string("a fault on rank ") + std::to_string(session->world().rank()) + ": " +
                                    fault_text(e));
    record::discard_temporary_file();
    MpiRuntime::abort(std::string("parity: ") + fault_text(e), kExitFault);
  }
}

// The job's status. Under parity's parent the ranks agree on it (kAgreedStatusLine): `told`
// is then set, the parent has been told, and this rank exits 0 once after_job has run.
int with_session(int argc, char** argv, Command& command, bool& told) {
  // Read once, and not passed on to what the rank starts (the report script, say).
  const bool tell_parent = std::getenv(kTellStatusVariable) != nullptr;
  unsetenv(kTellStatusVariable);
  std::unique_ptr<MpiRuntime> mpi;
  try {
    mpi = std::make_unique<MpiRuntime>(&argc, &argv);
  } catch (const std::exception& e) {
    MpiRuntime::abort(std::string("parity: ") + e.what(), kExitFault);
  }
  const int status = run_job(*mpi, argc, argv, command);
  told = false;
  if (!tell_parent) return status;
  const std::optional<int> agreed = mpi->agreed_status(status, kEndPatienceSeconds);
  if (!agreed || *agreed == kExitOk) return status;
  // Said by each rank whose own status it is: a rank of the job's status that instead waited
  // in vain (agreed_status gave up) exits with it, and mpirun ends non-zero.
  if (status == *agreed) {
    std::fprintf(stderr, "%s%d\n", kAgreedStatusLine, *agreed);
    std::fflush(stderr);
  }
  told = true;
  return *agreed;
}

}  // namespace

int run_command(Command& command, int argc, char** argv) {
  if (!command.info().ranks) {
    // A signal ends a command that runs alone as it ends one on ranks: its line, status 5, and
    // no file it was writing left behind.
    handle_interrupts(under_launcher() ? launcher_rank() : -1);
    return command.run_here();
  }
  CommonOptions& common = command.common();
  if (command.info().half_accumulate) parse_half_accumulate(common.half_accumulate);
  const std::optional<int> world = under_launcher() ? std::nullopt : std::optional<int>(std::max(common.np, 1));
  // Before prepare(), which may plan for the world (bench pipeline's stages up to --np).
  if (!under_launcher()) check_local_ranks({common.np, common.hostfile});
  if (const std::optional<int> done = command.prepare(world)) return *done;
  std::vector<std::pair<std::string, std::string>> inputs = command.inputs();
  inputs.emplace_back("--hostfile", common.hostfile);
  refuse_output_onto("--out", common.out, inputs);
  if (const std::optional<int> status = maybe_relaunch(argc, argv, common, command.file_stem())) return *status;
  bool told = false;
  const int status = command.after_job(with_session(argc, argv, command, told));
  return told ? kExitOk : status;
}

}  // namespace parity::cli
