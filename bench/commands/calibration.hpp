// The calibration: the primitives measured on the ranks at hand (matrix products over a grid of
// shapes, the element-wise and row ops a training step is made of), recorded in
// /bench/calibrate. `parity bench calibrate` (bench_calibrate.cpp) writes it as a cluster
// description `parity plan` reads; the benchmarks predict their step times from the same
// measurement (Job::calibration).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bench/cli/session.hpp"
#include "reference/record/table.hpp"
#include "reference/theory/calibration.hpp"

namespace parity::cli {

// The result groups it writes (docs/results-schema.md).
inline const record::TableSpec kCalibrateTable{"/bench/calibrate",
    "primitives measured on every rank at the same time: matrix products over a grid of shapes, the ops a "
    "training step is made of, the memory's stream, and the ceilings the ops are read against (memcpy, the "
    "vectorised exp), each the median of three timed batches",
    {{"rank", ColumnType::int64}, {"host", ColumnType::string}, {"dtype", ColumnType::string},
     {"kind", ColumnType::string}, {"op", ColumnType::string}, {"m", ColumnType::int64}, {"n", ColumnType::int64},
     {"k", ColumnType::int64}, {"elements", ColumnType::int64}, {"seconds", ColumnType::float64, "s"},
     {"GFLOPs", ColumnType::float64, "GFLOP/s"}, {"ns_per_element", ColumnType::float64, "ns"},
     {"bytes", ColumnType::int64, "B"}}};
inline const record::TableSpec kCalibrateLinksTable{"/bench/calibrate_links",
    "the all-reduce, all-gather, reduce-scatter and all-to-all, swept as bench collectives times them, over every "
    "rank (level world) and, where the ranks span hosts, over the ranks of each host (node) and one rank a host "
    "(network), against their ring (pairwise) models on the level's alpha-beta link: the fraction of the link's "
    "bandwidth each collective reaches",
    {{"level", ColumnType::string, "", false}, {"collective", ColumnType::string}, {"size_bytes", ColumnType::int64, "B"}, {"ranks", ColumnType::int64},
     {"time_s", ColumnType::float64, "s"}, {"ring_model_s", ColumnType::float64, "s"},
     {"bus_GBps", ColumnType::float64, "GB/s"}, {"efficiency", ColumnType::float64}}};

inline const record::TableSpec kCalibrateLevelsTable{"/bench/calibrate_levels",
    "the link at each level: the ping-pong of rank 0 with the first rank on its host (node) and with the first rank "
    "on another host (network), fitted to alpha and beta",
    {{"level", ColumnType::string}, {"peer", ColumnType::int64}, {"peer_host", ColumnType::string},
     {"alpha_us", ColumnType::float64, "us"}, {"beta_us_per_byte", ColumnType::float64, "us"},
     {"bandwidth_GBps", ColumnType::float64, "GB/s"}}};

inline const record::TableSpec kCalibrateCollectivesTable{"/bench/calibrate_collectives",
    "each collective's own alpha and beta at each level, fitted to its sweep in /bench/calibrate_links as the "
    "ping-pong's are (the smallest size's time, the slope from there to the largest)",
    {{"level", ColumnType::string}, {"collective", ColumnType::string}, {"ranks", ColumnType::int64},
     {"alpha_us", ColumnType::float64, "us"}, {"beta_us_per_byte", ColumnType::float64, "us"},
     {"bandwidth_GBps", ColumnType::float64, "GB/s"}}};

// The sizes the collectives are swept over (bytes as bench collectives counts a row's).
inline constexpr std::size_t kCollectiveSizes[] = {std::size_t{1} << 10, std::size_t{16} << 10, std::size_t{64} << 10,
                                                   std::size_t{256} << 10, std::size_t{1} << 20, std::size_t{4} << 20};
// Each calibrated collective swept over `group` (every rank of it at once) with bench
// collectives' timing (time_native_sweep: 2 warm-up calls, the mean over ranks of 10 calls each)
// at kCollectiveSizes (those of at least one float32 element a rank), against its model on `link` (theory::collective_model_seconds):
// (bytes, efficiency) pairs keyed by collective, at a level other than "world" by
// "level:collective"; every rank the same, none for a group of one rank. Rank 0 appends the
// rows to `links` (with --resume the interrupted run's rows of that level are taken back
// instead) and each collective's alpha-beta fit to `fits`.
using CollectiveEfficiency = std::map<std::string, std::vector<std::pair<double, double>>>;
CollectiveEfficiency measure_collective_efficiency(Session& session, Communicator& group, const std::string& level,
                                                   const theory::AlphaBeta& link, record::Table& links, record::Table& fits);

// This rank's calibration in `dtype` (float32 or float64), measured on every rank at once; the
// rows of every rank are appended to `table` on rank 0. With --resume, the interrupted run's
// rows of that type are taken back instead, so rows kept and rows measured now share them.
theory::Calibration measure_calibration(Session& session, DataType dtype, record::Table& table);
// One rank's calibration of `dtype` read back from the rows of /bench/calibrate.
theory::Calibration calibration_of_rank(const record::Table& table, const std::string& dtype, int rank);

}  // namespace parity::cli
