// parity report: the HTML report of one result file, or the comparison of two, drawn by the
// report scripts (reports/).
#include "bench/cli/reports.hpp"
#include "bench/commands/command.hpp"

namespace parity::cli {
namespace {

class Report final : public Command {
 public:
  Report()
      : Command({.name = "report",
                 .help = "Draw an HTML report with plots from one result file, or compare two",
                 .order = 140,
                 .ranks = false}) {}

  void declare(CommandOptions& o) override {
    o.add("files", files_, "One result file, or two to compare").required().at_most(2).existing_file();
    o.add("--out", out_, "Report directory: a new one (made in a folder that exists), an empty one, or one holding an "
                         "earlier report (--force replaces it) [default: <first file without .h5>.report]")
        .path();
    o.flag("--force", force_, "Overwrite an existing report");
    o.flag("-q,--quiet", quiet_, "Say nothing on success");
    o.flag("--no-figures", no_figures_, "Write the page and summary without drawing a figure (text, tables, verdicts)");
  }

  int run_here() override { return draw_report(files_, out_, force_, quiet_, !no_figures_); }

 private:
  std::vector<std::string> files_;
  std::string out_;
  bool force_ = false, quiet_ = false, no_figures_ = false;
};

const RegisteredCommand<Report> kReport;

}  // namespace
}  // namespace parity::cli
