// parity run: the main job. Every command of the registry marked in_run (the conformance suite
// and the default benchmarks), in the registry's order, with the values their options declare
// for it, into one result file; then its report.
#include <algorithm>
#include <filesystem>

#include "bench/cli/launcher.hpp"
#include "bench/cli/reports.hpp"
#include "bench/cli/supervisor.hpp"
#include "bench/commands/command.hpp"

namespace parity::cli {
namespace {

class Run final : public Command {
 public:
  Run()
      : Command({.name = "run",
                 .help = "The main job: conformance suite plus default benchmarks on the given ranks, one result file "
                         "and its report",
                 .order = 0,
                 .half_accumulate = true,
                 .no_probe_reason = "composed of the commands marked in_run, each resumed by its own probe"}) {}

  void declare(CommandOptions& o) override {
    o.flag("--quick", quick_, "Smaller job: no 1 MiB/64 MiB conformance sizes, benchmark sizes up to 1 MiB");
    o.flag("--no-report", no_report_, "Do not draw the report").group(kRunningGroup);
    o.add("--report-dir", report_dir_, "Report directory [default: <result file without .h5>.report]").group(kRunningGroup);
  }

  std::vector<const record::TableSpec*> tables() const override {
    std::vector<const record::TableSpec*> all;
    for (const Command* c : parts())
      for (const record::TableSpec* t : c->tables())
        if (std::find(all.begin(), all.end(), t) == all.end()) all.push_back(t);
    return all;
  }

  // Each part's options take their run values, fitted to the world where it is known already
  // (--np outside a launcher), and are checked before any rank starts (and on every rank again).
  std::optional<int> prepare(std::optional<int> world_size) override {
    // Where the report is drawn: outside a launcher, or on its rank 0 (the folder is its host's).
    if (!no_report_ && (!under_launcher() || launcher_rank() == 0)) check_report_dir(report_dir_, {common().out}, "--report-dir");
    for (Command* c : parts()) {
      c->options().use_run_values(quick_);
      if (world_size) c->prepare_for_run(*world_size);
      c->prepare(world_size);
    }
    return std::nullopt;
  }

  int execute(Job& job) override {
    int status = kExitOk;
    for (Command* c : parts()) {
      c->prepare_for_run(job.session.world().size());
      if (c->execute(job) != kExitOk) status = kExitFailed;
    }
    common().out = job.session.options().out;  // the default name the session chose
    return status;
  }

  // MPI is finalised now; rank 0 (or the only process) draws the report, not the parent.
  int after_job(int status) override {
    const bool rank0 = launcher_rank() == 0;
    if (!rank0 || no_report_ || status == kExitUsage || common().out.empty() || !std::filesystem::exists(common().out))
      return status;
    const int report_status = draw_report({common().out}, report_dir_, true, common().quiet, true, "--report-dir");
    return status == kExitOk ? report_status : status;
  }

 private:
  static std::vector<Command*> parts() {
    std::vector<Command*> out;
    for (Command* c : commands())
      if (c->info().in_run) out.push_back(c);
    return out;
  }
  bool quick_ = false, no_report_ = false;
  std::string report_dir_;
};

const RegisteredCommand<Run> kRun;

}  // namespace
}  // namespace parity::cli
