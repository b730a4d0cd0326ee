// The ping-pong between ranks 0 and 1 (half round-trip times from 8 B up) and the alpha-beta
// model fitted to it: the link several benchmarks set their predictions beside
// (/bench/point_to_point). Job::point_to_point (command.hpp) measures it once per job.
#pragma once

#include <cstddef>

#include "bench/cli/session.hpp"
#include "reference/theory/collectives.hpp"

namespace parity::cli {

struct PointToPoint {
  record::Table table{"ping-pong between rank 0 and rank 1: half round-trip time"};
  theory::AlphaBeta model;
  bool measured = false;
};
// Measures (or, with --resume, takes from the resumed file) the ping-pong up to max_bytes
// (at most 64 MiB); nothing at one rank.
PointToPoint measure_point_to_point(Session& session, std::size_t max_bytes);
// Writes /bench/point_to_point with its alpha and beta (rank 0; nothing at one rank).
void record_point_to_point(Session& session, const PointToPoint& p2p);

}  // namespace parity::cli
