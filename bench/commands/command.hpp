// The subcommands of `parity`, one registry entry each. An entry holds the command's name and
// help, its options declared once (with the values `parity run` gives them), what it checks
// before any rank starts, what it runs and records in the job, its verdict, and the result
// groups it writes and takes back on --resume. main.cpp, `parity run`, `parity list`, the
// unknown-name message and --resume iterate the registry; a new command is one file (and its
// header) ending in
//
//   const RegisteredCommand<MyCommand> kMyCommand;
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bench/cli/options.hpp"
#include "bench/cli/session.hpp"
#include "bench/cli/supervisor.hpp"  // the exit statuses
#include "bench/commands/calibration.hpp"
#include "bench/commands/point_to_point.hpp"

namespace parity::cli {

// One job's session, and the measurements several commands set their figures beside, made once
// per job: in `parity run` the first command that needs one measures and records it, and the
// others take it.
class Job {
 public:
  explicit Job(Session& session) : session(session) {}
  Session& session;
  // The ping-pong between ranks 0 and 1 with its alpha-beta fit, up to max_bytes the first time
  // (later calls take that one), written to /bench/point_to_point.
  const PointToPoint& point_to_point(std::size_t max_bytes);
  // This rank's calibration in `dtype` (bench/commands/calibrate.hpp), measured once per type
  // and job; every rank's rows go to /bench/calibrate when the job ends.
  const theory::Calibration& calibration(DataType dtype);
  const record::Table& calibration_rows() const { return calibration_rows_; }  // rank 0's, every rank's rows
  // The all-reduce, all-gather, reduce-scatter and all-to-all swept over every rank (1 KiB to
  // 4 MiB, as bench collectives times them) against their models on the ping-pong's alpha-beta
  // link: (bytes, efficiency) pairs by collective, the fraction of the model's prediction each
  // reaches, measured once per job (empty at one rank), its rows in /bench/calibrate_links and
  // each collective's alpha-beta fit in /bench/calibrate_collectives. With --resume the
  // interrupted run's are taken back.
  const CollectiveEfficiency& collective_efficiency();
  // The same over `group` (each rank's own group, every group at once) at another level, against
  // that level's link, into the same tables; keyed "level:collective".
  CollectiveEfficiency collective_efficiency_at(const std::string& level, Communicator& group, const theory::AlphaBeta& link);
  // calibration(dtype) with collective_efficiency() in it: what a benchmark predicting its
  // collectives as well as its compute takes.
  theory::Calibration calibration_with_collectives(DataType dtype);
  const record::Table& collective_rows() const { return collective_rows_; }
  // Writes what the job measured once for several commands (called before the file is committed).
  void finish();

 private:
  std::optional<PointToPoint> point_to_point_;
  std::map<DataType, theory::Calibration> calibrations_;
  record::Table calibration_rows_{kCalibrateTable};
  std::optional<CollectiveEfficiency> collective_efficiency_;
  record::Table collective_rows_{kCalibrateLinksTable};
  record::Table collective_fits_{kCalibrateCollectivesTable};
};

// How the registry's resume test runs a command (correctness/cli/resume.sh probe): a short run on
// a few ranks that journals several blocks of `group`, cut by `signal` after each count of
// `blocks` (--inject-interrupt, so the blocks may be as short as the command allows), resumed,
// and compared with a clean run on the `keys` columns; the rows kept of `group` and of
// `also_taken` must come back unchanged. Each count must leave some rows of `group` unrun.
struct ResumeProbe {
  std::vector<std::string> arguments;  // after the command's name (with -q and --np)
  std::string group;                   // without the leading '/'
  std::string keys;                    // comma-separated
  std::vector<int> blocks;
  std::string signal = "TERM";
  std::vector<std::string> also_taken;
};

class Command {
 public:
  struct Info {
    std::string name;   // the words after `parity`: "bench precision"
    std::string help;   // one paragraph for --help
    int order = 0;      // place in --help, in `parity run` and in `parity list` (smallest first)
    // An MPI job that writes a result file (`--np`, `--out`, `--resume`, ...); false: runs here,
    // alone, and writes none (list, report, pipeline validate).
    bool ranks = true;
    bool half_accumulate = false;  // takes --half-accumulate (16-bit reductions of collectives)
    bool in_run = false;           // a part of `parity run`
    // The result groups it writes, their columns declared beside it; --resume takes rows back
    // from these (tables()).
    std::vector<const record::TableSpec*> tables;
    // For a command of two words, the help of the first ("bench"), said by one of them.
    std::string parent_help;
    // How the registry's resume test cuts and resumes it; a command with ranks has a probe or
    // says why it has none.
    std::optional<ResumeProbe> resume_probe;
    std::string no_probe_reason;
  };

  explicit Command(Info info) : info_(std::move(info)) {}
  virtual ~Command() = default;
  Command(const Command&) = delete;
  Command& operator=(const Command&) = delete;
  const Info& info() const { return info_; }
  CommonOptions& common() { return common_; }
  // The default result file: parity-<stem>-<UTC time>.h5.
  std::string file_stem() const;

  // Its own options (the common ones are declared for it).
  virtual void declare(CommandOptions& options) { (void)options; }
  // Before any rank starts (and again on every rank under a launcher): checks the options and
  // plans what needs no world; world_size is --np outside a launcher, unknown under one. May set
  // common().result_bytes. Returns an exit status to end here without ranks (check --list).
  virtual std::optional<int> prepare(std::optional<int> world_size) {
    (void)world_size;
    return std::nullopt;
  }
  // In `parity run`, after its run values are set: what depends on the world (a batch of at
  // least one row per rank).
  virtual void prepare_for_run(int world_size) { (void)world_size; }
  // In the job (every rank): runs, records into the session's file and returns kExitOk or
  // kExitFailed. Commands with ranks only.
  virtual int execute(Job& job);
  // Commands without ranks: everything.
  virtual int run_here();
  // After the job, in the process that ran it (the only one, or each rank once MPI is
  // finalised): `parity run` draws its report here.
  virtual int after_job(int status) { return status; }
  // The files it reads, each with its option's name ({"--schedule", path}): --out may be none of
  // them (nor --hostfile), --force or not.
  virtual std::vector<std::pair<std::string, std::string>> inputs() const { return {}; }
  // The result groups it writes: info().tables, or tables known only once every registry is
  // filled (after static initialisation).
  virtual std::vector<const record::TableSpec*> tables() const { return info_.tables; }
  std::vector<std::string> groups() const;
  // Every option that changes what the command computes or measures (all but the kRunningGroup
  // ones), as "--name=value" with the value in effect: the result file records them, and
  // --resume refuses a run whose differ.
  std::vector<std::string> result_options() const;

  // Made by main when it builds the command line: the command's own options.
  void attach(CLI::App& app);
  const CommandOptions& options() const;

 private:
  Info info_;
  CommonOptions common_;
  std::unique_ptr<CommandOptions> options_;
};

// A command whose own options are one struct: declare() binds its fields, and prepare(),
// execute() and run_here() read them.
template <typename Options>
class CommandWith : public Command {
 public:
  using Command::Command;

 protected:
  Options options_;
};

// Every registered command, by order.
const std::vector<Command*>& commands();

// Adds a command to the registry for the life of the program (a namespace-scope constant in the
// command's file). A name registered twice stops the program at start-up.
void register_command(Command& command);
template <typename C>
class RegisteredCommand {
 public:
  RegisteredCommand() { register_command(command_); }
  C& get() { return command_; }

 private:
  C command_;
};

// Runs a parsed command: checks, ranks (re-launched under mpirun for --np outside a launcher),
// the job in an MPI session, the verdict; maps refusals and faults to exit statuses.
int run_command(Command& command, int argc, char** argv);

}  // namespace parity::cli
