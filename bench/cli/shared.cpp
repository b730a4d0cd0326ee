// Helpers shared by the subcommands (see shared.hpp).
#include "bench/cli/shared.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace parity::cli {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const double position = q * static_cast<double>(values.size() - 1);
  const auto low = static_cast<std::size_t>(std::floor(position));
  const auto high = std::min(low + 1, values.size() - 1);
  return values[low] + (values[high] - values[low]) * (position - static_cast<double>(low));
}

std::vector<double> gather_from_ranks(Communicator& world, double value) {
  std::vector<double> all(static_cast<std::size_t>(world.size()));
  world.all_gather({&value, 1, DataType::float64, MemorySpace::host},
                   {all.data(), all.size(), DataType::float64, MemorySpace::host});
  return all;
}

std::unique_ptr<Communicator> first_ranks(Communicator& world, int n) {
  auto group = world.split(world.rank() < n ? 0 : 1, world.rank());
  if (world.rank() >= n) group.reset();
  return group;
}

}  // namespace parity::cli
