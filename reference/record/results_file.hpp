// Results files: one self-describing HDF5 file per run (schema in docs/results-schema.md).
// Rank 0 writes; the file appears under its final name only when complete (write to a
// temporary sibling, then rename), so an interrupted run never leaves a torn file. Everything
// written is also appended to a journal beside it (journal.hpp), from which write_partial()
// makes a valid file marked incomplete when the run is cut short.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace parity::record {

inline constexpr const char* kSchemaName = "parity-results";
inline constexpr std::int64_t kSchemaVersion = 1;

// One column of a table: a name, a unit and values of one type.
struct Column {
  std::string name;
  std::string unit;
  std::variant<std::vector<double>, std::vector<std::int64_t>, std::vector<std::string>> values;
  std::size_t size() const;
};

// A column-oriented table; columns keep the order in which they were first named.
class Table {
 public:
  explicit Table(std::string description = "") : description_(std::move(description)) {}
  // Returns the column's values, creating the column on first use. Asking for an existing
  // column with another type throws.
  std::vector<double>& f64(const std::string& name, const std::string& unit = "");
  std::vector<std::int64_t>& i64(const std::string& name, const std::string& unit = "");
  std::vector<std::string>& str(const std::string& name);
  // An existing column's values; throws Error when it is missing or of another type.
  const std::vector<double>& get_f64(const std::string& name) const;
  const std::vector<std::int64_t>& get_i64(const std::string& name) const;
  const std::vector<std::string>& get_str(const std::string& name) const;
  const std::vector<Column>& columns() const { return columns_; }
  const std::string& description() const { return description_; }
  // Number of rows; throws when the columns have different lengths.
  std::size_t rows() const;

 private:
  Column& column(const std::string& name, const std::string& unit, std::size_t type_index);
  std::string description_;
  std::vector<Column> columns_;
};

using Attribute = std::variant<std::string, double, std::int64_t, std::vector<std::string>,
                               std::vector<double>, std::vector<std::int64_t>>;

// Refuses, with a one-line UsageError, an output path that exists (unless force), whose
// directory does not exist or cannot be written. Called before any work starts.
void check_output_path(const std::filesystem::path& path, bool force);

// Refuses (UsageError) an output whose file system has less than `bytes` free.
void check_free_space(const std::filesystem::path& path, std::uint64_t bytes);

// Removes the temporary file a ResultsFile is writing, and the lock file this process holds,
// if any. Async-signal-safe: for signal handlers and the paths that end the process without
// unwinding (MPI_Abort).
void discard_temporary_file() noexcept;

// An exclusive lock on `<result>.lock` beside a result file, for the life of the object: a
// second run writing the same --out refuses at start instead of after its whole run. flock(2)
// is released by the kernel on every exit, SIGKILL included; the lock file is removed on the
// ordinary ones (and by discard_temporary_file()).
class OutputLock {
 public:
  // Throws UsageError naming the holder's pid when another process holds the lock.
  explicit OutputLock(const std::filesystem::path& result);
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;
  // The environment variable by which a parent that holds the lock tells its ranks so.
  static constexpr const char* kHeldVariable = "PARITY_OUTPUT_LOCK_HELD";

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// Removes `<result>.partial-*`, temporary files of processes killed outright (SIGKILL). Only
// for the holder of the result's OutputLock, which no other run can be writing.
void remove_stale_temporaries(const std::filesystem::path& result);

class Journal;

// `<result>.journal`: what a run has finished so far, while it runs.
std::filesystem::path journal_path(const std::filesystem::path& result);

struct PartialSummary {
  std::size_t tables = 0;
  std::size_t rows = 0;
};
// Makes `result` (replacing it) from the journal of a run that was cut short: every table and
// attribute in it, tables being built with the rows finished so far, and root attributes
// complete = 0 and incomplete_reason = `reason`. Removes the journal once the file is in place.
// A journal without any table (nothing finished) gives no file: the summary says 0 tables.
PartialSummary write_partial(const std::filesystem::path& journal, const std::filesystem::path& result,
                             const std::string& reason);

class ResultsFile {
 public:
  // Creates the temporary sibling of `path` and the journal. The final file appears only in
  // commit(). Refuses (UsageError) a journal left by an interrupted run unless force.
  ResultsFile(std::filesystem::path path, bool force);
  ~ResultsFile();  // without commit(): closes and deletes the temporary file and the journal
  ResultsFile(const ResultsFile&) = delete;
  ResultsFile& operator=(const ResultsFile&) = delete;

  // Attributes on a group (created with its parents when missing); "/" is the root.
  void set_attribute(const std::string& group, const std::string& name, const Attribute& value);
  // Writes a table as a group of column datasets at `group` (e.g. "/bench/collectives").
  void write_table(const std::string& group, const Table& table);
  // Journals rows [first, table.rows()) of a table still being built at `group`; the table is
  // written whole later by write_table. A run cut short keeps them (write_partial).
  void append_rows(const std::string& group, const Table& table, std::size_t first);
  // --resume: journals the resumed file's table at `group`, then which of its rows were taken
  // (Journal::carried, Journal::taken).
  void carry_rows(const std::string& group, const Table& table);
  void take_row(const std::string& group, std::size_t row);
  // Closes the file (root attribute complete = 1) and renames it to the final path. Refuses an
  // existing path unless force. Removes the journal.
  void commit();
  // Instead of commit(): removes the temporary file and closes the journal, leaving it for
  // write_partial().
  void abandon();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::filesystem::path temporary_;
  bool force_;
  std::int64_t file_ = -1;  // hid_t
  std::unique_ptr<Journal> journal_;
};

// What `parity report` needs to know before handing a file to the report scripts.
struct FileInfo {
  std::int64_t schema_version = 0;
  std::string subcommand;
  std::int64_t world_size = 0;  // 0 when not recorded
  std::string device;
  std::string half_accumulate;
  bool complete = true;         // false for a partial file (root attribute complete = 0)
  std::string incomplete_reason;
};
// Opens a file read-only and checks it is a parity result file of a known schema version.
// Throws UsageError with one clear line for a missing, corrupt, foreign or too-new file.
FileInfo inspect(const std::filesystem::path& path);

// Reads one table back (used by tests and by subcommands that compare runs).
Table read_table(const std::filesystem::path& path, const std::string& group);
// Whether `group` of the file is a table.
bool has_table(const std::filesystem::path& path, const std::string& group);

}  // namespace parity::record
