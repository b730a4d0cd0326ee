// Starting the report scripts (reports.hpp).
#include "bench/cli/reports.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "bench/cli/launcher.hpp"
#include "bench/cli/shared.hpp"
#include "bench/cli/supervisor.hpp"
#include "reference/core/error.hpp"
#include "reference/core/text.hpp"
#include "reference/record/output.hpp"
#include "reference/record/results_file.hpp"

namespace parity::cli {

namespace fs = std::filesystem;

namespace {

std::string reports_script() {
  std::vector<fs::path> candidates;
  if (const char* dir = std::getenv("PARITY_REPORTS_DIR")) candidates.emplace_back(fs::path(dir) / "parity_report.py");
  const fs::path exe = self_executable();
  candidates.push_back(exe.parent_path().parent_path() / "share/parity/reports/parity_report.py");
  candidates.push_back(fs::path(PARITY_SOURCE_DIR) / "reports/parity_report.py");
  for (const auto& c : candidates)
    if (fs::exists(c)) return c.string();
  throw UsageError("report scripts not found (looked in $PARITY_REPORTS_DIR, " + candidates[1].parent_path().string() +
                   ", " + candidates.back().parent_path().string() + ")");
}

std::string python() {
  if (const char* p = std::getenv("PARITY_PYTHON"); p && *p) return p;
  return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

volatile std::sig_atomic_t g_report_signal = 0;

void note_signal(int signal) { g_report_signal = signal; }

fs::path default_report_dir(const std::string& file) {
  fs::path p(file);
  return p.parent_path() / (p.stem().string() + ".report");
}

}  // namespace

namespace {
// The files a report is made of: its page, its summary, its figures, the script's write test.
bool is_report_file(const std::string& name) {
  const auto ends = [&](const char* end) {
    const std::size_t n = std::strlen(end);
    return name.size() >= n && name.compare(name.size() - n, n, end) == 0;
  };
  return name == "index.html" || name == "summary.md" || name == ".parity-report-write-test" ||
         (name.rfind("fig", 0) == 0 && ends(".png"));
}
}  // namespace

void check_report_dir(const std::string& dir, const std::vector<std::string>& files, const std::string& option) {
  if (dir.empty()) return;
  const std::string given = option + " " + quoted_input(dir, 200);
  const fs::file_status status = user_path_status(option, dir);
  for (const std::string& f : files)
    if (same_path(dir, f)) throw UsageError(given + " is the result file the report draws; choose another " + option);
  if (fs::exists(status) && !fs::is_directory(status)) throw UsageError(given + " exists and is not a directory");
  // A folder of other files (a home directory, /) is not a report's: the page and figures would
  // be scattered among them, and --force would not take them back. A report's own files (those of
  // a draw cut short included) are its to replace.
  if (fs::exists(status)) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      if (!is_report_file(it->path().filename().string()))
        throw UsageError(given + " holds " + quoted_input(it->path().filename().string()) +
                         ", which no report writes; choose a new or empty folder");
    if (ec) throw UsageError(given + ": cannot read it: " + ec.message());
  }
  // The report's own folder is made when missing, in a folder that exists (as a result file's
  // is): a mistyped path makes no tree of folders.
  refuse_kernel_view(option, dir);
  fs::path own = fs::path(dir).lexically_normal();
  if (!own.has_filename()) own = own.parent_path();  // "report/"
  fs::path parent = own.parent_path();
  if (parent.empty()) parent = ".";
  if (!fs::exists(status) && !fs::is_directory(user_path_status(option, parent.string())))
    throw UsageError(given + ": its folder " + quoted_input(parent.string(), 200) + " does not exist");
  const fs::path writable = fs::exists(status) ? fs::path(dir) : parent;
  if (access(writable.c_str(), W_OK | X_OK) != 0)
    throw UsageError(given + ": cannot write in " + quoted_input(writable.string(), 200));
}

int draw_report(const std::vector<std::string>& files, std::string out_dir, bool force, bool quiet, bool figures,
                const std::string& dir_option) {
  for (const auto& f : files) record::inspect(f);
  if (out_dir.empty()) out_dir = default_report_dir(files.front()).string();
  check_report_dir(out_dir, files, dir_option);
  const fs::path page = fs::path(out_dir) / "index.html";
  if (fs::exists(page) && !force)
    throw UsageError("report directory " + out_dir + " already holds a report; pass --force to overwrite");
  // The page goes first (--force): one there after the script is the script's.
  std::error_code removed;
  fs::remove(page, removed);
  std::vector<std::string> command = {python(), reports_script()};
  command.insert(command.end(), files.begin(), files.end());
  command.push_back("--out");
  command.push_back(out_dir);
  if (!figures) command.push_back("--no-figures");
  // A signal to parity reaches the script too (SIGTERM passed on; a terminal's Ctrl-C reaches
  // both), and parity waits for it to end: no script is left drawing after parity has gone.
  // SIGHUP ignored when parity started (nohup) stays ignored, by both. (SIGINT is taken even so:
  // a shell starts a background job with it ignored, and the rest of parity takes it too.)
  g_report_signal = 0;
  struct sigaction action {}, previous[3];
  action.sa_handler = note_signal;
  sigemptyset(&action.sa_mask);
  const int signals[3] = {SIGINT, SIGTERM, SIGHUP};
  const auto kept_ignored = [&](int i) { return signals[i] == SIGHUP && previous[i].sa_handler == SIG_IGN; };
  for (int i = 0; i < 3; ++i) {
    sigaction(signals[i], nullptr, &previous[i]);
    if (!kept_ignored(i)) sigaction(signals[i], &action, nullptr);
  }
  const std::vector<char*> argv = exec_arguments(command);
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) throw UsageError(std::string("cannot start the report script: ") + std::strerror(errno));
  if (child == 0) exec_tied_child(parent, argv.data(), kept_ignored(2));
  int status = 0;
  bool passed_on = false;
  std::optional<std::chrono::steady_clock::time_point> signalled;
  // Polled (a blocking wait could miss a signal that lands just before it).
  bool lost = false;
  for (;;) {
    const pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child) break;
    if (done < 0 && errno != EINTR) {
      lost = true;
      break;
    }
    if (g_report_signal && !passed_on) {
      kill(child, SIGTERM);
      passed_on = true;
      signalled = std::chrono::steady_clock::now();
    }
    // The script has 5 s to end on the signal passed on, then it is killed.
    if (signalled && std::chrono::steady_clock::now() - *signalled > std::chrono::seconds(5)) kill(child, SIGKILL);
    usleep(20000);
  }
  for (int i = 0; i < 3; ++i) sigaction(signals[i], &previous[i], nullptr);
  if (g_report_signal) {
    const int s = g_report_signal;
    // A rank of `parity run` draws after its result file was committed, and says so; the parent
    // rewrites the line with the signal it was sent (kReportCutLine).
    std::string whole;
    if (under_launcher())
      for (const auto& f : files) whole += (whole.empty() ? " (" : ", ") + printable_line(f, 300);
    if (!whole.empty()) whole += files.size() == 1 ? " is complete)" : " are complete)";
    std::fprintf(stderr, "%s%s while drawing the report; %s is incomplete%s\n", kReportCutLine,
                 s == SIGINT ? "SIGINT" : s == SIGTERM ? "SIGTERM" : "SIGHUP", printable_line(out_dir, 300).c_str(),
                 whole.c_str());
    return kExitInterrupted;
  }
  if (lost) {
    std::fprintf(stderr, "parity: lost the report script's status: %s\n", std::strerror(errno));
    return kExitFault;
  }
  // The script's statuses: 0 drawn, 2 bad input, 4 a fault while drawing, 130 its own Ctrl-C.
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 127)
    throw UsageError(python() + " could not be started for the report (line above); set PARITY_PYTHON or install python3, "
                     "python3-matplotlib and python3-h5py (ci/setup.sh)");
  if (code == 0) {
    // Said drawn only where the script wrote the page (an older one was removed before it ran).
    if (!fs::exists(page)) {
      std::fprintf(stderr, "parity: the report script (%s) ended with status 0 but did not write %s\n", python().c_str(),
                   printable_line(page.string(), 300).c_str());
      return kExitFault;
    }
    if (!quiet) std::fprintf(stderr, "[report] %s/index.html\n", printable_line(out_dir, 300).c_str());
  }
  if (code == 0 || code == kExitUsage || code == kExitFault) return code;
  if (code == 130) return kExitInterrupted;
  // Python itself failed (a broken installation, a fatal error): a fault, in one line.
  std::fprintf(stderr, "parity: the report script (%s) ended %s %d\n", python().c_str(),
               WIFSIGNALED(status) ? "by signal" : "with status", WIFSIGNALED(status) ? WTERMSIG(status) : code);
  return kExitFault;
}

}  // namespace parity::cli
