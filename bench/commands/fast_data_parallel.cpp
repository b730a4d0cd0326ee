// The fast GPT step as one data-parallel job (fast_data_parallel.hpp).
#include "bench/commands/fast_data_parallel.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include "reference/core/error.hpp"
#include "reference/model/model.hpp"

namespace parity::cli {
namespace {

std::vector<std::int32_t> ints(const Tensor& t) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(t.numel()));
  std::copy(t.data<std::int32_t>(), t.data<std::int32_t>() + t.numel(), v.begin());
  return v;
}

}  // namespace

fast::Storage fast_storage_of(DataType dtype) {
  return dtype == DataType::float16 ? fast::Storage::float16 : fast::Storage::bfloat16;
}

fast::GptShape fast_shape_of(const model::GptConfig& c, std::int64_t batch) {
  return {c.vocabulary, c.layers, c.hidden, c.heads, c.sequence, batch};
}

CommunicatorSync::CommunicatorSync(Communicator& group, DataType storage, bool overlap)
    : group_(group), storage_(storage), overlap_(overlap && group.backend() == "nccl") {}

void CommunicatorSync::sum(void* data, std::int64_t count, bool float32, void* stream) {
  const BufferView buffer{data, static_cast<std::size_t>(count), float32 ? DataType::float32 : storage_, MemorySpace::cuda};
  bytes_ += buffer.bytes();
  ++sums_;
  if (overlap_) {
    if (!group_.all_reduce_on_stream(buffer, stream))
      throw Error("the " + std::string(group_.backend()) + " backend cannot queue a sum on a stream");
    return;
  }
  group_.all_reduce(buffer, buffer, ReduceOp::sum);
}

FastSteps run_fast_steps(Communicator& group, const model::GptConfig& c, std::int64_t batch, DataType dtype, bool overlap,
                         int warmup, int steps, const std::function<void(int)>& on_step) {
  using Clock = std::chrono::steady_clock;
  FastSteps out;
  out.data_parallel = group.size() > 1 || group.backend() == "nccl";
  fast::Gpt gpt(fast_shape_of(c, batch), fast_storage_of(dtype), fast::AdamWHyper{}, c.seed);
  CommunicatorSync sync(group, dtype, overlap);
  if (out.data_parallel) gpt.set_gradient_sync(&sync);
  const std::int64_t global = batch * group.size(), first = batch * group.rank();
  // A step's tokens, made on the host before its clock starts.
  const auto tokens_of = [&](int step) {
    const model::Batch b = model::gpt_batch(c, static_cast<std::uint64_t>(step), first, batch, global);
    return std::pair{ints(b.inputs), ints(b.targets)};
  };
  group.barrier();  // replicas start together
  for (int step = 0; step < warmup + steps; ++step) {
    const auto [tokens, targets] = tokens_of(step);
    const std::uint64_t bytes_before = sync.bytes_summed();
    const int sums_before = sync.sums();
    const auto t0 = Clock::now();
    out.last_loss = gpt.step(tokens.data(), targets.data()).loss;  // waits for the device once, at its end
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    out.bytes_per_step = sync.bytes_summed() - bytes_before;
    out.sums_per_step = sync.sums() - sums_before;
    if (step >= warmup) out.seconds.push_back(t);
    if (on_step) on_step(step);
  }
  gpt.set_profiling(true);
  const auto [tokens, targets] = tokens_of(warmup + steps);
  gpt.step(tokens.data(), targets.data());
  out.parts = gpt.last_parts();
  return out;
}

}  // namespace parity::cli
