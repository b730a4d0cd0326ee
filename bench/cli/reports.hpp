// The report scripts (reports/, Python with matplotlib and h5py), started from the command line:
// `parity report` and the report `parity run` draws.
#pragma once

#include <string>
#include <vector>

namespace parity::cli {

// Checks the result files (record::inspect) and draws the report of one, or the comparison of
// two, into out_dir (default: <first file without .h5>.report); refuses to overwrite a report
// unless force; figures false leaves the figures out (--no-figures). Returns the scripts' exit
// status.
// dir_option: the option that named out_dir, for a refusal of it.
int draw_report(const std::vector<std::string>& files, std::string out_dir, bool force, bool quiet, bool figures = true,
                const std::string& dir_option = "--out");

// Refuses (UsageError, naming `option`) a report directory that cannot be one: a name the file
// system refuses (a loop of links, too long), an existing file, one of the result files it
// draws, or a place no folder can be made (/proc, an unwritable folder). Before any work.
void check_report_dir(const std::string& dir, const std::vector<std::string>& files, const std::string& option);

}  // namespace parity::cli
