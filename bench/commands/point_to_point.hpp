// The ping-pong between ranks 0 and 1 (half round-trip times from 8 B up) and the alpha-beta
// model fitted to it: the link several benchmarks set their predictions beside
// (/bench/point_to_point). Job::point_to_point (command.hpp) measures it once per job.
#pragma once

#include <cstddef>

#include "bench/cli/session.hpp"
#include "reference/theory/collectives.hpp"
#include "reference/record/table.hpp"

namespace parity::cli {

// The result groups it writes (docs/results-schema.md).
inline const record::TableSpec kPointToPointTable{"/bench/point_to_point",
    "ping-pong between rank 0 and rank 1: half round-trip time",
    {{"size_bytes", ColumnType::int64, "B"}, {"time_us", ColumnType::float64, "us"}}};

struct PointToPoint {
  record::Table table{kPointToPointTable};
  theory::AlphaBeta model;
  bool measured = false;
};
// Measures (or, with --resume, takes from the resumed file) the ping-pong up to max_bytes
// (at most 64 MiB); nothing at one rank.
PointToPoint measure_point_to_point(Session& session, std::size_t max_bytes);
// The same ping-pong between rank 0 and `peer` (every rank calls it; the two exchange) from 8 B
// to max_bytes by 4x, fitted; every rank gets the fit. Not recorded.
theory::AlphaBeta measure_ping_pong(Session& session, int peer, std::size_t max_bytes);
// Writes /bench/point_to_point with its alpha and beta (rank 0; nothing at one rank).
void record_point_to_point(Session& session, const PointToPoint& p2p);

}  // namespace parity::cli
