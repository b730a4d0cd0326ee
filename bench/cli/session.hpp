// What every MPI subcommand shares: the world communicator with its watchdog (on the MPI
// runtime it is given), checks that must agree across ranks, and the result file rank 0 writes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "reference/comm/algorithms.hpp"
#include "reference/comm/mpi_communicator.hpp"
#include "reference/comm/placement.hpp"
#include "reference/record/results_file.hpp"
#include "reference/record/table.hpp"

namespace parity::record {
class OutputLock;
}

namespace parity::cli {

struct CommonOptions {
  int np = 1;
  std::string hostfile;
  std::string out;
  bool force = false;
  bool quiet = false;
  double timeout_seconds = 300;
  std::string half_accumulate = "float32";
  std::string device = "cpu";    // cpu or cuda
  std::string backend = "auto";  // auto, mpi or nccl
  int inject_stall_rank = -1;  // fault injection: this rank skips its first operation
  // Fault injection: GROUP:N:SIGNAL, a signal sent once rank 0 has journaled N blocks of rows
  // of GROUP (parse_injected_interrupt); empty: none.
  std::string inject_interrupt;
  // --resume: a partial result file (or its journal) whose finished rows this run takes
  // instead of running them again.
  std::string resume;
  // About how large the result file grows: its file system must have this much free before
  // any work starts (a `parity run` file is about 2.2 MB).
  std::uint64_t result_bytes = 8ull << 20;
};

// Checks --device and --backend before any rank starts (UsageError naming the bad value).
void validate_device_options(const CommonOptions& options);

// --inject-interrupt GROUP:N:SIGNAL, read against the groups the command writes (UsageError
// naming what is wrong). GROUP may be written with or without its leading '/'.
struct InjectedInterrupt {
  std::string group;  // "/bench/tensor"
  long blocks = 0;    // journaled blocks of rows of the group before the signal
  int signal = 0;     // SIGTERM, SIGINT or SIGHUP
};
InjectedInterrupt parse_injected_interrupt(const std::string& text, const std::vector<std::string>& groups);

// Default result file name when --out is not given: parity-<what>-<UTC time>.h5.
std::string default_output_path(const std::string& what);
// Takes the lock on a default result name for this run and sets `out` to it. A name whose file
// exists, or that another run holds (runs started in the same second in one folder share it),
// gives way to the next free one: NAME-2.h5, NAME-3.h5, ...
std::unique_ptr<record::OutputLock> lock_default_output(const std::string& what, std::string& out);

// --resume FILE: the result file is FILE unless --out names another, and replacing FILE is
// what resuming means (so --force is implied for it). A FILE.journal names FILE.
void apply_resume(CommonOptions& options);

// The key of a row of a resumable table (e.g. its case name), from the table's columns.
using RowKey = std::function<std::string(const record::Table&, std::size_t row)>;
// The key of a table measured whole before the interruption, and so taken whole.
inline const RowKey kWholeTable = [](const record::Table&, std::size_t) { return std::string(); };

class Session {
 public:
  // `mpi`: started by the caller, and finalised after the session ends (the ranks may still
  // agree how the job ends). `subcommand`: the command's name ("bench precision"); `file_stem`: of the default result
  // file's name; `resumable`: the result groups --resume takes rows back from (their columns'
  // types are checked against the resumed file's).
  // result_options: "--name=value" of every option that changes results (Command::
  // result_options), recorded in the file and compared with the resumed run's.
  Session(MpiRuntime& mpi, const CommonOptions& options, std::string subcommand, std::string file_stem,
          const std::vector<const record::TableSpec*>& resumable, std::vector<std::string> command_line,
          std::vector<std::string> result_options = {});
  ~Session();

  // The ranks' communicator: MPI on host memory, or (--device cuda) NCCL or MPI on the GPU.
  Communicator& world() { return *world_; }
  // MPI on host memory: the world itself, or on a GPU run the communicator it was built from.
  Communicator& host_world() { return bootstrap_ ? *bootstrap_ : *world_; }
  // Where tensors and collective buffers live: host, or the GPU this rank selected.
  MemorySpace space() const { return space_; }
  bool on_gpu() const { return space_ == MemorySpace::cuda; }
  const cuda::Placement& placement() const { return placement_; }
  bool is_root() const { return world_->rank() == 0; }
  const CommonOptions& options() const { return options_; }
  HalfAccumulate half() const { return half_; }
  const std::vector<std::string>& hosts() const { return hosts_; }
  // The most ranks on one host, the fewest cores of a host, and whether some host runs more
  // ranks than it has cores (then every wall-clock figure also measures waiting for a core).
  std::int64_t ranks_per_host() const { return ranks_per_host_; }
  std::int64_t cores_per_host() const { return cores_per_host_; }
  bool oversubscribed() const { return oversubscribed_; }

  // Runs `check` (which may throw UsageError) on rank 0 only and agrees on the outcome: when
  // it fails, rank 0 prints the message and every rank throws Refused.
  void agree_on_root(const std::function<void()>& check);
  // The last step before a job's ranks allocate and run. Refuses a job whose ranks on some
  // host would need more than that host's available memory, or (--device cuda) more than the
  // free memory of the GPU they share, checked on every host; then the rank named by
  // --inject-stall blocks there forever (until the watchdog of others fires).
  void admit(std::size_t bytes_per_rank, const std::string& what);
  // Environment variable through which parity's parent tells the ranks on its host who it is
  // ("PID@HOST"): --inject-interrupt signals it there, as a user would.
  static constexpr const char* kParentVariable = "PARITY_PARENT";
  static std::string parent_identity();  // this process's "PID@HOST"

  // Rank 0 only: the result file, opened with the session.
  record::ResultsFile& results();
  // Journals the rows [first, end) of a table being built (rank 0; a no-op elsewhere), so a
  // run cut short keeps them.
  void record_rows(const std::string& group, const record::Table& table, std::size_t first);
  // Rows of several tables that belong together (a point and its per-rank rows): a run cut
  // short keeps all of them or none, so --resume never takes one without the others.
  void record_rows(const std::vector<record::RowsOf>& parts);
  // --resume: when the resumed file has a row of `group` whose key (by key_of) is `key`, rank 0
  // appends it to `into` and journals it, `also` (rank 0) takes what else the row needs, and
  // every rank learns that it was found and the number `also` returned.
  struct Restored {
    bool found = false;
    std::int64_t value = 0;
  };
  Restored restore_row(const std::string& group, const std::string& key, const RowKey& key_of, record::Table& into,
                       const std::function<std::int64_t(const record::Table&, std::size_t)>& also = {});
  // --resume, for results made a block of rows at a time (a model's ranks, a world size's
  // strategies): the rows of `group` whose key is `key`, taken only when there are exactly
  // `expected` of them (kAnyCount: however many there are, at least one); a block the
  // interrupted run did not finish is measured again. `also` is summed over the rows taken.
  static constexpr std::size_t kAnyCount = static_cast<std::size_t>(-1);
  Restored restore_rows(const std::string& group, const std::string& key, const RowKey& key_of, std::size_t expected,
                        record::Table& into, const std::function<std::int64_t(const record::Table&, std::size_t)>& also = {});
  // Rank 0, --resume: a table of the resumed file (null when it has none), and the mark that
  // a row of it was taken (restore_row marks its own; this is for rows restored with it): the
  // mark is journaled with the next rows recorded for the group, the rows it became.
  const record::Table* resumed(const std::string& group) const;
  void take_resumed(const std::string& group, std::size_t row);
  // Writes provenance and renames the file into place (rank 0; a no-op elsewhere).
  void commit_results();
  // Rank 0, on a run ending early: turns what the run finished into a partial result file
  // (root attribute complete = 0, incomplete_reason = reason) and says so. Never throws.
  void keep_partial_results(const std::string& reason) noexcept;

  struct Refused {};  // thrown on every rank after a refusal printed by rank 0

 private:
  // --device cuda: selects this rank's GPU and replaces the world with a communicator on it.
  void use_gpu();
  CommonOptions options_;
  std::string subcommand_;
  std::string file_stem_;
  std::vector<std::string> resumable_;
  std::vector<const record::TableSpec*> resumable_specs_;
  std::vector<std::string> command_line_;
  std::vector<std::string> result_options_;
  std::string start_time_;
  HalfAccumulate half_;
  MpiRuntime* mpi_;
  std::unique_ptr<Communicator> bootstrap_;  // MPI on host memory, when world_ is on a GPU
  std::unique_ptr<Communicator> world_;
  MemorySpace space_ = MemorySpace::host;
  cuda::Placement placement_;
  std::vector<std::string> rank_devices_;
  int ranks_per_gpu_ = 0;  // on the most crowded GPU  // "host GPU i: name" per rank (--device cuda)
  std::vector<std::string> hosts_;
  void load_resumed();
  // Rank 0: appends rows of the resumed table `from` to `into`, journals and marks them taken;
  // returns the sum of `also` over them.
  std::int64_t take_rows(const std::string& group, const record::Table& from, const std::vector<std::size_t>& rows,
                         record::Table& into, const std::function<std::int64_t(const record::Table&, std::size_t)>& also);
  void open_results();
  // --inject-interrupt: counts a journaled block of `group`'s rows; at the N-th, signals
  // parity's parent (or this process) and waits for the signal to end the job.
  void count_injected_block(const std::string& group);
  std::optional<InjectedInterrupt> interrupt_;
  long injected_blocks_seen_ = 0;
  std::vector<std::pair<std::string, record::Attribute>> provenance() const;
  std::unique_ptr<record::OutputLock> lock_;  // rank 0, unless the parent holds it
  std::unique_ptr<record::ResultsFile> results_;
  bool supervised_ = false;  // parity's parent holds the lock and keeps partial results
  std::map<std::string, record::Table> resumed_;  // rank 0, --resume
  std::map<std::string, std::unordered_map<std::string, std::size_t>> resumed_index_;
  std::size_t restored_rows_ = 0;
  // Rows of the resumed file taken back and not yet journaled: each group's go in the record of
  // the next rows of that group, the rows they became.
  std::map<std::string, std::vector<std::size_t>> taken_;
  // The most ranks on one host, the fewest cores of a host, and whether any host runs more
  // ranks than it has cores (root attributes of the result file).
  std::int64_t ranks_per_host_ = 0, cores_per_host_ = 0;
  bool oversubscribed_ = false;
};

}  // namespace parity::cli
