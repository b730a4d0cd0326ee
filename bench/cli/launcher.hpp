// Starting ranks: `parity ... --np N` outside a launcher re-executes itself under
// `mpirun -n N`; under mpirun or srun it uses the world it was given.
#pragma once

#include <string>
#include <vector>

#include "bench/cli/supervisor.hpp"

namespace parity::cli {

struct LaunchRequest {
  int np = 1;
  std::string hostfile;
};

// True when this process was started by mpirun, srun or another PMI launcher.
bool under_launcher();
// This process's rank as the launcher's environment tells it (0 outside a launcher); usable
// after MPI is finalised.
int launcher_rank();
// The mpirun command line that runs `arguments` (parity's own, minus --np/--hostfile) on
// request.np ranks: --oversubscribe when np exceeds the local cores (and no hostfile),
// --allow-run-as-root only as root, --hostfile passed through.
std::vector<std::string> mpirun_command(const std::string& mpirun, const LaunchRequest& request,
                                        const std::vector<std::string>& arguments);
// Finds mpirun ($PARITY_MPIRUN, else on PATH); throws UsageError when it is missing.
std::string find_mpirun();
// Ranks started on this host alone (no hostfile) are refused before mpirun runs when there are
// more than kMaxRanksPerCore per core, or when np x kRankBaseBytes exceeds the memory available:
// mpirun would otherwise fork them until memory or process ids run out. kRankBaseBytes is a
// rank's own memory after MPI_Init, before any work (about 100 MB measured with Open MPI 4.1 on
// Debian 12: OpenBLAS buffers, MPI's shared-memory segments, the CUDA runtime's tables).
constexpr int kMaxRanksPerCore = 16;
constexpr unsigned long long kRankBaseBytes = 96ull << 20;
// The refusal's text ("" when np fits); cores or available_bytes 0 when unknown.
std::string local_ranks_problem(int np, int cores, unsigned long long available_bytes);
// Throws UsageError with local_ranks_problem's text (run_command calls it before any planning).
void check_local_ranks(const LaunchRequest& request);
// Runs the ranks under mpirun as a supervised child (bench/cli/supervisor.hpp) and returns
// parity's exit status and the line said; throws UsageError when mpirun or the working directory is missing.
Outcome relaunch(const LaunchRequest& request, const std::vector<std::string>& arguments);
// Path of the running executable (/proc/self/exe).
std::string self_executable();

}  // namespace parity::cli
