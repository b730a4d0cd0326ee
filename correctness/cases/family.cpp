// The registry of case families (family.hpp): filled by the case files' registrations during
// static initialisation, read afterwards.
#include "correctness/cases/family.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "reference/core/error.hpp"

namespace parity::cases {
namespace {
// A function's static, so that registrations from any file's initialisation find it made.
std::vector<const CaseFamily*>& registry() {
  static std::vector<const CaseFamily*> families;
  return families;
}
}  // namespace

void RegisteredFamily::add(const CaseFamily& family) {
  auto& families = registry();
  for (const CaseFamily* f : families)
    if (f->info().name == family.info().name || f->info().table->group == family.info().table->group) {
      // Before main: no one could catch an exception; a duplicate is a programming error.
      std::fprintf(stderr, "parity: case family '%s' (%s) registered twice\n", family.info().name.c_str(),
                   family.info().table->group.c_str());
      std::abort();
    }
  families.push_back(&family);
  std::stable_sort(families.begin(), families.end(),
                   [](const CaseFamily* a, const CaseFamily* b) { return a->info().order < b->info().order; });
}

const std::vector<const CaseFamily*>& case_families() { return registry(); }

void add_run_columns(record::Table& t, const Communicator& world, const std::string& precision, int steps) {
  t.put({{"precision", precision}, {"device", world.memory_space() == MemorySpace::cuda ? "cuda" : "cpu"},
         {"world_size", world.size()}, {"steps", steps}});
}

std::string family_name(const record::TableSpec& table) {
  return table.group.substr(table.group.find_last_of('/') + 1);
}

const CaseFamily& find_case_family(std::string_view name) {
  std::string known;
  for (const CaseFamily* f : registry()) {
    if (f->info().name == name) return *f;
    known += (known.empty() ? "" : ", ") + f->info().name;
  }
  throw UsageError("unknown case family '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace parity::cases
