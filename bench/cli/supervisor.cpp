// The supervising parent of mpirun: signal forwarding, and reading mpirun's stderr into one
// line and an exit status. The patterns below are Open MPI's (4.x) wording; with another
// launcher nothing matches and the outcome falls back to its exit status.
#include "bench/cli/supervisor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <optional>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <regex>
#include <string>

#include "reference/comm/watchdog.hpp"
#include "reference/record/journal.hpp"
#include "reference/record/output.hpp"
#include "reference/record/partial.hpp"
#include "reference/core/text.hpp"

namespace parity::cli {

const char* const kExitStatusHelp =
    "Exit status: 0 success; 1 conformance cases or formula checks failed; 2 bad input, or the job could not\n"
    "start (one line on stderr); 3 an operation stalled past --timeout (the line names the ranks that did not\n"
    "enter it and those that waited); 4 a fault while running; 5 interrupted (SIGINT, SIGTERM, SIGHUP);\n"
    "6 a rank died (the line names the rank, its host, the signal and the operation the others were in).";

namespace {

bool is_rule(const std::string& line) {
  return line.size() >= 20 && line.find_first_not_of('-') == std::string::npos;
}

// Without the blanks around it, a terminal's carriage return (ssh's lines end in one) among them.
std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// "ranks 0, 2 and 3 (on vm)" style lists: "rank 1", "ranks 0, 2, 3".
std::string rank_list(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  const std::size_t shown = std::min<std::size_t>(ranks.size(), 16);
  for (std::size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > shown) out += " and " + std::to_string(ranks.size() - shown) + " more";
  return out;
}

// "ranks 0, 1 on a, rank 3 on b": the ranks grouped by host, in rank order.
std::string ranks_on_hosts(const std::vector<int>& ranks, const std::function<std::string(int)>& host_of) {
  std::vector<std::string> hosts;
  std::map<std::string, std::vector<int>> by_host;
  for (int r : ranks) {
    const std::string h = host_of(r);
    if (!by_host.count(h)) hosts.push_back(h);
    by_host[h].push_back(r);
  }
  std::string out;
  for (const auto& h : hosts) out += (out.empty() ? "" : ", ") + rank_list(by_host[h]) + " on " + h;
  return out;
}

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", s);
  return text;
}

}  // namespace

bool LauncherDigest::take(const std::string& line) {
  static const std::regex watchdog(
      R"(^parity: rank (\d+) on (\S+): (.*) stalled: not finished after ([0-9.eE+-]+) s(, waiting for (.*))?; aborting the job \(--timeout ([^)]*)\)$)");
  static const std::regex noticed_signal(
      R"(process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)( \(([^)]*)\))?)");
  static const std::regex exit_code(R"(^\s*Exit code:\s*(\d+))");
  static const std::regex process_name(R"(^\s*Process name:\s*\[\[\d+,\d+\],(\d+)\])");
  static const std::regex stopped(R"(^parity: rank (\d+) on (\S+): stopped by (SIG[A-Z]+)( during (.*))?$)");
  static const std::regex rank_host(R"(^parity: rank (\d+) runs on (\S+)$)");
  static const std::regex agreed(std::string("^") + kAgreedStatusLine + "([1-6])$");
  std::smatch m;
  if (std::regex_match(line, m, agreed)) {
    agreed_ = std::stoi(m[1]);
    return false;
  }
  if (std::regex_match(line, m, rank_host)) {
    rank_hosts_[std::stoi(m[1])] = m[2].str();
    return false;
  }
  static const std::regex report_cut(std::string("^") + kReportCutLine + "(SIG[A-Z]+)( while drawing the report; .*)$");
  if (std::regex_match(line, m, report_cut)) {
    report_cut_ = {m[1].str(), m[2].str()};
    return false;
  }
  if (std::regex_match(line, m, stopped)) {
    stopped_.emplace(std::stoi(m[1]), Stopped{m[2].str(), m[3].str(), m[5].str()});
    return false;
  }
  static const std::regex rank_error(R"(^parity: rank \d+ on \S+: )");
  if (stopped_.empty() && std::regex_search(line, rank_error) && !std::regex_match(line, watchdog)) fault_first_ = true;
  if (std::regex_match(line, m, watchdog)) {
    const int rank = std::stoi(m[1]);
    if (!stalls_.count(rank)) stall_order_.push_back(rank);
    stalls_[rank] = {m[2], m[3], m[6], std::strtod(m[4].str().c_str(), nullptr), m[7]};
    return false;
  }
  if (is_rule(line)) {
    in_notice_ = !in_notice_;
    // The framework and component a start-up failure's notice names, from the first such notice.
    if (!in_notice_ && notice_failed_ && framework_.empty()) framework_ = notice_framework_, component_ = notice_component_;
    notice_framework_.clear(), notice_component_.clear(), notice_failed_ = false;
    return false;
  }
  // mpirun's own lines: inside its notices, or prefixed "mpirun"/"[host:pid]" outside them.
  static const std::regex open_mpi_prefix(R"(^\[[^\] ]+:\d+\] )");  // "[host:pid] ..."
  const bool launcher_line = in_notice_ || line.rfind("mpirun", 0) == 0 || line.rfind("ssh:", 0) == 0 ||
                             line.rfind("*** ", 0) == 0 || std::regex_search(line, open_mpi_prefix);
  if (std::regex_search(line, m, noticed_signal)) {
    death_ = Death{std::stoi(m[1]), m[2], std::stoi(m[3]), m[5]};
  } else if (std::regex_search(line, m, process_name)) {
    if (!first_failed_) first_failed_ = std::stoi(m[1]);
  } else if (std::regex_search(line, m, exit_code)) {
    if (!exit_code_) exit_code_ = std::stoi(m[1]);
  } else if (line.find("MPI_ABORT was invoked") != std::string::npos) {
    abort_seen_ = true;
  }
  // MPI did not start in a rank (a transport or component the settings name that this host
  // lacks, as OMPI_MCA_pml=ucx without UCX's devices): Open MPI's notice, then the rank's abort;
  // mpirun stops the other ranks, whose "stopped by SIGTERM" is not the story.
  static const std::regex start_failure(
      R"((PML \S+ cannot be selected|No components were able to be opened in the \S+ framework|A requested component was not found|It looks like MPI_INIT failed|An error occurred in MPI_Init))");
  static const std::regex named(R"(^\s*(Framework|Component):\s*(\S+)\s*$)");
  static const std::regex lost_notice(R"(ORTE_ERROR_LOG: .*show_help|Data unpack would read past end of buffer)");
  if (launcher_line && std::regex_search(line, lost_notice)) notice_lost_ = true;
  if (launcher_line && std::regex_search(line, m, start_failure)) {
    // The most telling line first seen: the component that failed, else the framework's notice,
    // else "MPI_Init failed".
    const std::string what = m[1].str();
    const int rank = what.rfind("PML ", 0) == 0 ? 3 : what.find("MPI_I") == std::string::npos ? 2 : 1;
    if (rank > mpi_start_rank_) {
      mpi_start_rank_ = rank;
      mpi_start_failure_ = rank == 1 ? "MPI_Init failed" : what;
    }
    notice_failed_ = notice_failed_ || in_notice_;
  } else if (in_notice_ && std::regex_match(line, m, named)) {
    (m[1] == "Framework" ? notice_framework_ : notice_component_) = m[2].str();
  }
  if (!launcher_line) {
    ranks_spoke_ = true;
    return true;
  }
  if (!trim(line).empty()) notice_lines_.push_back(trim(line));
  return false;
}

std::string LauncherDigest::stall_line() const {
  // The operation most ranks waited in is "the" operation; ranks that reported another one
  // were stuck there, and ranks that reported nothing never entered it.
  std::map<std::string, std::vector<int>> by_operation;
  for (int r : stall_order_) by_operation[stalls_.at(r).operation].push_back(r);
  // An injected stall is the stalled rank's own doing, never the operation others wait in.
  const auto injected = [](const std::string& operation) { return operation.find("injected stall") != std::string::npos; };
  std::string main_operation = stalls_.at(stall_order_.front()).operation;
  for (const auto& [operation, ranks] : by_operation) {
    const std::size_t here = ranks.size(), there = by_operation[main_operation].size();
    if ((injected(main_operation) && !injected(operation)) || (!injected(operation) && here > there)) main_operation = operation;
  }
  std::vector<int> waiting = by_operation[main_operation], silent;
  std::sort(waiting.begin(), waiting.end());
  for (int r = 0; r < world_size_; ++r)
    if (!stalls_.count(r)) silent.push_back(r);
  const auto host_of = [this](int r) { return stalls_.at(r).host; };
  double longest = 0;
  for (int r : waiting) longest = std::max(longest, stalls_.at(r).seconds);
  const Stall& first = stalls_.at(waiting.front());
  std::string line = "parity: " + main_operation + " stalled past --timeout " + first.timeout + ": ";
  std::vector<std::string> parts;
  // Ranks that said nothing: not there yet, or cut off (a host whose link is down cannot say).
  const auto known_host = [this](int r) {
    const auto it = rank_hosts_.find(r);
    return it == rank_hosts_.end() ? std::string() : it->second;
  };
  bool hosts_known = true;
  for (int r : silent) hosts_known = hosts_known && !known_host(r).empty();
  if (!silent.empty())
    parts.push_back((hosts_known ? ranks_on_hosts(silent, known_host) : rank_list(silent)) +
                    " did not enter it or could not report");
  for (const auto& [operation, ranks] : by_operation) {
    if (operation == main_operation) continue;
    std::vector<int> sorted = ranks;
    std::sort(sorted.begin(), sorted.end());
    parts.push_back(ranks_on_hosts(sorted, host_of) + (sorted.size() == 1 ? " was" : " were") + " stuck in " + operation);
  }
  if (parts.empty() && world_size_ > 1) parts.push_back("every rank entered it");
  std::string waited = ranks_on_hosts(waiting, host_of) + " waited " + seconds_text(longest) + " s in it";
  if (!first.detail.empty() && waiting.size() == 1) waited += " for " + first.detail;
  parts.push_back(waited);
  for (std::size_t i = 0; i < parts.size(); ++i) line += (i ? "; " : "") + parts[i];
  return line;
}

std::string LauncherDigest::stopped_in() const {
  std::map<std::string, std::vector<int>> by_operation;  // ranks are visited in order
  for (const auto& [rank, stop] : stopped_)
    if (!stop.operation.empty()) by_operation[stop.operation].push_back(rank);
  const auto host_of = [this](int r) { return stopped_.at(r).host; };
  std::string out;
  for (const auto& [operation, ranks] : by_operation)
    out += (out.empty() ? " while " : ", ") + ranks_on_hosts(ranks, host_of) + (ranks.size() == 1 ? " was" : " were") +
           " in " + operation;
  return out;
}

Outcome LauncherDigest::outcome(int wait_status, int signal_received) const {
  if (signal_received) {
    const char* name = signal_received == SIGINT ? "SIGINT" : signal_received == SIGTERM ? "SIGTERM"
                                                 : signal_received == SIGHUP ? "SIGHUP" : "a signal";
    // The job had finished and its results were written; only the report was cut short.
    if (report_cut_) return {kExitInterrupted, std::string(kReportCutLine) + name + report_cut_->second, true};
    return {kExitInterrupted, std::string("parity: interrupted by ") + name + stopped_in() +
                                  (world_size_ == 1 ? "; the rank was stopped" : "; the ranks were stopped")};
  }
  if (!stalls_.empty()) return {kExitStalled, stall_line()};
  if (report_cut_) return {kExitInterrupted, std::string(kReportCutLine) + report_cut_->first + report_cut_->second, true};
  const bool exited = WIFEXITED(wait_status);
  const int code = exited ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
  // The ranks said everything else themselves.
  if (code == 0) return {agreed_.value_or(kExitOk), ""};
  // Open MPI lost its notice on the way to mpirun and no rank ever said where it runs (each does
  // once MPI has started on every rank), nor said anything of its own (a refusal), died or
  // failed, nor could a host be reached: MPI did not start, and what stopped the ranks still
  // waiting in it is not the story.
  const bool unreachable = std::any_of(notice_lines_.begin(), notice_lines_.end(),
                                       [](const std::string& l) { return l.rfind("ssh:", 0) == 0; });
  const bool start_unseen = mpi_start_rank_ == 0 && notice_lost_ && rank_hosts_.empty() && !ranks_spoke_ && !death_ &&
                            !abort_seen_ && !fault_first_ && !unreachable;
  if (mpi_start_rank_ > 0 || start_unseen) {
    const std::string failure =
        start_unseen ? "a rank ended before MPI had started on all of them (Open MPI lost its notice of why)"
                     : mpi_start_failure_;
    std::string named;
    if (!framework_.empty()) named = "framework " + framework_;
    if (!component_.empty()) named += (named.empty() ? "" : ", ") + std::string("component ") + component_;
    return {kExitUsage, "parity: MPI could not start on the ranks: " + failure +
                            (named.empty() ? "" : " (" + named + ")") +
                            "; see Open MPI's settings (OMPI_MCA_* variables, mca-params.conf; "
                            "PARITY_MPIRUN_VERBOSE=1 shows its full text)"};
  }
  if (death_) {
    // The host as the rank named it at its start (mpirun may name it by address).
    const auto said = rank_hosts_.find(death_->rank);
    const std::string host = said != rank_hosts_.end() ? said->second : death_->host;
    std::string line = "parity: rank " + std::to_string(death_->rank) + " on " + host + " died (signal " +
                       std::to_string(death_->signal) + (death_->signal_name.empty() ? "" : ", " + death_->signal_name) +
                       ")" + stopped_in() + "; the job was stopped";
    return {kExitRankDied, line};
  }
  // A rank that failed (its own error line, or MPI_Abort) said why itself; mpirun then
  // stopped the others, who may say they were stopped.
  if (abort_seen_ || fault_first_) return {code >= kExitFailed && code <= kExitFault ? code : kExitFault, ""};
  // A rank stopped by a signal that did not come through parity (which would have said so).
  if (exit_code_ == kExitInterrupted || (!exit_code_ && !stopped_.empty())) {
    const int rank = first_failed_ && stopped_.count(*first_failed_) ? *first_failed_
                     : !stopped_.empty()                             ? stopped_.begin()->first
                                                                     : first_failed_.value_or(-1);
    if (stopped_.count(rank)) {
      const Stopped& stop = stopped_.at(rank);
      return {kExitRankDied, "parity: rank " + std::to_string(rank) + " on " + stop.host + " was stopped by " + stop.signal +
                                 " from outside parity" + (stop.operation.empty() ? "" : " during " + stop.operation) +
                                 "; the job was stopped"};
    }
    return {kExitRankDied, "parity: rank " + std::to_string(rank) + " was interrupted; the job was stopped"};
  }
  // A rank that exited with one of parity's statuses said why itself.
  if (exit_code_ && *exit_code_ >= kExitFailed && *exit_code_ <= kExitRankDied) return {*exit_code_, ""};
  if (ranks_spoke_ && code >= kExitFailed && code <= kExitFault) return {code, ""};
  if (exit_code_) {
    return {kExitRankDied, "parity: a rank exited with status " + std::to_string(*exit_code_) + " without saying why"};
  }
  if (!exited) return {kExitRankDied, "parity: mpirun ended on signal " + std::to_string(WTERMSIG(wait_status))};
  if (code == 127) return {kExitUsage, "parity: could not start mpirun" + (notice_lines_.empty() ? "" : ": " + notice_lines_.front())};
  // Nothing from the ranks: mpirun could not start them. The remote shell's own complaint
  // (an unknown or unreachable host) is the most telling line, else Open MPI's first.
  const auto remote = std::find_if(notice_lines_.begin(), notice_lines_.end(),
                                   [](const std::string& l) { return l.rfind("ssh:", 0) == 0; });
  if (remote != notice_lines_.end()) return {kExitUsage, "parity: mpirun could not start the job: " + *remote};
  std::string why = notice_lines_.empty() ? "status " + std::to_string(code) : notice_lines_.front();
  for (std::size_t i = 1; i < notice_lines_.size() && why.size() < 160 && why.back() != '.'; ++i) why += " " + notice_lines_[i];
  return {kExitUsage, "parity: mpirun could not start the job: " + why + " (PARITY_MPIRUN_VERBOSE=1 shows its full text)"};
}

// ---- the supervising process -------------------------------------------------------------------

namespace {

volatile sig_atomic_t g_child = 0;
volatile sig_atomic_t g_signal = 0;

void forward(int signal) {
  // The first signal is passed on (mpirun stops the ranks); a second one kills the job's
  // whole process group at once.
  if (g_child > 0) kill(g_signal ? -g_child : g_child, g_signal ? SIGKILL : signal);
  if (!g_signal) g_signal = signal;
}

// What a process says when interrupted, prepared before any signal (a handler may not format).
char g_interrupt_text[3][256];

char g_interrupt_reason[3][64];

// Rank 0 outside supervision: the command that makes the partial file, prepared when armed.
char g_self[4096], g_journal[4096], g_result[4096];
// Taken by exchange: a signal handler and the watchdog's thread may both try, and one writes.
std::atomic<int> g_armed{0};
std::atomic<int> g_writing{0};  // the partial file's writer is running
// Rank 0 outside supervision: what a signal's line adds once the result file is committed
// (prepared when armed), and when it was armed (the file system's coarse clock).
char g_committed_text[4200];
timespec g_armed_at{};
static_assert(std::atomic<int>::is_always_lock_free, "read in signal handlers");

// Joins texts into `out` (always terminated); returns the length. Async-signal-safe.
std::size_t join_text(char* out, std::size_t size, std::initializer_list<const char*> parts) {
  std::size_t used = 0;
  for (const char* part : parts)
    for (; *part != '\0' && used + 1 < size; ++part) out[used++] = *part;
  out[used] = '\0';
  return used;
}

bool committed_since_armed() { return g_committed_text[0] != '\0' && committed_since(g_journal, g_result, g_armed_at); }

void interrupted(int signal) {
  // A second signal may reach another thread (MPI's, the watchdog's) while the first is handled:
  // that thread waits for the first to end the process.
  static std::atomic<int> entered{0};
  if (entered.exchange(1) != 0)
    for (;;) pause();
  const int which = signal == SIGINT ? 0 : signal == SIGTERM ? 1 : 2;
  record::discard_temporary_file();
  // "... stopped by SIGTERM during all_reduce 256 x float32 (ring)": the operation it was in.
  char operation[400], text[4800], reason[512];
  Watchdog::describe_current(operation, sizeof operation);
  const char* during = operation[0] ? " during " : "";
  const char* committed = committed_since_armed() ? g_committed_text : "";
  const std::size_t length = join_text(text, sizeof text, {g_interrupt_text[which], during, operation, committed, "\n"});
  const ssize_t ignored = write(STDERR_FILENO, text, length);
  (void)ignored;
  join_text(reason, sizeof reason, {g_interrupt_reason[which], during, operation});
  keep_partial_results_now(reason);
  _exit(kExitInterrupted);
}

}  // namespace

bool committed_since(const char* journal, const char* result, const timespec& since) {
  if (access(journal, F_OK) == 0) return false;
  struct stat file {};
  if (stat(result, &file) != 0) return false;
  return file.st_mtim.tv_sec > since.tv_sec || (file.st_mtim.tv_sec == since.tv_sec && file.st_mtim.tv_nsec >= since.tv_nsec);
}

timespec file_clock_now() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME_COARSE, &now);
  return now;
}

namespace {

void copy_text(char* to, std::size_t size, const std::string& from) {
  std::snprintf(to, size, "%s", from.c_str());
}

}  // namespace

void handle_interrupts(int launcher_rank) {
  // Alone, the process speaks to the user; as a rank, to the supervisor (LauncherDigest),
  // which tells a signal sent from outside to one rank from the job being stopped.
  char host[128] = "?";
  gethostname(host, sizeof host - 1);
  const char* names[3] = {"SIGINT", "SIGTERM", "SIGHUP"};
  for (int i = 0; i < 3; ++i) {
    std::snprintf(g_interrupt_reason[i], sizeof g_interrupt_reason[i], "interrupted by %s", names[i]);
    if (launcher_rank < 0) std::snprintf(g_interrupt_text[i], sizeof g_interrupt_text[i], "parity: interrupted by %s", names[i]);
    else std::snprintf(g_interrupt_text[i], sizeof g_interrupt_text[i], "parity: rank %d on %s: stopped by %s", launcher_rank, host, names[i]);
  }
  // A stall ends the process as a signal does: the watchdog's report is the reason.
  Watchdog::set_fire_hook([](const char* report) {
    record::stop_commits();  // the stalled operation may end after all: its thread must not commit now
    record::discard_temporary_file();
    keep_partial_results_now(report);
  });
  // The handler ends the process: a second signal during it (a second Ctrl-C) stays blocked on
  // its thread or waits on another (interrupted()), so the line is said once and the partial
  // file is written whole (its writer inherits the mask) before the process exits.
  struct sigaction action {};
  action.sa_handler = interrupted;
  sigemptyset(&action.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&action.sa_mask, s);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaction(s, &action, nullptr);
}

namespace {

// mpirun's standard output relayed to this process's (a pipe that a reader may close early, as
// `| head` does): mpirun stops the job when it meets a closed pipe, so it writes to this relay,
// which drops what can no longer be written. The relay never blocks the supervisor's loop (its
// digest of mpirun's stderr, the grace before a kill): what stdout does not take at once waits,
// and the relay reads no more of mpirun's until it is written.
class OutputRelay {
 public:
  OutputRelay() {
    struct stat out {};
    if (fstat(STDOUT_FILENO, &out) != 0 || !S_ISFIFO(out.st_mode)) return;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;  // then mpirun writes to stdout itself
    read_ = fds[0];
    write_ = fds[1];
  }
  ~OutputRelay() {
    if (read_ >= 0) close(read_);
    if (write_ >= 0) close(write_);
  }
  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;
  // In the child, before exec: its stdout is the relay.
  void attach_child() const {
    if (write_ >= 0) dup2(write_, STDOUT_FILENO);
  }
  // In the parent, once the child runs.
  void close_child_end() {
    if (write_ >= 0) close(write_);
    write_ = -1;
  }
  // What the supervisor's poll waits on for the relay: stdout taking more while output waits,
  // else mpirun's next output (fd -1, which poll skips, once there is neither).
  pollfd wanted() const {
    if (!pending_.empty()) return {STDOUT_FILENO, POLLOUT, 0};
    return {read_, POLLIN, 0};
  }
  // After poll said so: writes what waits, or reads mpirun's next output and writes it.
  void step() {
    if (pending_.empty()) read_some();
    write_some();
  }
  // Once mpirun has ended (its stderr closed): the rest, until the pipe ends or a second passes
  // in which stdout takes nothing or mpirun says nothing (a daemon may keep the pipe open).
  void drain() {
    while (read_ >= 0 || !pending_.empty()) {
      pollfd next = wanted();
      if (poll(&next, 1, 1000) <= 0) return;
      step();
    }
  }

 private:
  void read_some() {
    char buffer[4096];
    const ssize_t n = read(read_, buffer, sizeof buffer);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
      close(read_);
      read_ = -1;
      return;
    }
    if (!closed_) pending_.append(buffer, static_cast<std::size_t>(n));
  }
  // Up to PIPE_BUF bytes a write while poll says stdout takes them: a write that size to a pipe
  // with room never blocks.
  void write_some() {
    while (!pending_.empty()) {
      pollfd room{STDOUT_FILENO, POLLOUT, 0};
      if (poll(&room, 1, 0) <= 0) return;
      const ssize_t w = write(STDOUT_FILENO, pending_.data(), std::min<std::size_t>(pending_.size(), PIPE_BUF));
      if (w < 0 && (errno == EINTR || errno == EAGAIN)) return;
      if (w < 0) {  // EPIPE (SIGPIPE is ignored): the reader has gone; the rest is dropped
        closed_ = true;
        pending_.clear();
        return;
      }
      pending_.erase(0, static_cast<std::size_t>(w));
    }
  }
  int read_ = -1, write_ = -1;
  bool closed_ = false;
  std::string pending_;
};

// Sends `signal` to the ranks mpirun started on this host: its children running this program.
void signal_local_ranks(pid_t launcher, int signal) {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return;
  std::filesystem::directory_iterator it("/proc", error), end;
  for (; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::FILE* stat = std::fopen((it->path() / "stat").c_str(), "r");
    if (!stat) continue;
    char text[1024] = {};
    const std::size_t n = std::fread(text, 1, sizeof text - 1, stat);
    std::fclose(stat);
    // pid (comm) state ppid ...: comm may hold spaces and parentheses, so read after the last ')'.
    const char* after = static_cast<const char*>(memrchr(text, ')', n));
    long ppid = 0;
    if (!after || std::sscanf(after + 1, " %*c %ld", &ppid) != 1 || ppid != launcher) continue;
    std::error_code exe_error;
    if (std::filesystem::read_symlink(it->path() / "exe", exe_error) == self && !exe_error)
      kill(static_cast<pid_t>(std::stol(name)), signal);
  }
}

}  // namespace

std::vector<char*> exec_arguments(const std::vector<std::string>& command) {
  std::vector<char*> argv;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  return argv;
}

void exec_tied_child(pid_t parent, char* const argv[], bool hangup_ignored) {
  struct sigaction restore {};
  restore.sa_handler = SIG_DFL;
  for (int s : {SIGINT, SIGTERM, SIGHUP})
    if (s != SIGHUP || !hangup_ignored) sigaction(s, &restore, nullptr);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(kExitInterrupted);
  execvp(argv[0], argv);
  std::fprintf(stderr, "%s: %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

Outcome supervise(const std::vector<std::string>& command, int world_size, bool ranks_here) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "parity: cannot create a pipe: %s\n", std::strerror(errno));
    return {kExitUsage, ""};
  }
  struct sigaction action {};
  action.sa_handler = forward;
  sigemptyset(&action.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaction(s, &action, nullptr);
  OutputRelay stdout_relay;
  const std::vector<char*> argv = exec_arguments(command);
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) {
    std::fprintf(stderr, "parity: cannot fork: %s\n", std::strerror(errno));
    return {kExitUsage, ""};
  }
  if (child == 0) {
    // mpirun in its own process group: the terminal's Ctrl-C reaches parity, which passes it
    // on once, instead of reaching mpirun and the ranks all at the same time.
    setpgid(0, 0);
    const int null_in = open("/dev/null", O_RDONLY);
    if (null_in >= 0) dup2(null_in, STDIN_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);
    stdout_relay.attach_child();
    exec_tied_child(parent, argv.data(), false);
  }
  g_child = child;
  close(pipe_fds[1]);
  stdout_relay.close_child_end();
  const bool verbose = [] {
    const char* v = std::getenv("PARITY_MPIRUN_VERBOSE");
    return v && *v && std::string(v) != "0";
  }();
  LauncherDigest digest(world_size);
  std::string pending;
  char buffer[4096];
  // mpirun may never end by itself when a host is cut off (it waits on the host's daemon), nor
  // on the signal passed on: once a stall was reported or a signal passed on, it has
  // kEndGrace seconds before its whole process group is killed.
  constexpr double kEndGrace = 10;
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> ending;
  bool killed = false, reaped = false;
  int status = 0;
  for (;;) {
    if (!ending && g_signal && ranks_here) signal_local_ranks(child, SIGTERM);  // as mpirun would, a second sooner
    if (!ending && (digest.stalled() || g_signal)) ending = Clock::now();
    if (ending && !killed && std::chrono::duration<double>(Clock::now() - *ending).count() > kEndGrace) {
      kill(-child, SIGKILL);
      killed = true;
    }
    pollfd readable[2] = {{pipe_fds[0], POLLIN, 0}, stdout_relay.wanted()};
    const int ready = poll(readable, 2, 250);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      // The pipe may stay open after mpirun is gone (a daemon kept it): then stop reading.
      if (killed && waitpid(child, &status, WNOHANG) == child) {
        reaped = true;
        break;
      }
      continue;
    }
    if (readable[1].revents != 0) stdout_relay.step();
    if (readable[0].revents == 0) continue;
    const ssize_t n = read(pipe_fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buffer, static_cast<std::size_t>(n));
    std::size_t newline;
    while ((newline = pending.find('\n')) != std::string::npos) {
      const std::string line = pending.substr(0, newline);
      pending.erase(0, newline + 1);
      if (digest.take(line) || verbose) std::fprintf(stderr, "%s\n", printable_line(line).c_str());
    }
  }
  if (!pending.empty() && (digest.take(pending) || verbose)) std::fprintf(stderr, "%s\n", printable_line(pending).c_str());
  close(pipe_fds[0]);
  stdout_relay.drain();
  while (!reaped && waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  const Outcome outcome = digest.outcome(status, g_signal);
  if (!outcome.line.empty()) std::fprintf(stderr, "%s\n", printable_line(outcome.line).c_str());
  std::fflush(stderr);
  return outcome;
}

void arm_partial_results(const std::string& journal, const std::string& result) {
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return;
  copy_text(g_self, sizeof g_self, self.string());
  copy_text(g_journal, sizeof g_journal, std::filesystem::absolute(journal).string());
  copy_text(g_result, sizeof g_result, std::filesystem::absolute(result).string());
  copy_text(g_committed_text, sizeof g_committed_text, "; " + result + " had been written whole before it (complete = 1)");
  g_armed_at = file_clock_now();
  g_armed.store(1);
}

void disarm_partial_results() { g_armed.store(0); }

void keep_partial_results_now(const char* reason) {
  if (g_armed.exchange(0) == 0) {
    // Another thread (the watchdog's) is writing it: the process ends only once it is written.
    while (g_writing.load() != 0) {
      const timespec pause{0, 10'000'000};
      nanosleep(&pause, nullptr);
    }
    return;
  }
  g_writing.store(1);
  // vfork + execve: no allocation and no atfork handlers (MPI's included) in this process.
  char flag[32];
  join_text(flag, sizeof flag, {kWritePartialFlag});
  char* argv[] = {g_self, flag, g_journal, g_result, const_cast<char*>(reason), nullptr};
  const pid_t child = vfork();
  if (child == 0) {
    execve(g_self, argv, environ);
    _exit(127);
  }
  if (child >= 0) {
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
  }
  g_writing.store(0);
}

int write_partial_results(const std::string& journal, const std::string& result, const std::string& reason) {
  // A file of another kind at the journal's name is not this run's (the run refused it).
  if (!std::filesystem::exists(journal) || !record::is_journal(journal)) return 0;
  try {
    const record::PartialSummary kept = record::write_partial(journal, result, reason);
    // How the run goes on: --resume FILE, or what the command set in kContinueVariable.
    const char* how = std::getenv(kContinueVariable);
    if (kept.tables > 0)
      std::fprintf(stderr, "parity: partial results kept in %s (%zu tables, %zu rows finished); continue with %s%s\n",
                   result.c_str(), kept.tables, kept.rows, how && *how ? how : "--resume ",
                   how && *how ? "" : result.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parity: could not keep partial results: %s\n", e.what());
    return kExitFault;
  }
}

}  // namespace parity::cli
