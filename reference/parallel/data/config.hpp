// How the data-parallel axis runs a step: the batch, its micro-batches, the buckets and
// algorithms of the gradient reduction, the ZeRO stage and the precision. Every technique with
// a data-parallel axis takes one (ZeRO, tensor, pipeline and expert parallelism compose with
// it), and checked_config refuses one that does not fit before any collective runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "reference/model/optimizer.hpp"
#include "reference/parallel/precision/loss_scaler.hpp"

namespace parity::parallel {

struct DataParallelConfig {
  int zero_stage = 0;               // 0 plain DP (buckets), 1, 2, 3 (zero/zero.hpp)
  std::int64_t global_batch = 8;    // rows per optimizer step, over all data-parallel ranks
  int micro_batches = 1;            // per rank per step (gradient accumulation)
  std::size_t bucket_bytes = 25u << 20;  // stage 0: gradient bytes per all-reduce (DDP's default 25 MiB)
  bool overlap = true;              // start each bucket's collective during backward
  std::string all_reduce = "ring";  // algorithm names (algorithms.hpp); "native" is the backend's
  std::string reduce_scatter = "ring";
  std::string all_gather = "ring";
  Precision precision = Precision::model;
  LossScaling loss_scaling;  // mixed precision only
  // Refuses a stage outside 0-3, a zero bucket size, a batch smaller than the data-parallel
  // world, fewer rows on a rank than micro-batches, unknown algorithms (UsageError).
  void validate(int data_parallel_world) const;
  std::string describe() const;
};
// The configuration, refused before any collective when it or the model does not fit (a
// 16-bit model without mixed precision, mixed precision without float32 optimizer state).
DataParallelConfig checked_config(DataParallelConfig config, int data_parallel_world, const model::Model& model,
                                  const model::Optimizer& optimizer);

}  // namespace parity::parallel
