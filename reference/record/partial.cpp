// The partial result file (partial.hpp).
#include "reference/record/partial.hpp"

#include <system_error>

#include "reference/core/error.hpp"
#include "reference/record/h5.hpp"
#include "reference/record/journal.hpp"
#include "reference/record/output.hpp"

namespace parity::record {

PartialSummary write_partial(const std::filesystem::path& journal, const std::filesystem::path& result,
                             const std::string& reason) {
  JournalReading reading = read_journal(journal);
  Contents& contents = reading.contents;
  std::error_code ec;
  if (contents.tables() == 0) {  // nothing finished: no file
    std::filesystem::remove(journal, ec);
    return {};
  }
  contents.set_attribute("/", "complete", std::int64_t{0});
  contents.set_attribute("/", "incomplete_reason", reason);
  if (reading.ignored_bytes > 0)
    contents.set_attribute("/", "journal_ignored_bytes", static_cast<std::int64_t>(reading.ignored_bytes));
  // A file HDF5 fails to close (a full disk) stays open in the library until exit, and its
  // clean-up then may crash: check the room first (a file is smaller than its journal).
  std::uintmax_t journal_bytes = std::filesystem::file_size(journal, ec);
  const double free_bytes = free_bytes_on(directory_of(result));
  if (!ec && free_bytes >= 0 && free_bytes < static_cast<double>(journal_bytes) + 1048576.0)
    throw Error("only " + mib_text(free_bytes) + " free on " + directory_of(result).string() +
                " (ENOSPC); what finished stays in " + journal.string() + ": free some space and continue with --resume " +
                journal.string());
  h5::Writer file(temporary_of(result));  // removed again unless committed
  for (const auto& group : contents.groups) {
    if (group.table) file.write_table(group.path, *group.table);
    for (const auto& [name, value] : group.attributes) file.set_attribute(group.path, name, value);
  }
  file.commit_as(result, true);
  std::filesystem::remove(journal, ec);
  return {contents.tables(), contents.rows()};
}

}  // namespace parity::record
