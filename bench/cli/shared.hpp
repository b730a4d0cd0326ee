// Small helpers the subcommands share: comma-separated option lists (of names and numbers), percentiles of timings,
// and one value from every rank.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "reference/comm/communicator.hpp"
#include "reference/core/error.hpp"

namespace parity::cli {

// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> split_list(const std::string& text);
// The index of the first value equal to an earlier one, or -1.
template <typename T> std::ptrdiff_t first_repeat(const std::vector<T>& values) {
  for (std::size_t i = 0; i < values.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (values[j] == values[i]) return static_cast<std::ptrdiff_t>(i);
  return -1;
}
// split_list of an option's list of names, each run and recorded once: UsageError naming `option`
// for a name given twice ("--models names tiny twice"), which would run the same rows again, or an
// empty name ("tiny,,small", "tiny,").
std::vector<std::string> split_names(const std::string& text, const std::string& option);
// The same for values parsed from such a list, however spelt ("float32,f32", "all,sum"): each
// named by name_of.
template <typename T> void refuse_repeats(const std::vector<T>& values, const std::string& option) {
  if (const std::ptrdiff_t i = first_repeat(values); i >= 0)
    throw UsageError(option + " names " + std::string(name_of(values[static_cast<std::size_t>(i)])) +
                     " twice (a name given twice, or again by all)");
}
// "1,2,4" -> {1, 2, 4}: UsageError naming `option` for an entry that is not a whole number of at
// least `least`, a number given twice, or a text with commas only.
std::vector<int> parse_whole_numbers(const std::string& text, const std::string& option, int least = 1);
// "0.5,1,inf" -> numbers (inf allowed): UsageError naming `option` for an entry that is not a
// number, or a text with commas only.
std::vector<double> parse_numbers(const std::string& text, const std::string& option);
// Linear interpolation between order statistics; q = 0.5 is the median. NaN when empty.
double percentile(std::vector<double> values, double q);
// Wall-clock seconds since t0 (a steady clock: the benchmarks' timer).
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
// Every rank's `value`, indexed by rank (an all-gather; every rank must call it).
std::vector<double> gather_from_ranks(Communicator& world, double value);
// One timed step on one rank: its seconds and the parts of it a benchmark times (the exchanges,
// the exposed communication, ...). Parts is fixed at compile time, so every rank gathers as many.
template <std::size_t Parts> struct StepTiming {
  double seconds = 0;
  std::array<double, Parts> parts{};
};
// The median of a rank's timed steps taken whole (the mean of the middle two for an even count,
// as percentile's median): its parts are those same steps', so they add up as they did inside
// them. Each part's own median need not: two steps with long exchanges can outweigh the step
// whose time is the median. NaN everywhere when there is no step.
template <std::size_t Parts> StepTiming<Parts> median_step(std::vector<StepTiming<Parts>> steps) {
  StepTiming<Parts> out;
  if (steps.empty()) {
    out.seconds = std::nan("");
    out.parts.fill(std::nan(""));
    return out;
  }
  std::stable_sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.seconds < b.seconds; });
  const StepTiming<Parts>&low = steps[(steps.size() - 1) / 2], &high = steps[steps.size() / 2];
  out.seconds = (low.seconds + high.seconds) / 2;
  for (std::size_t i = 0; i < Parts; ++i) out.parts[i] = (low.parts[i] + high.parts[i]) / 2;
  return out;
}
// Of the first n rows of `width` values each, one after another in `rows`, the index of the one
// whose first value is largest; a NaN there counts as largest (a time not measured shows).
std::size_t slowest_row(const std::vector<double>& rows, std::size_t width, std::size_t n);
// Of every rank's `row`, the one whose first value is largest among the first `ranks` ranks (0:
// all), on every rank (an all-gather; every rank must call it with a row as long).
std::vector<double> row_of_slowest_rank(Communicator& world, std::vector<double> row, int ranks);
// The median step (median_step) of the rank whose median step is slowest, which sets the job's
// step, with that rank's parts; only the first `ranks` ranks (0: all) are in the run.
template <std::size_t Parts> StepTiming<Parts> slowest_rank_step(Communicator& world, const StepTiming<Parts>& mine, int ranks = 0) {
  std::vector<double> row{mine.seconds};
  row.insert(row.end(), mine.parts.begin(), mine.parts.end());
  const std::vector<double> slowest = row_of_slowest_rank(world, row, ranks);
  StepTiming<Parts> out;
  out.seconds = slowest[0];
  std::copy(slowest.begin() + 1, slowest.end(), out.parts.begin());
  return out;
}
// Waits for the GPU's queued work when `space` is CUDA memory (a no-op on the host), so that a
// host clock read after it times the work itself.
void wait_for_device(MemorySpace space);
// The status of a path given to `option` (not_found where nothing is there); UsageError naming
// the option and the path, cut, where the file system refuses the name itself (too long, a file
// where a directory should be, no permission to look).
std::filesystem::file_status user_path_status(const std::string& option, const std::string& path);
// The path itself where it exists, else its nearest folder that does (absolute): what decides
// where a file or folder to be made under it would go.
std::filesystem::path nearest_existing(const std::string& path);
// Refuses (UsageError naming `option`) a directory, or one to be made, on one of the kernel's
// views (/proc, /sys and the like), where no file can be made.
void refuse_kernel_view(const std::string& option, const std::string& directory);
// Whether two names resolve to one path (a name that does not resolve matches nothing).
bool same_path(const std::filesystem::path& a, const std::filesystem::path& b);
// Refuses (UsageError) `path`, given to the output option `option`, where it is one of `others`
// (option, path: the files the command reads, or writes otherwise), by name or as one file
// (a hard link): "--out 'hf' is the file --hostfile reads; choose another --out". Empty paths
// match nothing.
void refuse_output_onto(const std::string& option, const std::string& path,
                        const std::vector<std::pair<std::string, std::string>>& others, const char* verb = "reads");
// A benchmark's memory estimate, computed in double so that no size given on the command line
// can wrap it: the bytes, or the largest std::size_t where they are past it (or not a number),
// which the memory check then refuses.
std::size_t estimated_bytes(double bytes);
// Ranks [0, n) of the world as a communicator; null on the others (who still take part in
// the split, a collective over the world).
std::unique_ptr<Communicator> first_ranks(Communicator& world, int n);

}  // namespace parity::cli
