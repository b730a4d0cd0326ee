// The data-parallel configuration and its checks (see config.hpp).
#include "reference/parallel/data/config.hpp"

#include "reference/comm/algorithms.hpp"
#include "reference/core/error.hpp"
#include "reference/parallel/batches.hpp"

namespace parity::parallel {

void DataParallelConfig::validate(int world) const {
  if (zero_stage < 0 || zero_stage > 3)
    throw UsageError("ZeRO stage " + std::to_string(zero_stage) + " is outside 0-3 (0 is plain data parallelism)");
  if (bucket_bytes == 0) throw UsageError("the gradient bucket size must be positive, not 0 bytes");
  const RowRange smallest = batch_shard(global_batch, world - 1, world);  // the last rank has the fewest rows
  split_rows(smallest, micro_batches);
  find_algorithm(Collective::all_reduce, all_reduce);
  find_algorithm(Collective::reduce_scatter, reduce_scatter);
  find_algorithm(Collective::all_gather, all_gather);
}

std::string DataParallelConfig::describe() const {
  std::string s = zero_stage == 0 ? "data parallel" : "ZeRO-" + std::to_string(zero_stage);
  s += ", global batch " + std::to_string(global_batch) + ", " + std::to_string(micro_batches) + " micro-batch" +
       (micro_batches > 1 ? "es" : "") + ", " + std::string(name_of(precision)) + " precision";
  if (precision == Precision::mixed) s += ", " + loss_scaling.describe();
  if (zero_stage == 0) s += ", buckets of " + std::to_string(bucket_bytes) + " bytes (" + all_reduce + ")";
  s += overlap ? ", overlapped" : ", not overlapped";
  return s;
}

DataParallelConfig checked_config(DataParallelConfig config, int world, const model::Model& model,
                                  const model::Optimizer& optimizer) {
  config.validate(world);
  const DataType type = model.dtype();
  if (config.loss_scaling.dynamic && config.precision != Precision::mixed)
    throw UsageError("loss scaling is for 16-bit gradients: it needs --precision mixed");
  config.loss_scaling.validate();
  if (config.precision == Precision::mixed) {
    if (!is_half(type))
      throw UsageError("mixed precision needs a model in float16 or bfloat16, not " + std::string(name_of(type)));
    if (optimizer.state_dtype() != DataType::float32)
      throw UsageError("mixed precision keeps float32 master weights and optimizer state (K = 12 bytes per "
                       "parameter with Adam); the optimizer's state is " +
                       std::string(name_of(optimizer.state_dtype())));
  } else if (type != DataType::float32 && type != DataType::float64) {
    throw UsageError("a " + std::string(name_of(type)) + " model needs --precision mixed (float32 master weights)");
  }
  return config;
}

}  // namespace parity::parallel
