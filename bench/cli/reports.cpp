// Starting the report scripts (reports.hpp).
#include "bench/cli/reports.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "bench/cli/launcher.hpp"
#include "bench/cli/supervisor.hpp"
#include "reference/core/error.hpp"
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

fs::path default_report_dir(const std::string& file) {
  fs::path p(file);
  return p.parent_path() / (p.stem().string() + ".report");
}

}  // namespace

int draw_report(const std::vector<std::string>& files, std::string out_dir, bool force, bool quiet, bool figures) {
  for (const auto& f : files) record::inspect(f);
  if (out_dir.empty()) out_dir = default_report_dir(files.front()).string();
  if (fs::exists(fs::path(out_dir) / "index.html") && !force)
    throw UsageError("report directory " + out_dir + " already holds a report; pass --force to overwrite");
  std::vector<std::string> command = {python(), reports_script()};
  command.insert(command.end(), files.begin(), files.end());
  command.push_back("--out");
  command.push_back(out_dir);
  if (!figures) command.push_back("--no-figures");
  std::vector<char*> argv;
  for (auto& a : command) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "parity: could not start %s\n", argv[0]);
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : kExitFault;
  if (code == 127) throw UsageError("python3 not found; install python3-matplotlib python3-h5py (ci/setup.sh)");
  if (code == 0 && !quiet) std::fprintf(stderr, "[report] %s/index.html\n", out_dir.c_str());
  return code;
}

}  // namespace parity::cli
