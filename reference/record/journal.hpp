// The journal of a result file: every attribute, table and finished row is appended to
// `<result>.journal` as the run makes it, with one write(2) per record. A run cut short (a
// signal, a dead rank, a stall) therefore still has everything it finished on disk, and
// write_partial() turns that into a valid result file marked incomplete; --resume reads it
// back. A record torn by the process dying mid-write fails its checksum and ends the reading.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reference/record/table.hpp"

namespace parity::record {

// What a result file holds: groups in the order first named, each with its attributes and at
// most one table.
struct Contents {
  struct Group {
    std::string path;
    std::vector<std::pair<std::string, Attribute>> attributes;  // a name set again keeps its place
    std::optional<Table> table;
    bool complete = false;  // the table was written whole, not only row by row
  };
  std::vector<Group> groups;

  Group& group(const std::string& path);              // created when missing
  const Group* find(const std::string& path) const;   // null when missing
  void set_attribute(const std::string& group, const std::string& name, const Attribute& value);
  const Attribute* attribute(const std::string& group, const std::string& name) const;
  std::size_t tables() const;
  std::size_t rows() const;
};

class Journal {
 public:
  // Creates (or empties) the journal file.
  explicit Journal(std::filesystem::path path);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  void attribute(const std::string& group, const std::string& name, const Attribute& value);
  // Rows [first, table.rows()) of the table being built at `group`.
  void rows(const std::string& group, const Table& table, std::size_t first);
  // Rows of several tables in one record, read back all or none: a row and the rows that
  // belong to it (a benchmark point and its per-rank times) are never kept apart, nor rows and
  // the carried rows they took back.
  void rows(const std::vector<RowsOf>& parts);
  // The whole table (replaces the rows recorded for `group` so far).
  void table(const std::string& group, const Table& table);
  // --resume: the rows of the resumed file; a part's `taken` (RowsOf) says which of them its
  // rows took back. Read back, rows not yet taken follow the rows recorded, so a resumed run cut
  // short keeps every row it started with, once.
  void carried(const std::string& group, const Table& table);
  const std::filesystem::path& path() const { return path_; }
  // Closes and deletes the journal.
  void remove();

 private:
  void append(const std::string& payload);
  std::filesystem::path path_;
  int fd_ = -1;
};

struct JournalReading {
  Contents contents;
  std::size_t records = 0;
  std::size_t ignored_bytes = 0;  // a torn or damaged tail, left out
  // Where a whole record failed its check (damage, not a write cut short: a torn record is a
  // prefix of one, shorter than its length says, and the last), or where a length that says more
  // than the file holds is followed by whole records (the length damaged); or nullopt.
  std::optional<std::size_t> damaged_at;
};
// Throws UsageError when the file cannot be read or is not a journal.
JournalReading read_journal(const std::filesystem::path& path);
// Whether the file at `path` begins as a journal does, or is empty (a journal whose run was
// killed before it wrote anything); false when it cannot be read.
bool is_journal(const std::filesystem::path& path);

}  // namespace parity::record
