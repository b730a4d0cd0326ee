// Case families: each conformance case file registers its family once — its name, the result
// group its rows go to, its grid at a world size, how a case runs and which columns its row
// holds — and `parity check`, `parity list` and --resume iterate this registry instead of naming
// the families. A new family is its case file (and header) with one registration in it:
//
//   const cases::RegisteredFamily kMine{cases::FamilyDefinition<MyCase, MyResult>{
//       .table = &kMineCasesTable, .label = "mine", .order = 70, .grid = mine_grid, .run = run_mine,
//       .columns = [](record::Table& t, const cases::CaseContext& c, const MyCase& k, const MyResult& r) {...}}};
//
// Its name is the last part of its result group (/check/mine).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "reference/comm/algorithms.hpp"
#include "reference/comm/communicator.hpp"
#include "reference/record/table.hpp"

namespace parity::cases {

// What a family's cases run with.
struct CaseContext {
  Communicator& world;       // every rank, in the run's memory space (a GPU's on a device run)
  Communicator& host_world;  // MPI on host memory: the world itself on CPU runs
  HalfAccumulate half = HalfAccumulate::float32;  // how 16-bit reductions accumulate
};

struct GridOptions {
  bool include_large = true;  // the collectives' 1 MiB + 3 element and 64 MiB cases
};

struct Verdict {
  bool passed = false;
  std::string message;
};

// The cases of one family at one world size, in order.
class CaseList {
 public:
  virtual ~CaseList() = default;
  virtual std::size_t size() const = 0;
  virtual std::string name(std::size_t i) const = 0;
  // Keeps the cases whose name `keep` accepts, in order.
  virtual void keep_only(const std::function<bool(const std::string&)>& keep) = 0;
  // Bytes one rank allocates for case i, to refuse a run that does not fit before any case
  // starts (0: small enough not to matter).
  virtual std::size_t bytes_per_rank(std::size_t i, int world_size) const = 0;
  // Runs case i on every rank (collectively) and appends its row to `table` — its name in
  // column `case`, then the family's columns — except the verdict, which it returns (every rank
  // returns the same).
  virtual Verdict run(const CaseContext& context, std::size_t i, record::Table& table) const = 0;
};

class CaseFamily {
 public:
  struct Info {
    std::string name;  // "training"
    // Its result group ("/check/training") and the columns of its rows: `case`, the family's,
    // `passed` and `message`.
    const record::TableSpec* table = nullptr;
    std::string label;  // "training": the summary line "# training conformance: ..."
    int order = 0;      // place in `parity check` and `parity list` (smallest first)
  };
  explicit CaseFamily(Info info) : info_(std::move(info)) {}
  virtual ~CaseFamily() = default;
  const Info& info() const { return info_; }
  virtual std::unique_ptr<CaseList> grid(int world_size, const GridOptions& options) const = 0;

 private:
  Info info_;
};

// The schema of a family's result group, /check/<family>: `case`, the family's own columns, then
// `passed` and `message` (CasesOf writes those three around the family's columns).
inline record::TableSpec check_table(const std::string& family, std::string description,
                                     std::vector<record::ColumnSpec> columns) {
  columns.insert(columns.begin(), {"case", ColumnType::string});
  columns.push_back({"passed", ColumnType::int64});
  columns.push_back({"message", ColumnType::string});
  return {"/check/" + family, std::move(description), std::move(columns)};
}

// The columns that say where and how long a model case ran, in the order the tables keep them:
// precision, device, world_size, steps.
void add_run_columns(record::Table& t, const Communicator& world, const std::string& precision, int steps);

// A family's name: the last part of its result group ("/check/moe": moe).
std::string family_name(const record::TableSpec& table);

// Every registered family, by order.
const std::vector<const CaseFamily*>& case_families();
// Throws UsageError naming the known families.
const CaseFamily& find_case_family(std::string_view name);

// A family's grid: a function of the world size, or of the world size and the options.
template <typename Case>
class GridFunction {
 public:
  GridFunction(std::vector<Case> (*at)(int world_size))
      : f_([at](int world_size, const GridOptions&) { return at(world_size); }) {}
  template <typename F>
    requires std::is_invocable_r_v<std::vector<Case>, F, int, const GridOptions&>
  GridFunction(F f) : f_(std::move(f)) {}
  std::vector<Case> operator()(int world_size, const GridOptions& options) const { return f_(world_size, options); }

 private:
  std::function<std::vector<Case>(int, const GridOptions&)> f_;
};

// How a family's case runs: on the world alone, or given the whole context.
template <typename Case, typename Result>
class RunFunction {
 public:
  RunFunction(Result (*on_world)(Communicator& world, const Case&))
      : f_([on_world](const CaseContext& context, const Case& c) { return on_world(context.world, c); }) {}
  template <typename F>
    requires std::is_invocable_r_v<Result, F, const CaseContext&, const Case&>
  RunFunction(F f) : f_(std::move(f)) {}
  Result operator()(const CaseContext& context, const Case& c) const { return f_(context, c); }

 private:
  std::function<Result(const CaseContext&, const Case&)> f_;
};

// A family whose cases are `Case` values (with name()) that run to a `Result` (with passed and
// message). Its name is the last part of its table's group ("/check/moe": moe).
template <typename Case, typename Result>
struct FamilyDefinition {
  const record::TableSpec* table = nullptr;
  std::string label;
  int order = 0;
  GridFunction<Case> grid;
  RunFunction<Case, Result> run;
  // The row's columns after `case` (in their order), from the case and its result.
  std::function<void(record::Table&, const CaseContext&, const Case&, const Result&)> columns;
  std::function<std::size_t(const Case&, int world_size)> bytes_per_rank;  // optional
};

template <typename Case, typename Result>
class CasesOf final : public CaseList {
 public:
  CasesOf(const FamilyDefinition<Case, Result>& definition, std::vector<Case> cases)
      : definition_(definition), cases_(std::move(cases)) {}
  std::size_t size() const override { return cases_.size(); }
  std::string name(std::size_t i) const override { return cases_[i].name(); }
  void keep_only(const std::function<bool(const std::string&)>& keep) override {
    std::vector<Case> kept;
    for (auto& c : cases_)
      if (keep(c.name())) kept.push_back(std::move(c));
    cases_ = std::move(kept);
  }
  std::size_t bytes_per_rank(std::size_t i, int world_size) const override {
    return definition_.bytes_per_rank ? definition_.bytes_per_rank(cases_[i], world_size) : 0;
  }
  Verdict run(const CaseContext& context, std::size_t i, record::Table& table) const override {
    const Case& c = cases_[i];
    const Result r = definition_.run(context, c);
    table.str("case").push_back(c.name());
    definition_.columns(table, context, c, r);
    return {r.passed, r.message};
  }

 private:
  const FamilyDefinition<Case, Result>& definition_;
  std::vector<Case> cases_;
};

template <typename Case, typename Result>
class FamilyOf final : public CaseFamily {
 public:
  explicit FamilyOf(FamilyDefinition<Case, Result> d)
      : CaseFamily({family_name(*d.table), d.table, d.label, d.order}), definition_(std::move(d)) {}
  std::unique_ptr<CaseList> grid(int world_size, const GridOptions& options) const override {
    return cases(definition_.grid(world_size, options));
  }
  // The family's run and columns over cases made elsewhere (`parity pipeline run`'s schedule).
  std::unique_ptr<CaseList> cases(std::vector<Case> chosen) const {
    return std::make_unique<CasesOf<Case, Result>>(definition_, std::move(chosen));
  }

 private:
  FamilyDefinition<Case, Result> definition_;
};

// Adds a family to the registry for the life of the program (a namespace-scope constant of the
// case file). Refuses, at start-up, a name or group registered twice.
class RegisteredFamily {
 public:
  template <typename Case, typename Result>
  explicit RegisteredFamily(FamilyDefinition<Case, Result> definition)
      : family_(std::make_unique<FamilyOf<Case, Result>>(std::move(definition))) {
    add(*family_);
  }
  template <typename Case, typename Result>
  const FamilyOf<Case, Result>& as() const {
    return dynamic_cast<const FamilyOf<Case, Result>&>(*family_);
  }

 private:
  static void add(const CaseFamily& family);
  std::unique_ptr<CaseFamily> family_;
};

}  // namespace parity::cases
