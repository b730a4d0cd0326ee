// parity check: the conformance cases of correctness/cases/, run on the ranks given and
// recorded case by case.
#include <cstdio>

#include "bench/cli/filter.hpp"
#include "bench/cli/progress.hpp"
#include "bench/commands/commands.hpp"
#include "correctness/cases/collectives.hpp"
#include "reference/core/error.hpp"

namespace parity::cli {
namespace {
std::vector<cases::CollectiveCase> selected_cases(int world_size, const CheckOptions& options) {
  const NameFilter filter(options.filter);
  std::vector<cases::CollectiveCase> out;
  for (const auto& c : cases::conformance_grid(world_size, {options.include_large}))
    if (filter.matches(c.name())) out.push_back(c);
  if (out.empty()) throw UsageError("--filter '" + options.filter + "' matches no case (parity check --list shows them)");
  return out;
}
}  // namespace

std::vector<std::string> check_case_names(int world_size, const CheckOptions& options) {
  std::vector<std::string> names;
  for (const auto& c : selected_cases(world_size, options)) names.push_back(c.name());
  return names;
}

CheckOutcome run_check(Session& session, const CheckOptions& options) {
  Communicator& comm = session.world();
  const auto selected = selected_cases(comm.size(), options);
  std::size_t largest = 0;
  for (const auto& c : selected) largest = std::max(largest, cases::case_bytes_per_rank(c, comm.size()));
  session.check_memory(largest, "the conformance cases");
  session.maybe_inject_stall();

  CheckOutcome outcome;
  record::Table& t = outcome.cases;
  Progress progress("check", selected.size(), session.is_root() && !session.options().quiet);
  for (std::size_t i = 0; i < selected.size(); ++i) {
    const auto& c = selected[i];
    progress.update(i, c.name());
    const cases::CaseResult r = cases::run_case(comm, c, session.half());
    if (!r.passed) {
      ++outcome.failed;
      if (session.is_root()) std::fprintf(stderr, "FAILED %s: %s\n", c.name().c_str(), r.message.c_str());
    }
    t.str("case").push_back(c.name());
    t.str("collective").emplace_back(name_of(c.collective));
    t.str("algorithm").push_back(c.algorithm);
    t.str("dtype").emplace_back(name_of(c.dtype));
    t.str("redop").emplace_back(is_reducing(c.collective) ? name_of(c.op) : "none");
    t.i64("count").push_back(static_cast<std::int64_t>(c.count));
    t.i64("in_place").push_back(c.in_place ? 1 : 0);
    t.str("input").emplace_back(c.input == cases::InputKind::exact ? "exact" : "random");
    t.i64("world_size").push_back(comm.size());
    t.f64("max_abs_error").push_back(r.max_abs_error);
    t.f64("max_rel_error").push_back(r.max_rel_error);
    t.f64("tolerance").push_back(r.tolerance);
    t.i64("wrong").push_back(r.wrong);
    t.i64("guard_ok").push_back(r.guard_ok ? 1 : 0);
    t.i64("passed").push_back(r.passed ? 1 : 0);
    t.str("message").push_back(r.message);
  }
  progress.finish();
  if (session.is_root())
    std::printf("# conformance: %zu cases at %d ranks, %zu passed, %zu failed\n", selected.size(), comm.size(),
                selected.size() - outcome.failed, outcome.failed);
  return outcome;
}

}  // namespace parity::cli
