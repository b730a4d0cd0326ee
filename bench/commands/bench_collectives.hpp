// parity bench collectives: an nccl-tests style sweep over sizes for chosen collectives and
// algorithms, the native collective as the baseline in the same run, with the host copy bandwidth
// and the harness's own cost measured alongside.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/cli/session.hpp"
#include "bench/cli/sizes.hpp"
#include "bench/commands/point_to_point.hpp"
#include "reference/comm/algorithms.hpp"
#include "reference/record/table.hpp"

namespace parity::cli {

// The result groups it writes (docs/results-schema.md).
inline const record::TableSpec kHostCopyTable{"/host/copy_bandwidth",
    "host memcpy bandwidth, first rank of each host alone",
    {{"host", ColumnType::string}, {"rank", ColumnType::int64}, {"size_bytes", ColumnType::int64, "B"},
     {"bandwidth_GBps", ColumnType::float64, "GB/s"}}};
inline const record::TableSpec kDeviceKernelsTable{"/bench/device_kernels",
    "GPU copy and reduction kernel bandwidth (bytes read + written per second)",
    {{"host", ColumnType::string}, {"rank", ColumnType::int64}, {"kernel", ColumnType::string},
     {"dtype", ColumnType::string}, {"size_bytes", ColumnType::int64, "B"},
     {"bandwidth_GBps", ColumnType::float64, "GB/s"}, {"ratio_vs_copy", ColumnType::float64}}};
inline const record::TableSpec kCollectivesBenchTable{"/bench/collectives",
    "collective benchmark, nccl-tests conventions (docs/busbw.md)",
    {{"collective", ColumnType::string}, {"algorithm", ColumnType::string}, {"dtype", ColumnType::string},
     {"redop", ColumnType::string}, {"root", ColumnType::int64}, {"in_place", ColumnType::int64},
     {"size_bytes", ColumnType::int64, "B"}, {"count", ColumnType::int64}, {"world_size", ColumnType::int64},
     {"iterations", ColumnType::int64}, {"time_us", ColumnType::float64, "us"},
     {"time_p50_us", ColumnType::float64, "us"}, {"time_p95_us", ColumnType::float64, "us"},
     {"time_min_rank_us", ColumnType::float64, "us"}, {"time_max_rank_us", ColumnType::float64, "us"},
     {"algbw_GBps", ColumnType::float64, "GB/s"}, {"busbw_GBps", ColumnType::float64, "GB/s"},
     {"busbw_vs_native", ColumnType::float64}, {"wrong", ColumnType::int64},
     {"predicted_time_us", ColumnType::float64, "us"}, {"predicted_busbw_GBps", ColumnType::float64, "GB/s"}}};
inline const record::TableSpec kCollectivesRankTimesTable{"/bench/collectives_rank_times",
    "each rank's mean time per row of /bench/collectives",
    {{"row", ColumnType::int64}, {"rank", ColumnType::int64}, {"host", ColumnType::string},
     {"time_us", ColumnType::float64, "us"}, {"size_bytes", ColumnType::int64, "B", false}}};
inline const record::TableSpec kHarnessOverheadTable{"/bench/harness_overhead",
    "the harness's cost per call: a native float32 sum all_reduce on host memory through parity's "
    "wrapper (checks and watchdog) and as a direct MPI_Allreduce, call by call in alternating order, "
    "on the world and (own_*) on a one-rank communicator, the wrapper's own cost",
    {{"size_bytes", ColumnType::int64, "B"}, {"direct_us", ColumnType::float64, "us"},
     {"wrapped_us", ColumnType::float64, "us"}, {"overhead_us", ColumnType::float64, "us"},
     {"halves_spread_us", ColumnType::float64, "us"}, {"own_direct_us", ColumnType::float64, "us", false},
     {"own_wrapped_us", ColumnType::float64, "us", false}, {"own_overhead_us", ColumnType::float64, "us", false},
     {"calls", ColumnType::int64}}};

struct BenchOptions {
  SizeSweep sweep;
  std::string min_bytes = "8", max_bytes = "64M", step_bytes = "1M";
  int iterations = 20;
  int warmup = 5;
  int check_iterations = 1;
  std::string datatypes = "float32";
  std::string ops = "sum";
  int root = 0;
  int average = 1;  // nccl-tests -a: 0 rank 0, 1 mean over ranks, 2 min, 3 max
  std::string collectives = "all_reduce";
  std::string algorithms = "all";
};
struct BenchPlanEntry {
  Collective collective;
  std::vector<const AlgorithmDescriptor*> algorithms;  // native first
};
struct BenchPlan {
  std::vector<BenchPlanEntry> entries;
  std::vector<DataType> datatypes;
  std::vector<ReduceOp> ops;
  std::vector<std::size_t> sizes;
};
// Parses and checks every option; throws UsageError for bad names, sizes or counts.
BenchPlan plan_bench(BenchOptions& options);
// Largest bytes one rank allocates for the plan at world size n.
std::size_t bench_bytes_per_rank(const BenchPlan& plan, int n);
// About how many bytes the result file of `plan` takes (checked against free space first).
std::uint64_t bench_result_bytes(const BenchPlan& plan);

// Refuses (UsageError) a -r/--root outside the world; called before any work, so that a
// refusal leaves no partial file.
void check_bench_root(const BenchOptions& options, int world_size);

struct HostCopy {
  record::Table table{kHostCopyTable};
  double best_GBps = 0;
  // --device cuda: device-to-device copy against the reduction kernel of the reference
  // algorithms, first rank of each host alone on its GPU.
  record::Table device_kernels{kDeviceKernelsTable};
};
HostCopy measure_host_copy(Session& session);

struct BenchOutcome {
  record::Table rows{kCollectivesBenchTable};
  record::Table rank_times{kCollectivesRankTimesTable};
  record::Table harness{kHarnessOverheadTable};
};
BenchOutcome run_bench(Session& session, const BenchPlan& plan, const BenchOptions& options,
                       const PointToPoint& p2p, double copy_GBps);

// Writes everything a bench run measured into the result file (rank 0).
void record_bench(Session& session, const HostCopy& copy, const BenchOutcome& bench, const BenchOptions& options);

}  // namespace parity::cli
