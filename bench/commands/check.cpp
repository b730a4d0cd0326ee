// parity check: the conformance cases of every registered family, run on the ranks given and
// recorded case by case.
#include "bench/commands/check.hpp"

#include <algorithm>
#include <cstdio>

#include "bench/cli/filter.hpp"
#include "bench/cli/progress.hpp"
#include "reference/core/error.hpp"

namespace parity::cli {

std::vector<SelectedCases> select_cases(int world_size, const std::string& filter, const cases::GridOptions& options) {
  const NameFilter keep(filter);
  std::vector<SelectedCases> out;
  std::size_t total = 0;
  for (const cases::CaseFamily* family : cases::case_families()) {
    auto list = family->grid(world_size, options);
    list->keep_only([&](const std::string& name) { return keep.matches(name); });
    total += list->size();
    out.push_back({family, std::move(list)});
  }
  if (total == 0) throw UsageError("--filter '" + filter + "' matches no case (parity check --list shows them)");
  return out;
}

FamilyOutcome run_family_cases(Session& session, const cases::CaseFamily& family, const cases::CaseList& list) {
  const auto& info = family.info();
  FamilyOutcome out{0, record::Table(*info.table)};
  if (list.size() == 0) return out;
  const cases::CaseContext context{session.world(), session.host_world(), session.half()};
  // --resume: a case's row is found by its name.
  const RowKey by_case = [](const record::Table& t, std::size_t row) { return t.get_str("case")[row]; };
  record::Table& table = out.table;
  std::size_t& failed = out.failed;
  Progress progress("check " + info.name, list.size(), session.is_root() && !session.options().quiet);
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string name = list.name(i);
    progress.update(i, name);
    // Taken from the resumed file when it has the case (counted when it failed there).
    const Session::Restored restored = session.restore_row(
        info.table->group, name, by_case, table, [](const record::Table& from, std::size_t row) { return from.get_i64("passed")[row]; });
    if (restored.found) {
      failed += restored.value == 0 ? 1 : 0;
      continue;
    }
    const cases::Verdict verdict = list.run(context, i, table);
    if (!verdict.passed) {
      ++failed;
      if (session.is_root()) std::fprintf(stderr, "FAILED %s: %s\n", name.c_str(), verdict.message.c_str());
    }
    table.put({{"passed", verdict.passed ? 1 : 0}, {"message", verdict.message}});
    session.record_rows(info.table->group, table, table.rows() - 1);
  }
  progress.finish();
  if (session.is_root()) {
    std::printf("# %s%sconformance: %zu cases at %d ranks, %zu passed, %zu failed\n", info.label.c_str(),
                info.label.empty() ? "" : " ", list.size(), session.world().size(), list.size() - failed, failed);
    session.results().write_table(info.table->group, table);
  }
  return out;
}

namespace {

struct CheckOptions {
  std::string filter = "*";
  bool no_large = false;
  bool list_only = false;
};

class Check final : public CommandWith<CheckOptions> {
 public:
  Check()
      : CommandWith({.name = "check",
                     .help = "Run the conformance cases and record each: the collectives (every collective x algorithm x "
                             "type x reduction x size x placement), data parallelism and ZeRO, tensor, pipeline, mixture "
                             "of experts and activation checkpointing (parity list names the families; --filter "
                             "'<family>/*')",
                     .order = 10,
                     .half_accumulate = true,
                     .in_run = true,
                     .resume_probe = ResumeProbe{{"-q", "--np", "2", "--filter", "all_reduce/*/float32/sum/1021/*:all_gather/*/float32/*/1021/*"},
                                                 "check/collectives",
                                                 "*",
                                                 {5, 15},
                                                 "INT"}}) {}

  void declare(CommandOptions& o) override {
    o.add("--filter", options_.filter, "GoogleTest-style pattern on case names, e.g. 'all_reduce/ring/*:reduce/*-*/bfloat16/*'");
    o.flag("--no-large", options_.no_large, "Skip the 1 MiB + 3 and 64 MiB cases", {true, false});
    o.flag("--list", options_.list_only, "Print the matching case names for --np ranks and exit");
  }

  std::optional<int> prepare(std::optional<int>) override {
    if (options_.list_only) {
      for (const auto& selected : select_cases(common().np, options_.filter, grid_options()))
        for (std::size_t i = 0; i < selected.cases->size(); ++i) std::printf("%s\n", selected.cases->name(i).c_str());
      return kExitOk;
    }
    select_cases(std::max(common().np, 1), options_.filter, grid_options());  // a filter matching nothing fails here
    return std::nullopt;
  }

  int execute(Job& job) override {
    Session& session = job.session;
    const std::vector<SelectedCases> selected = select_cases(session.world().size(), options_.filter, grid_options());
    std::size_t largest = 0;
    for (const auto& s : selected)
      for (std::size_t i = 0; i < s.cases->size(); ++i)
        largest = std::max(largest, s.cases->bytes_per_rank(i, session.world().size()));
    session.admit(largest, "the conformance cases");
    std::size_t failed = 0;
    for (const auto& s : selected) failed += run_family_cases(session, *s.family, *s.cases).failed;
    return failed ? kExitFailed : kExitOk;
  }

  std::vector<const record::TableSpec*> tables() const override {
    std::vector<const record::TableSpec*> tables;
    for (const cases::CaseFamily* f : cases::case_families()) tables.push_back(f->info().table);
    return tables;
  }

 private:
  cases::GridOptions grid_options() const { return {.include_large = !options_.no_large}; }
};

const RegisteredCommand<Check> kCheck;

}  // namespace
}  // namespace parity::cli
