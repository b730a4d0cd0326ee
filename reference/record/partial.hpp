// The partial result file of a run cut short, made from its journal (journal.hpp) by whoever
// outlives the run: every table and attribute finished, tables being built with the rows
// finished so far, and root attributes complete = 0 and incomplete_reason.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

namespace parity::record {

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

}  // namespace parity::record
