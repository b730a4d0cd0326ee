// parity check: the conformance cases of every registered family (correctness/cases/family.hpp),
// run on the ranks given and recorded case by case, each family's rows in its own group.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "bench/commands/command.hpp"
#include "correctness/cases/family.hpp"

namespace parity::cli {

// Runs the cases of `list` in order — each case's row taken from a resumed file when it has it,
// journaled as it ends — writes the family's table (rank 0) and prints its summary line.
struct FamilyOutcome {
  std::size_t failed = 0;
  record::Table table;  // every rank's copy of the rows
};
FamilyOutcome run_family_cases(Session& session, const cases::CaseFamily& family, const cases::CaseList& list);

// The selected cases of every family at a world size, in the registry's order; throws
// UsageError when the filter matches no case.
struct SelectedCases {
  const cases::CaseFamily* family;
  std::unique_ptr<cases::CaseList> cases;
};
std::vector<SelectedCases> select_cases(int world_size, const std::string& filter, const cases::GridOptions& options);

}  // namespace parity::cli
