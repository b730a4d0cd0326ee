// A result file being written: its HDF5 file under a temporary name (h5.hpp) and its journal
// (journal.hpp), written together.
#include "reference/record/results_file.hpp"

#include <system_error>
#include <utility>

#include "reference/core/error.hpp"
#include "reference/record/h5.hpp"
#include "reference/record/journal.hpp"
#include "reference/record/output.hpp"

namespace parity::record {

ResultsFile::ResultsFile(std::filesystem::path path, bool force) : path_(std::move(path)), force_(force) {
  check_output_path(path_, force_);
  const std::filesystem::path journal = journal_path(path_);
  // --force starts afresh over an interrupted run's journal, never over a file of another kind.
  if (std::filesystem::exists(journal) && !is_journal(journal))
    throw UsageError(journal.string() + " is in the place of " + path_.string() +
                     "'s journal but is not a parity journal; move it away or choose another --out");
  // An empty one holds nothing finished: nothing to keep.
  std::error_code ec;
  if (std::filesystem::exists(journal) && std::filesystem::file_size(journal, ec) == 0 && !ec)
    std::filesystem::remove(journal, ec);
  if (!force_ && std::filesystem::exists(journal))
    throw UsageError(journal.string() + " holds what an interrupted run finished; continue it with --resume " +
                     path_.string() + ", or pass --force to start afresh");
  file_ = std::make_unique<h5::Writer>(temporary_of(path_));
  journal_ = std::make_unique<Journal>(journal);  // on failure the writer removes its file
}

ResultsFile::~ResultsFile() {
  file_.reset();
  if (journal_) journal_->remove();
}

void ResultsFile::require_open() const {
  if (!file_ || !journal_) throw Error("results file " + path_.string() + " is already committed");
}

void ResultsFile::set_attribute(const std::string& group, const std::string& name, const Attribute& value) {
  require_open();
  file_->set_attribute(group, name, value);
  journal_->attribute(group, name, value);
}

void ResultsFile::write_table(const std::string& group, const Table& table) {
  require_open();
  if (table.spec() != nullptr && table.spec()->group != group)
    throw Error("a table of " + table.spec()->group + " written to " + group);
  file_->write_table(group, table);
  journal_->table(group, table);
}

void ResultsFile::write_table(const Table& table) {
  if (table.spec() == nullptr) throw Error("a table of free columns (" + table.description() + ") has no group of its own");
  write_table(table.spec()->group, table);
}

void ResultsFile::append_rows(const std::string& group, const Table& table, std::size_t first) {
  require_open();
  journal_->rows(group, table, first);
}

void ResultsFile::append_rows(const std::vector<RowsOf>& parts) {
  require_open();
  journal_->rows(parts);
}

void ResultsFile::carry_rows(const std::string& group, const Table& table) {
  require_open();
  journal_->carried(group, table);
}

void ResultsFile::commit() {
  require_open();
  set_attribute("/", "complete", std::int64_t{1});
  file_->commit_as(path_, force_);
  file_.reset();
  journal_->remove();
  journal_.reset();
}

void ResultsFile::abandon() {
  require_open();
  file_.reset();     // the temporary file removed
  journal_.reset();  // closed, and left for write_partial
}

}  // namespace parity::record
