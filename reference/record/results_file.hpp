// Results files: one self-describing HDF5 file per run (schema in docs/results-schema.md).
// Rank 0 writes; the file appears under its final name only when complete (written under a
// temporary name, then renamed: output.hpp), so an interrupted run never leaves a torn file.
// Everything written is also appended to a journal beside it (journal.hpp), from which
// write_partial() (partial.hpp) makes a valid file marked incomplete when the run is cut short.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "reference/record/reading.hpp"  // and the reading of result files, for their users
#include "reference/record/table.hpp"

namespace parity::record {

class Journal;
namespace h5 {
class Writer;
}

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
  // Writes a table made from a schema at its schema's group; throws for a free table.
  void write_table(const Table& table);
  // Journals rows [first, table.rows()) of a table still being built at `group`; the table is
  // written whole later by write_table. A run cut short keeps them (write_partial).
  void append_rows(const std::string& group, const Table& table, std::size_t first);
  // Rows of several tables journaled together (Journal::rows), with the carried rows each part
  // took back: kept all or none.
  void append_rows(const std::vector<RowsOf>& parts);
  // --resume: journals the resumed file's table at `group` (Journal::carried); the rows taken
  // back from it are journaled with the rows they became (RowsOf::taken).
  void carry_rows(const std::string& group, const Table& table);
  // Closes the file (root attribute complete = 1) and renames it to the final path. Refuses an
  // existing path unless force. Removes the journal.
  void commit();
  // Instead of commit(): removes the temporary file and closes the journal, leaving it for
  // write_partial().
  void abandon();
  const std::filesystem::path& path() const { return path_; }

 private:
  void require_open() const;
  std::filesystem::path path_;
  bool force_;
  std::unique_ptr<h5::Writer> file_;
  std::unique_ptr<Journal> journal_;
};

}  // namespace parity::record
