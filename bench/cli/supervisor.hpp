// The parent of a job started outside a launcher (any --np, one rank too): parity keeps
// running while mpirun runs the ranks as its child: it forwards SIGINT, SIGTERM and SIGHUP to mpirun, reads mpirun's stderr
// (the ranks' stderr comes through it too) and turns the outcome into one of parity's exit
// statuses with one line that says what happened: the signal received, the rank and host that
// died, the ranks that stalled and those that waited, or why mpirun could not start the job.
// Open MPI's own multi-line notices are read, not shown (PARITY_MPIRUN_VERBOSE=1 shows them).
#pragma once

#include <sys/types.h>

#include <ctime>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace parity::cli {

// parity's exit statuses (also in `parity --help` and README.md).
enum ExitStatus : int {
  kExitOk = 0,
  kExitFailed = 1,       // conformance cases or formula checks failed
  kExitUsage = 2,        // bad input, or the job could not be started
  kExitStalled = 3,      // an operation stalled past --timeout
  kExitFault = 4,        // a fault while running (an error on some rank)
  kExitInterrupted = 5,  // SIGINT, SIGTERM or SIGHUP
  kExitRankDied = 6,     // a rank was killed or vanished
};
extern const char* const kExitStatusHelp;

// What a supervised job came to: the exit status and the one line that explains it (empty
// where the ranks said everything themselves).
struct Outcome {
  int status = kExitOk;
  std::string line;
  bool after_results = false;  // cut short while the report was drawn: the line says the results are whole
};

// The start of the line an interrupted report says ("parity: interrupted by SIGTERM while drawing
// the report; DIR is incomplete (FILE is complete)"): the parent, which forwarded the signal,
// says it again with the one it was sent.
inline constexpr const char* kReportCutLine = "parity: interrupted by ";

// How the ranks of a job under parity's parent end (mpirun sets kTellStatusVariable for them):
// when every rank reaches its end, the job's status is the largest of the ranks'. If it is not
// 0, each rank whose own status it is says this line, and every rank exits 0; the parent ends
// with the status said. (Once a rank exits non-zero, mpirun stops the others with SIGCONT,
// then SIGTERM and SIGKILL a second apart, though each was ending anyway.) A rank that waited
// kEndPatienceSeconds for the others exits with its own status, as before the agreement: if it
// is the job's, the parent learns it from mpirun, whatever the ranks that came later agreed.
inline constexpr const char* kAgreedStatusLine = "parity: the ranks end with status ";
inline constexpr double kEndPatienceSeconds = 5;
inline constexpr const char* kTellStatusVariable = "PARITY_TELL_STATUS";

// Reads mpirun's stderr line by line. Pure: tested on recorded text without processes.
class LauncherDigest {
 public:
  explicit LauncherDigest(int world_size) : world_size_(world_size) {}
  // Takes one line (without its newline); returns whether to show it on parity's stderr.
  bool take(const std::string& line);
  // A rank's watchdog has reported a stall (the job should end within seconds).
  bool stalled() const { return !stalls_.empty(); }
  // The outcome, given mpirun's wait status and the signal parity received (0 for none).
  Outcome outcome(int wait_status, int signal_received) const;

 private:
  struct Stall {
    std::string host, operation, detail;
    double seconds = 0;
    std::string timeout;
  };
  struct Death {
    int rank = -1;
    std::string host;
    int signal = 0;
    std::string signal_name;
  };
  // What a rank's interrupted report said: the signal it had and the rest of its line.
  std::optional<std::pair<std::string, std::string>> report_cut_;
  struct Stopped {
    std::string host, signal, operation;  // operation: what it was in, "" between operations
  };
  std::string stall_line() const;
  // " while ranks 0, 1 on h1 were in all_reduce 256 x float32 (ring)": where the ranks that
  // were stopped stood, for the line about a death or an interruption ("" if none said).
  std::string stopped_in() const;
  int world_size_;
  bool in_notice_ = false;
  std::vector<std::string> notice_lines_;  // Open MPI's notices, in order
  std::map<int, Stall> stalls_;            // rank -> its watchdog's report
  std::map<int, std::string> rank_hosts_;  // rank -> host, as each rank said at its start
  std::vector<int> stall_order_;
  std::optional<Death> death_;
  std::map<int, Stopped> stopped_;  // rank -> its own "stopped by" line
  std::optional<int> first_failed_;  // "Process name: [[j,1],R]" of the first rank that failed
  std::optional<int> exit_code_;     // its "Exit code: N"
  bool abort_seen_ = false;       // MPI_ABORT: the rank said why itself
  bool fault_first_ = false;      // a rank's own error line came before any rank was stopped
  bool ranks_spoke_ = false;      // a line from the ranks came through: they did start
  std::optional<int> agreed_;     // the status the ranks said they end with (kAgreedStatusLine)
  // Open MPI could not start MPI in a rank: its most telling line, and the framework and
  // component its notice named ("" where none did).
  std::string mpi_start_failure_;
  int mpi_start_rank_ = 0;  // how telling it is: 0 none seen, 1 MPI_Init failed, 2 a framework's notice, 3 a component
  std::string framework_, component_;
  std::string notice_framework_, notice_component_;  // named in the notice being read
  bool notice_failed_ = false;                       // and it tells of a start-up failure
  bool notice_lost_ = false;  // Open MPI could not deliver a notice (its show_help failed on the way)
};

// In a rank, or in a command that runs alone (no ranks): SIGINT, SIGTERM and SIGHUP remove the
// result file's temporary sibling and end the process with kExitInterrupted, saying so in one
// line: "interrupted by SIGINT" alone (launcher_rank < 0), or as a rank "rank R on HOST:
// stopped by SIGTERM", which the supervisor reads; either ends "during OPERATION" when the
// process was inside one.
void handle_interrupts(int launcher_rank);

// In a child just forked by `parent`: SIGINT, SIGTERM and SIGHUP back to their defaults (SIGHUP
// left ignored when `hangup_ignored`: parity started under nohup), the child ended with its
// parent (PR_SET_PDEATHSIG; at once when the parent is already gone), then `command` run, looked
// up on PATH when its name has no '/'. Does not return: a command that cannot start ends the
// child with status 127, its reason on stderr.
[[noreturn]] void exec_tied_child(pid_t parent, char* const argv[], bool hangup_ignored);
// `command` as exec's argument list (pointers into it, null-terminated), made before fork: the
// child allocates nothing.
std::vector<char*> exec_arguments(const std::vector<std::string>& command);

// Runs `command` (mpirun and its arguments) as a child in its own process group, forwards
// signals, shows its stderr through a LauncherDigest and returns parity's exit status with
// the line it printed. `ranks_here`: every rank runs on this host as mpirun's child (no
// hostfile), so the first signal is also sent to them at once: mpirun passes it on only after
// odls_base_sigkill_timeout (1 s), and would stop ranks on other hosts that much later than
// these.
Outcome supervise(const std::vector<std::string>& command, int world_size, bool ranks_here);

// Partial results when a run is cut short. Whoever outlives the ranks makes the partial file
// from the journal: the supervising parent after mpirun ends, or else rank 0 itself on a signal
// or a stall, by starting `parity --write-partial JOURNAL RESULT REASON` (a handler may not
// call HDF5; a fresh process may).
inline constexpr const char* kWritePartialFlag = "--write-partial";
// Rank 0 outside supervision: where the journal and the result file are. A signal that comes
// once the journal is gone (the commit removes it after the file took its name) says the file
// is whole.
void arm_partial_results(const std::string& journal, const std::string& result);
void disarm_partial_results();
// Async-signal-safe; does nothing unless armed (then disarms).
void keep_partial_results_now(const char* reason);
// Whether `result` was committed whole since `since` (CLOCK_REALTIME_COARSE, the file system's
// clock): its journal is gone (the commit removes it only after the file took its name) and the
// file is no older than `since` (an old file kept by a run that failed before committing is not
// it). Async-signal-safe.
bool committed_since(const char* journal, const char* result, const timespec& since);
timespec file_clock_now();
// Makes the partial file and prints one line saying where it is and how to resume (or why it
// could not); returns 0, or kExitFault when it could not. Nothing happens without a journal.
int write_partial_results(const std::string& journal, const std::string& result, const std::string& reason);
// The environment variable a command that goes on otherwise than by --resume FILE sets to say
// how (state train: --restart, from its saves), for that line; inherited by its ranks.
inline constexpr const char* kContinueVariable = "PARITY_CONTINUE_WITH";

}  // namespace parity::cli
