// Small helpers the subcommands share: comma-separated option lists, percentiles of timings,
// and one value from every rank.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "reference/comm/communicator.hpp"

namespace parity::cli {

// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> split_list(const std::string& text);
// Linear interpolation between order statistics; q = 0.5 is the median. NaN when empty.
double percentile(std::vector<double> values, double q);
// Every rank's `value`, indexed by rank (an all-gather; every rank must call it).
std::vector<double> gather_from_ranks(Communicator& world, double value);
// Ranks [0, n) of the world as a communicator; null on the others (who still take part in
// the split, a collective over the world).
std::unique_ptr<Communicator> first_ranks(Communicator& world, int n);

}  // namespace parity::cli
