// parity bench state: the training state saved and restored, timed beside the file system.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/cli/session.hpp"
#include "reference/model/model.hpp"
#include "reference/model/optimizer.hpp"
#include "reference/parallel/grid.hpp"
#include "reference/parallel/tensor/regions.hpp"
#include "reference/parallel/trainer.hpp"
#include "reference/record/table.hpp"

namespace parity::cli {

// The result groups it writes (docs/results-schema.md).
inline const record::TableSpec kStateBenchTable{"/bench/state",
    "the training state saved and restored per layout, a row per rank and repeat: seconds and bytes beside "
    "the file system's sequential write and read of the same bytes in the same run, bytes against the formula, "
    "and an asynchronous save's cost on the step",
    {{"layout", ColumnType::string}, {"precision", ColumnType::string}, {"repeat", ColumnType::int64},
     {"rank", ColumnType::int64}, {"world_size", ColumnType::int64},
     {"bytes", ColumnType::float64, "B"}, {"file_bytes", ColumnType::float64, "B"},
     {"total_bytes", ColumnType::float64, "B"}, {"formula_bytes", ColumnType::float64, "B"},
     {"save_s", ColumnType::float64, "s"}, {"load_s", ColumnType::float64, "s"},
     {"load_bytes", ColumnType::float64, "B"}, {"fs_write_s", ColumnType::float64, "s"},
     {"fs_read_s", ColumnType::float64, "s"}, {"step_s", ColumnType::float64, "s"},
     {"async_staged_s", ColumnType::float64, "s"}, {"async_step_s", ColumnType::float64, "s"},
     {"async_finish_s", ColumnType::float64, "s"}, {"restored_exactly", ColumnType::int64}}};

// One rank's figures of one save and restore (seconds, bytes; exact: 1 when the restored
// state equals the saved one), gathered over the ranks as a row of kFields doubles.
struct StateMeasured {
  double bytes = 0, file_bytes = 0, save_s = 0, load_s = 0, load_bytes = 0, fs_write_s = 0, fs_read_s = 0, step_s = 0,
         async_staged_s = 0, async_step_s = 0, async_finish_s = 0, exact = 0;
  static constexpr std::size_t kFields = 12;
  std::array<double, kFields> as_row() const;
  static StateMeasured from_row(const double* row);  // as_row's order
};
// What a row of /bench/state holds beside a rank's figures.
struct StateRowKey {
  std::string layout, precision;
  std::int64_t repeat = 0, rank = 0, world_size = 0;
  double total_bytes = 0, formula_bytes = 0;
};
// Appends one rank's row, each figure in its own column (table: made from kStateBenchTable).
void add_state_row(record::Table& table, const StateRowKey& key, const StateMeasured& measured);

struct StateBenchOptions {
  std::string model = "small";  // a GPT preset
  int layers = 0;               // transformer blocks; 0: the preset's
  std::string precision = "float32";
  std::string layouts = "dp,zero3";  // dp, zero1, zero2, zero3, tp<T> (dp over the rest)
  int repeats = 3;
  std::string dir;               // where the states go; empty: a temporary directory
  bool keep = false;             // keep the saved states
};

struct StateLayout {
  std::string name;
  int zero = 0;
  int tp = 1;
};

// "dp", "zero1".."zero3" or "tp<T>" (UsageError naming `option` otherwise).
StateLayout parse_state_layout(const std::string& name, const std::string& option);

// A layout's trainer over every rank of the session (AdamW; mixed precision for 16-bit types,
// float16 with dynamic loss scaling), and what it is made of (members unmade in reverse).
struct StateTrainer {
  std::unique_ptr<parallel::Grid> grid;
  std::unique_ptr<parallel::TensorParallel> tp;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<model::AdamW> optimizer;
  std::unique_ptr<parallel::Trainer> trainer;
  // Parameters (masters with `master`) and optimizer state, whole on every rank.
  parallel::ParameterValues whole_values(bool master);
};
// UsageError (naming `option`) for a tp size that does not divide the world.
StateTrainer build_state_trainer(Session& session, const model::GptConfig& config, const StateLayout& layout,
                                 std::int64_t rows, const std::string& option);

struct StateBenchPlan {
  std::string model;
  model::GptConfig config;
  std::vector<StateLayout> layouts;
};
// Checks every option (UsageError naming the bad one); a tp size against the world is checked
// when the ranks run.
StateBenchPlan plan_state_bench(const StateBenchOptions& options);
// What a rank holds with `trainers` trainers of `config` alive at once and `gathered` copies of
// the whole state in double (values, float32 masters and AdamW's moments), in the data-parallel
// layout (the largest share) over a world of world_size with the global batch of
// max(8, world_size) rows these commands train on: for the memory check.
std::size_t state_bytes_per_rank(const model::GptConfig& config, int world_size, int trainers, int gathered);

}  // namespace parity::cli
