// Reading result files back: what `parity report` checks before drawing, and the tables --resume
// and the tests read. Implemented with the HDF5 writer (h5.cpp), which shares its helpers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "reference/record/table.hpp"

namespace parity::record {

inline constexpr const char* kSchemaName = "parity-results";
inline constexpr std::int64_t kSchemaVersion = 1;

// What `parity report` needs to know before handing a file to the report scripts.
struct FileInfo {
  std::int64_t schema_version = 0;
  std::string subcommand;
  std::int64_t world_size = 0;  // 0 when not recorded
  std::string device;
  std::string half_accumulate;
  bool complete = true;         // false for a partial file (root attribute complete = 0)
  std::string incomplete_reason;
  std::string options;  // root attribute "options": "--name=value" lines ("" when absent)
};
// Opens a file read-only and checks it is a parity result file of a known schema version.
// Throws UsageError with one clear line for a missing, corrupt, foreign or too-new file.
FileInfo inspect(const std::filesystem::path& path);

// Reads one table back (used by tests and by subcommands that compare runs).
Table read_table(const std::filesystem::path& path, const std::string& group);
// Whether `group` of the file is a table.
bool has_table(const std::filesystem::path& path, const std::string& group);

}  // namespace parity::record
