// The relaunch under mpirun. parity uses Open MPI's own launcher (no home-made one); this
// only spares users typing the mpirun line for local runs.
#include "bench/cli/launcher.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "bench/cli/supervisor.hpp"
#include "reference/core/error.hpp"
#include "reference/core/provenance.hpp"

namespace parity::cli {

bool under_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* value = std::getenv(name)) return std::atoi(value);
  return 0;
}

std::string self_executable() {
  std::error_code error;
  auto path = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::string("parity") : path.string();
}

std::string find_mpirun() {
  if (const char* explicit_path = std::getenv("PARITY_MPIRUN"); explicit_path && *explicit_path) {
    // Absolute: a bare name means the file here, as access() read it, not one found on PATH.
    if (access(explicit_path, X_OK) == 0) return std::filesystem::absolute(explicit_path).string();
    throw UsageError(std::string("PARITY_MPIRUN=") + explicit_path + " is not an executable");
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t colon = dirs.find(':', start);
    const std::string dir = dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/mpirun";  // empty entry = cwd
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  throw UsageError("mpirun not found on PATH; install Open MPI (apt-get install openmpi-bin), set PARITY_MPIRUN, "
                   "or start parity under your own launcher");
}

std::vector<std::string> mpirun_command(const std::string& mpirun, const LaunchRequest& request,
                                        const std::vector<std::string>& arguments) {
  std::vector<std::string> command = {mpirun, "-n", std::to_string(request.np)};
  if (request.hostfile.empty() && request.np > online_cores()) command.push_back("--oversubscribe");
  // One rank keeps every core it may use, as a process started alone would (Open MPI binds up to
  // two ranks to a core each): its watchdog, writer and GPU library threads share no single core.
  if (request.hostfile.empty() && request.np == 1) command.insert(command.end(), {"--bind-to", "none"});
  if (geteuid() == 0) command.push_back("--allow-run-as-root");
  if (!request.hostfile.empty()) {
    command.push_back("--hostfile");
    command.push_back(request.hostfile);
  }
  // Ranks on other hosts learn that parity holds the result file's lock (record::OutputLock).
  command.push_back("-x");
  command.push_back("PARITY_OUTPUT_LOCK_HELD");
  // A rank calls BLAS on one thread (ops::configure_blas_once): OpenBLAS need not start a thread
  // per core as it loads, in every rank (7 ms of each rank's start on 2 cores, more on more).
  command.push_back("-x");
  command.push_back("OPENBLAS_NUM_THREADS=1");
  // The ranks tell this process how the job ends (kAgreedStatusLine), in lines it reads as they
  // were written: no tag, time stamp or XML around them, and not sent to files instead, whatever
  // Open MPI's environment or parameter files say (the command line decides over both).
  command.push_back("-x");
  command.push_back(std::string(kTellStatusVariable) + "=1");
  for (const char* setting : {"orte_tag_output", "orte_timestamp_output", "orte_xml_output"}) {
    command.insert(command.end(), {"--mca", setting, "0"});
  }
  command.insert(command.end(), {"--mca", "orte_output_filename", ""});
  // mpirun's notices are not shown: the supervisor reads them (which rank died) and says one line.
  command.insert(command.end(), arguments.begin(), arguments.end());
  return command;
}

std::string local_ranks_problem(int np, int cores, unsigned long long available_bytes) {
  const bool too_many = cores > 0 && np > kMaxRanksPerCore * cores;
  const unsigned long long needed = static_cast<unsigned long long>(np) * kRankBaseBytes;
  const bool too_big = available_bytes != 0 && needed > available_bytes;
  if (!too_many && !too_big) return "";
  char cores_text[160] = "", memory_text[200] = "";
  if (cores > 0)
    std::snprintf(cores_text, sizeof cores_text, "%.1f ranks per core on this host's %d cores (at most %d are started)",
                  static_cast<double>(np) / cores, cores, kMaxRanksPerCore);
  if (available_bytes != 0)
    std::snprintf(memory_text, sizeof memory_text,
                  "at least %.1f GiB (%.0f MiB a rank before any work) against %.1f GiB available", needed / 1073741824.0,
                  kRankBaseBytes / 1048576.0, available_bytes / 1073741824.0);
  std::string text = "--np " + std::to_string(np) + " is too many ranks for this host: ";
  text += cores_text;
  if (cores_text[0] && memory_text[0]) text += ", and ";
  text += memory_text;
  return text + ". Ranks wait by polling, so more than the cores only share them; lower --np, or give a --hostfile "
                "to spread the ranks over hosts";
}

void check_local_ranks(const LaunchRequest& request) {
  if (!request.hostfile.empty()) return;
  const std::string problem = local_ranks_problem(request.np, online_cores(), available_memory_bytes());
  if (!problem.empty()) throw UsageError(problem);
}

namespace {
// Refuses (UsageError) to start in a working directory that was deleted: Open MPI cannot.
void check_working_directory() {
  char cwd[4096];
  if (getcwd(cwd, sizeof cwd) == nullptr && errno == ENOENT)
    throw UsageError("the working directory no longer exists; cd to an existing directory (MPI starts the ranks there)");
}
}  // namespace

Outcome relaunch(const LaunchRequest& request, const std::vector<std::string>& arguments) {
  check_working_directory();
  return supervise(mpirun_command(find_mpirun(), request, arguments), request.np, request.hostfile.empty());
}

}  // namespace parity::cli
