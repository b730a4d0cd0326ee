// The global batch of a step and its shares: the rows of each rank of the group that splits the
// batch (the data-parallel ranks), that rank's micro-batches, and the source that makes any rows
// of any step's batch (so that a rank makes only its own, and the single-device reference the
// whole). Every technique's step splits its batch this way (the Trainer does it), so it lives
// with the step rather than with data parallelism.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "reference/model/model.hpp"

namespace parity::parallel {

// Rows [first, first + rows) of a batch.
struct RowRange {
  std::int64_t first = 0;
  std::int64_t rows = 0;
};
// Rank `rank`'s rows of a global batch: the first (global mod world) ranks take one row more.
// Throws UsageError when the batch is smaller than the world (a rank would have no rows).
RowRange batch_shard(std::int64_t global_rows, int rank, int world);
// `count` consecutive micro-batches of a shard, sizes differing by at most one. Throws
// UsageError when the shard has fewer rows than micro-batches.
std::vector<RowRange> split_rows(RowRange shard, int count);

// One micro-batch of a rank's step: its index, its rows of the global batch, and whether it
// is the last (after whose backward the gradients are final).
struct MicroBatch {
  int index = 0;
  RowRange rows;
  bool last = false;
};
// Rank `rank` of `world`'s micro-batches of a global batch (the last one marked).
std::vector<MicroBatch> micro_batches_of(std::int64_t global_rows, int rank, int world, int count);

// Makes rows [first_row, first_row + rows) of step `step`'s global batch of `global_rows`
// (model::gpt_batch and model::mlp_batch have this form).
using BatchSource = std::function<model::Batch(std::uint64_t step, std::int64_t first_row, std::int64_t rows,
                                               std::int64_t global_rows)>;
// The synthetic task of a model config as a BatchSource.
BatchSource batches_of(const model::GptConfig& config);
BatchSource batches_of(const model::MlpConfig& config);

}  // namespace parity::parallel
