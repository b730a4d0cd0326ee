// Synchronous data parallelism's gradient synchronisation (PyTorch DDP): every rank holds the
// model and takes its rows of the global batch (parallel/batches.hpp); gradients live in buckets
// of about bucket_bytes, filled in backward order (parameters in reverse model order), and a
// bucket's all-reduce is queued on a communication stream the moment its last gradient is
// final (after the backward of every layer that reads the parameter: a tied table waits for
// the embedding's backward) of every micro-batch of the step (earlier micro-batches
// accumulate locally, DDP's no_sync; a pipeline's stages may finish theirs in any order). With a replicated optimizer step this is plain data
// parallelism; ZeRO stages 1-3 are in zero/zero.hpp.
#pragma once

#include <map>
#include <vector>

#include "reference/parallel/data/config.hpp"
#include "reference/parallel/step.hpp"

namespace parity::parallel {

class BucketedAllReduce : public GradientSync {
 public:
  // Points every parameter's gradient into its bucket (call before the optimizer step holds
  // the gradients). `group`: the data-parallel ranks.
  BucketedAllReduce(Communicator& group, model::Model& model, const DataParallelConfig& config);
  // Only `parameters` (in model order), the others left to another part (expert parallelism's
  // experts, reduced over fewer ranks).
  BucketedAllReduce(Communicator& group, model::Model& model, const DataParallelConfig& config,
                    std::vector<model::Parameter*> parameters);
  std::string describe() const override;
  std::vector<CommStream*> streams() override { return {&stream_}; }
  void on_layer(model::Layer& layer, model::HookPoint point, const model::PassContext& context) override;
  void begin_step() override;
  void finish() override;
  // Parameters per bucket, in the order the buckets are reduced.
  std::vector<std::vector<std::string>> bucket_parameters() const;

 private:
  struct Bucket {
    Tensor grads;  // flat; parameters' gradients are segments of it
    std::vector<model::Parameter*> parameters;
    int pending = 0;
    bool launched = false;
  };
  void parameter_final(model::Parameter* p);
  void launch(Bucket& bucket);
  DataParallelConfig config_;
  CommStream stream_;
  const AlgorithmDescriptor* algorithm_;
  std::vector<Bucket> buckets_;
  std::map<model::Parameter*, std::size_t> bucket_of_;
  std::map<model::Parameter*, int> users_;  // layers whose backward produces the gradient
  std::map<model::Parameter*, int> pending_;  // backwards still to run this step
};

}  // namespace parity::parallel
