// Helpers shared by the subcommands (see shared.hpp).
#include "bench/cli/shared.hpp"

#include <algorithm>
#include <string>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "reference/core/error.hpp"
#include "reference/core/text.hpp"
#include "reference/cuda/device.hpp"
#include "reference/record/output.hpp"

namespace parity::cli {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<std::string> split_names(const std::string& text, const std::string& option) {
  std::vector<std::string> out = split_list(text);
  // An empty name between commas is a slip (a name left out), not a list's separator.
  if (!text.empty() && (text.front() == ',' || text.back() == ',' || text.find(",,") != std::string::npos))
    throw UsageError(option + " " + quoted_input(text) + " has an empty name (a comma at an end, or two together)");
  if (const std::ptrdiff_t i = first_repeat(out); i >= 0)
    throw UsageError(option + " names " + printable_line(out[static_cast<std::size_t>(i)], 48) + " twice");
  return out;
}

std::filesystem::file_status user_path_status(const std::string& option, const std::string& path) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (error && error != std::errc::no_such_file_or_directory)
    throw UsageError(option + " " + quoted_input(path) + ": " + error.message());
  return status;
}

std::filesystem::path nearest_existing(const std::string& path) {
  std::error_code error;
  std::filesystem::path existing = std::filesystem::absolute(path, error);
  while (!std::filesystem::exists(existing, error) && existing.has_parent_path() && existing != existing.parent_path())
    existing = existing.parent_path();
  return existing;
}

void refuse_kernel_view(const std::string& option, const std::string& directory) {
  if (record::is_kernel_view(nearest_existing(directory)))
    throw UsageError(option + " " + quoted_input(directory, 200) +
                     " is on a file system that keeps no files (such as /proc); choose another " + option);
}

std::size_t estimated_bytes(double bytes) {
  constexpr double kPast = 18446744073709551616.0;  // 2^64: past every std::size_t
  if (!(bytes < kPast)) return static_cast<std::size_t>(-1);
  return bytes > 0 ? static_cast<std::size_t>(bytes) : 0;
}

bool same_path(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::error_code a_error, b_error;
  const std::filesystem::path resolved = std::filesystem::weakly_canonical(a, a_error);
  return !a_error && resolved == std::filesystem::weakly_canonical(b, b_error) && !b_error;
}

void refuse_output_onto(const std::string& option, const std::string& path,
                        const std::vector<std::pair<std::string, std::string>>& others, const char* verb) {
  if (path.empty()) return;
  for (const auto& [other, file] : others) {
    std::error_code error;
    if (!file.empty() && (same_path(path, file) || std::filesystem::equivalent(path, file, error)))
      throw UsageError(option + " " + quoted_input(path, 200) + " is the file " + other + " " + verb + "; choose another " +
                       option);
  }
}

std::vector<int> parse_whole_numbers(const std::string& text, const std::string& option, int least) {
  std::vector<int> out;
  for (const std::string& s : split_list(text)) {
    // Decimal, a leading zero read as such (010 is ten), as the single number options read it.
    const std::string digits = without_leading_zeros(s);
    int n = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (error == std::errc::result_out_of_range)
      throw UsageError(option + ": " + quoted_input(s) + " is too large (at most " + std::to_string(INT_MAX) + ")");
    if (error != std::errc() || end != digits.data() + digits.size() || std::to_string(n) != digits || n < least)
      throw UsageError(option + ": " + quoted_input(s) + " is not a " +
                       (least == 1 ? std::string("positive whole number")
                                   : "whole number of at least " + std::to_string(least)));
    if (std::find(out.begin(), out.end(), n) != out.end()) throw UsageError(option + " names " + s + " twice");
    out.push_back(n);
  }
  if (out.empty() && !text.empty()) throw UsageError(option + " names no number");
  return out;
}

std::vector<double> parse_numbers(const std::string& text, const std::string& option) {
  std::vector<double> out;
  for (const std::string& s : split_list(text)) {
    char* end = nullptr;
    const double x = std::strtod(s.c_str(), &end);
    if (!plain_decimal(s, true, true) || *end != '\0' || std::isnan(x))
      throw UsageError(option + ": " + quoted_input(s) + " is not a number in decimal");
    out.push_back(x);
  }
  if (out.empty() && !text.empty()) throw UsageError(option + " names no number");
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

std::size_t slowest_row(const std::vector<double>& rows, std::size_t width, std::size_t n) {
  std::size_t slowest = 0;
  for (std::size_t r = 1; r < n && r * width < rows.size(); ++r) {
    const double best = rows[slowest * width], x = rows[r * width];
    if (!std::isnan(best) && (std::isnan(x) || x > best)) slowest = r;
  }
  return slowest;
}

std::vector<double> row_of_slowest_rank(Communicator& world, std::vector<double> row, int ranks) {
  const std::size_t width = row.size();
  std::vector<double> all(width * static_cast<std::size_t>(world.size()));
  world.all_gather({row.data(), width, DataType::float64, MemorySpace::host},
                   {all.data(), all.size(), DataType::float64, MemorySpace::host});
  const std::size_t n = static_cast<std::size_t>(ranks > 0 ? std::min(ranks, world.size()) : world.size());
  const std::size_t slowest = slowest_row(all, width, n);
  return {all.begin() + static_cast<std::ptrdiff_t>(slowest * width),
          all.begin() + static_cast<std::ptrdiff_t>((slowest + 1) * width)};
}

std::unique_ptr<Communicator> first_ranks(Communicator& world, int n) {
  auto group = world.split(world.rank() < n ? 0 : 1, world.rank());
  if (world.rank() >= n) group.reset();
  return group;
}

void wait_for_device(MemorySpace space) {
  if (space == MemorySpace::cuda) cuda::synchronize();
}

}  // namespace parity::cli
