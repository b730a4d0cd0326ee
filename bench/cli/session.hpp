// What every MPI subcommand shares: the MPI runtime, the world communicator with its
// watchdog, checks that must agree across ranks, and the result file rank 0 writes.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "reference/comm/algorithms.hpp"
#include "reference/comm/mpi_communicator.hpp"
#include "reference/record/results_file.hpp"

namespace parity::cli {

struct CommonOptions {
  int np = 1;
  std::string hostfile;
  std::string out;
  bool force = false;
  bool quiet = false;
  double timeout_seconds = 300;
  std::string half_accumulate = "float32";
  int inject_stall_rank = -1;  // fault injection: this rank skips its first operation
};

// Default result file name when --out is not given: parity-<what>-<UTC time>.h5.
std::string default_output_path(const std::string& what);

class Session {
 public:
  Session(int* argc, char*** argv, const CommonOptions& options, std::string subcommand,
          std::vector<std::string> command_line);
  ~Session();

  Communicator& world() { return *world_; }
  bool is_root() const { return world_->rank() == 0; }
  const CommonOptions& options() const { return options_; }
  HalfAccumulate half() const { return half_; }
  const std::vector<std::string>& hosts() const { return hosts_; }

  // Runs `check` (which may throw UsageError) on rank 0 only and agrees on the outcome: when
  // it fails, rank 0 prints the message and every rank throws Refused.
  void agree_on_root(const std::function<void()>& check);
  // Refuses a job whose ranks on some host would need more than that host's available
  // memory (checked on every host, before anything is allocated).
  void check_memory(std::size_t bytes_per_rank, const std::string& what);
  // Blocks the rank named by --inject-stall forever (until the watchdog of others fires).
  void maybe_inject_stall();

  // Rank 0 only: the result file, opened on first use.
  record::ResultsFile& results();
  // Writes provenance and renames the file into place (rank 0; a no-op elsewhere).
  void commit_results();

  struct Refused {};  // thrown on every rank after a refusal printed by rank 0

 private:
  CommonOptions options_;
  std::string subcommand_;
  std::vector<std::string> command_line_;
  std::string start_time_;
  HalfAccumulate half_;
  std::unique_ptr<MpiRuntime> mpi_;
  std::unique_ptr<Communicator> world_;
  std::vector<std::string> hosts_;
  std::unique_ptr<record::ResultsFile> results_;
};

}  // namespace parity::cli
