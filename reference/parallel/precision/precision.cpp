// Mixed precision's parts of the step (see precision.hpp).
#include "reference/parallel/precision/precision.hpp"

#include "reference/core/error.hpp"
#include "reference/kernels/buffer_kernels.hpp"

namespace parity::parallel {

std::string_view name_of(Precision precision) { return precision == Precision::mixed ? "mixed" : "model"; }

Precision parse_precision(std::string_view text) {
  if (text == "mixed") return Precision::mixed;
  if (text == "model" || text == "float32" || text == "float64") return Precision::model;
  throw UsageError("unknown precision '" + std::string(text) + "' (known: mixed, float32, float64)");
}

Tensor master_copy(const Tensor& value, const std::string& name) {
  return cast(value, DataType::float32, name + ".master", MemoryCategory::optimizer_state);
}

void update_through_master(const model::Optimizer& optimizer, Tensor& value, Tensor& master, const Tensor& grad,
                           std::vector<Tensor>& state, std::int64_t step, double unscale, const std::string& name,
                           bool decay) {
  Tensor grad32 = cast(grad, DataType::float32, name + ".grad32", MemoryCategory::workspace);
  if (unscale != 1) scale_buffer(grad32.view(), unscale);
  optimizer.update(master, grad32, state, step, decay);
  copy_into(value, master);
}

NonfiniteGradients find_nonfinite(Communicator& job, const std::vector<BufferView>& gradients) {
  const double mine = static_cast<double>(count_nonfinite(gradients));
  // [non-finite elements, ranks that hold some], summed over the job.
  double found[2] = {mine, mine > 0 ? 1.0 : 0.0};
  job.all_reduce({found, 2, DataType::float64, MemorySpace::host}, {found, 2, DataType::float64, MemorySpace::host},
                 ReduceOp::sum);
  return {found[0], found[1], job.size()};
}

}  // namespace parity::parallel
