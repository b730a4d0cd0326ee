// The fast GPT step (reference/fast/gpt.hpp) as one data-parallel job over a communicator: each
// rank steps on its own sequences and the gradients are summed every step, layer by layer as
// backward finishes them. Shared by `bench model --path fast` and `bench scaling --path fast`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "reference/comm/communicator.hpp"
#include "reference/fast/gpt.hpp"
#include "reference/theory/model_config.hpp"

namespace parity::cli {

fast::Storage fast_storage_of(DataType dtype);  // bfloat16 or float16
fast::GptShape fast_shape_of(const model::GptConfig& config, std::int64_t batch);

// The fast GPT's gradient sums over `group`. NCCL queues each sum on the step's side stream
// (Communicator::all_reduce_on_stream), so it overlaps the rest of backward when `overlap`; MPI
// sums each bucket through host memory as it comes, the step waiting for it. Counts the bytes
// it hands to the library's all-reduce (the library's own traffic is not observable here).
class CommunicatorSync final : public fast::GradientSync {
 public:
  CommunicatorSync(Communicator& group, DataType storage, bool overlap);
  int replicas() const override { return group_.size(); }
  bool overlaps() const override { return overlap_; }
  void sum(void* data, std::int64_t count, bool float32, void* stream) override;
  std::uint64_t bytes_summed() const { return bytes_; }
  int sums() const { return sums_; }

 private:
  Communicator& group_;
  DataType storage_;
  bool overlap_;
  std::uint64_t bytes_ = 0;
  int sums_ = 0;
};

// `warmup + steps` steps of a fresh fast GPT of `config` on every rank of `group` at once, each
// rank on `batch` sequences of its own (the step's global batch: batch x group.size()), then one
// more step with profiling on (its events cost a little, so it is not among the timed ones).
// The gradients are summed over the group where it has several ranks, or over one rank where
// that costs nothing (NCCL), so that the same code runs.
struct FastSteps {
  std::vector<double> seconds;  // the timed steps, host wall time (each waits for the device once)
  double last_loss = 0;
  fast::StepParts parts;        // of the profiled step
  bool data_parallel = false;   // the gradients were summed
  int sums_per_step = 0;        // all-reduces a step (the gradient buckets and the token table)
  std::uint64_t bytes_per_step = 0;  // bytes handed to them a step
};
FastSteps run_fast_steps(Communicator& group, const model::GptConfig& config, std::int64_t batch, DataType dtype,
                         bool overlap, int warmup, int steps, const std::function<void(int step)>& on_step = {});

}  // namespace parity::cli
