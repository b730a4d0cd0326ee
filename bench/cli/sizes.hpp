// Message sizes as nccl-tests takes them: "8", "1K", "64M", "1G" (K, M, G = 2^10, 2^20, 2^30),
// swept from -b to -e either by adding -i bytes or, when -f is above 1, by multiplying by -f.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace parity::cli {

std::size_t parse_size(const std::string& text, const std::string& option);
std::string format_size(std::size_t bytes);  // "64M", "1K", "12"

struct SizeSweep {
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{64} << 20;
  std::size_t step_bytes = std::size_t{1} << 20;
  double step_factor = 2;
  // The sizes, each rounded down to a whole number of elements; refuses inverted ranges and
  // sweeps of more than kMostSizes sizes (-b 1 -e 1G -i 1 would be a billion, 8 GB of list).
  std::vector<std::size_t> sizes() const;
  static constexpr std::size_t kMostSizes = 10000;
};

}  // namespace parity::cli
