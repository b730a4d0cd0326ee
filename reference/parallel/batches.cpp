// The global batch's shares and sources (see batches.hpp).
#include "reference/parallel/batches.hpp"

#include <algorithm>
#include <string>

#include "reference/core/error.hpp"

namespace parity::parallel {

RowRange batch_shard(std::int64_t global_rows, int rank, int world) {
  require(world > 0 && rank >= 0 && rank < world, "batch_shard: rank outside the world");
  if (global_rows < world)
    throw UsageError("the global batch (" + std::to_string(global_rows) + " rows) is smaller than the world (" +
                     std::to_string(world) + " data-parallel ranks): every rank needs at least one row");
  const std::int64_t base = global_rows / world, extra = global_rows % world;
  return {rank * base + std::min<std::int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

std::vector<RowRange> split_rows(RowRange shard, int count) {
  if (count < 1) throw UsageError("micro-batches per step must be at least 1, not " + std::to_string(count));
  if (shard.rows < count)
    throw UsageError("a rank with " + std::to_string(shard.rows) + " rows cannot split them into " +
                     std::to_string(count) + " micro-batches");
  std::vector<RowRange> out;
  for (int i = 0; i < count; ++i) {
    const RowRange part = batch_shard(shard.rows, i, count);
    out.push_back({shard.first + part.first, part.rows});
  }
  return out;
}

std::vector<MicroBatch> micro_batches_of(std::int64_t global_rows, int rank, int world, int count) {
  const std::vector<RowRange> rows = split_rows(batch_shard(global_rows, rank, world), count);
  std::vector<MicroBatch> out;
  for (std::size_t i = 0; i < rows.size(); ++i) out.push_back({static_cast<int>(i), rows[i], i + 1 == rows.size()});
  return out;
}

BatchSource batches_of(const model::GptConfig& config) {
  return [config](std::uint64_t step, std::int64_t first, std::int64_t rows, std::int64_t global) {
    return model::gpt_batch(config, step, first, rows, global);
  };
}

BatchSource batches_of(const model::MlpConfig& config) {
  return [config](std::uint64_t step, std::int64_t first, std::int64_t rows, std::int64_t global) {
    return model::mlp_batch(config, step, first, rows, global);
  };
}

}  // namespace parity::parallel
