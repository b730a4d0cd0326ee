// The registry of case families (correctness/cases/family.hpp): the schema check_table gives a
// family's rows, the order `parity check` and `parity list` walk the families in, and the refusal
// of a family registered twice. The families themselves are the case files' (linked in whole).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "correctness/cases/family.hpp"

namespace parity::cases {
namespace {

std::vector<std::string> column_names(const record::TableSpec& spec) {
  std::vector<std::string> names;
  for (const record::ColumnSpec& c : spec.columns) names.push_back(c.name);
  return names;
}

// `case` first, the family's own columns in their order, then `passed` and `message`: the order
// CasesOf writes a row in, and the one docs/results-schema.md gives.
TEST(CaseFamilies, CheckTableHasTheCaseFirstAndTheVerdictLast) {
  const record::TableSpec spec = check_table("mine", "my cases", {{"size", ColumnType::int64}, {"error", ColumnType::float64}});
  EXPECT_EQ(spec.group, "/check/mine");
  EXPECT_EQ(spec.description, "my cases");
  EXPECT_EQ(column_names(spec), (std::vector<std::string>{"case", "size", "error", "passed", "message"}));
  EXPECT_EQ(spec.columns.front().type, ColumnType::string);
  EXPECT_EQ(spec.columns[spec.columns.size() - 2].type, ColumnType::int64);
}

// Every family is registered once, by its order (the smallest first), and is named by the last
// part of its group.
TEST(CaseFamilies, RegistryIsInOrderAndNamedByGroup) {
  const std::vector<const CaseFamily*>& families = case_families();
  ASSERT_GE(families.size(), 2u);
  for (std::size_t i = 1; i < families.size(); ++i)
    EXPECT_LE(families[i - 1]->info().order, families[i]->info().order)
        << families[i - 1]->info().name << " before " << families[i]->info().name;
  EXPECT_EQ(families.front()->info().name, "collectives");  // order 10, the first `parity check` runs
  for (const CaseFamily* f : families) {
    EXPECT_EQ("/check/" + f->info().name, f->info().table->group);
    EXPECT_EQ(&find_case_family(f->info().name), f);
  }
}

struct NoCase {
  std::string name() const { return "none"; }
};
struct NoResult {
  bool passed = true;
  std::string message;
};

// A second family with the name of one registered already is refused at start-up, even when its
// group is another (its name is the last part of the group: /bench/collectives is named
// collectives too), as is a second family of one group.
TEST(CaseFamiliesDeathTest, ANameOrGroupRegisteredTwiceIsRefused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the process may run other threads by now
  static const record::TableSpec other_group{"/bench/collectives", "", {}};
  static const record::TableSpec same_group{"/check/collectives", "", {}};
  const auto definition = [](const record::TableSpec* table) {
    return FamilyDefinition<NoCase, NoResult>{
        .table = table, .label = "", .order = 99, .grid = +[](int) { return std::vector<NoCase>{}; },
        .run = +[](Communicator&, const NoCase&) { return NoResult{}; }, .columns = {}, .bytes_per_rank = {}};
  };
  EXPECT_DEATH(RegisteredFamily{definition(&other_group)}, "case family 'collectives' \\(/bench/collectives\\) registered twice");
  EXPECT_DEATH(RegisteredFamily{definition(&same_group)}, "case family 'collectives' \\(/check/collectives\\) registered twice");
}

}  // namespace
}  // namespace parity::cases
