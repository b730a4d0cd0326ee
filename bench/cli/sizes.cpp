// Size parsing and sweeps.
#include "bench/cli/sizes.hpp"

#include <cctype>
#include <cmath>
#include <stdexcept>

#include "reference/core/error.hpp"
#include "reference/core/text.hpp"

namespace parity::cli {

std::size_t parse_size(const std::string& text, const std::string& option) {
  auto bad = [&] {
    return UsageError("malformed size " + quoted_input(text) + " for " + option + " (expected bytes such as 8, 4K, 64M or 1G)");
  };
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) throw bad();
  std::size_t pos = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(text, &pos);
  } catch (const std::out_of_range&) {
    throw UsageError("size " + quoted_input(text) + " for " + option + " is too large (at most 2^64 - 1 bytes)");
  } catch (...) {
    throw bad();
  }
  std::string suffix = text.substr(pos);
  if (suffix.size() > 1 && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  unsigned shift = 0;
  if (suffix.empty() || suffix == "B" || suffix == "b") shift = 0;
  else if (suffix == "K" || suffix == "k") shift = 10;
  else if (suffix == "M" || suffix == "m") shift = 20;
  else if (suffix == "G" || suffix == "g") shift = 30;
  else if (suffix == "T" || suffix == "t") shift = 40;
  else throw bad();
  if (shift && value > (~0ULL >> shift)) throw UsageError("size " + quoted_input(text) + " for " + option + " is too large");
  return static_cast<std::size_t>(value << shift);
}

std::string format_size(std::size_t bytes) {
  const char* units[] = {"", "K", "M", "G", "T"};
  int unit = 0;
  while (unit < 4 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + units[unit];
}

std::vector<std::size_t> SizeSweep::sizes() const {
  if (max_bytes < min_bytes)
    throw UsageError("inverted size range: -e " + format_size(max_bytes) + " is below -b " + format_size(min_bytes));
  if (step_factor <= 1 && step_bytes == 0) throw UsageError("-i 0 with -f 1 would never reach -e");
  if (!(step_factor >= 1) || !std::isfinite(step_factor))
    throw UsageError("-f " + printable_line(std::to_string(step_factor)) + ": must be a finite number of at least 1");
  std::vector<std::size_t> out;
  for (std::size_t size = min_bytes; size <= max_bytes;) {
    if (out.size() == kMostSizes)
      throw UsageError("-b " + format_size(min_bytes) + " to -e " + format_size(max_bytes) + " by " +
                       (step_factor > 1 ? "-f " + printable_line(std::to_string(step_factor))
                                        : "-i " + format_size(step_bytes)) +
                       " is more than " + std::to_string(kMostSizes) + " sizes: raise -i or -f, or narrow -b to -e");
    out.push_back(size);
    // Past -e (or past what a size can hold): the sweep ends.
    const double grown = step_factor > 1 ? std::ceil(static_cast<double>(size) * step_factor)
                                         : static_cast<double>(size) + static_cast<double>(step_bytes);
    if (grown > static_cast<double>(max_bytes) || (step_factor <= 1 && step_bytes > max_bytes - size)) break;
    std::size_t next = step_factor > 1 ? static_cast<std::size_t>(grown) : size + step_bytes;
    if (next <= size) next = size + 1;  // -b 0 with -f: 0 * f stays 0
    size = next;
  }
  return out;
}

}  // namespace parity::cli
