// Tensor parallelism for the GPT (Shoeybi et al. 2019) and sequence parallelism (Korthikanti et
// al. 2022): the model split over the grid's tp group, the part of the step that sums the
// sequence-sharded gradients, and the whole parameters put back together from the shards.
//
// With t ranks in the tp group every block's attention keeps a/t heads (QKV column-parallel,
// output projection row-parallel) and its MLP 4h/t columns (fc column-parallel, proj
// row-parallel); the token table is split by vocabulary rows and tied to the head; LayerNorms,
// position table and row-parallel biases are whole on every rank. Without sequence parallelism
// every rank computes the same whole activations between the parallel layers, so the whole
// parameters' gradients agree; with it each rank holds T/t tokens of every sequence there, and
// the gradients of the LayerNorms and position table are sums over the group.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "reference/model/model.hpp"
#include "reference/parallel/step.hpp"
#include "reference/parallel/tensor/layers.hpp"

namespace parity::parallel {

// Refuses, with one line (UsageError), a tensor-parallel size that does not divide the heads
// (and so the hidden and FFN sizes) or the vocabulary, sequence parallelism whose sequence the
// size does not divide, sequence parallelism without tensor parallelism (size 1) or with MoE
// layers, and a size that does not divide the experts' FFN.
void validate_tensor_parallel(const model::GptConfig& config, int size, bool sequence_parallel);

// The GPT of `config` split over tp's group (names and values are the single-device model's
// slices); its loss is the vocabulary-parallel cross-entropy. `ranges` selects top-level
// layers as build_gpt's do (a pipeline stage's); a stage with the head but not the embedding
// holds its own copy of a tied table's shard, under the table's name. MoE blocks keep their
// router whole and split every expert as the dense FFN (expert parallelism's exchange in `moe`).
std::unique_ptr<model::Model> build_tensor_parallel_gpt(const model::GptConfig& config, const TensorParallel& tp,
                                                        const std::vector<model::LayerRange>& ranges = {{}},
                                                        const model::MoeBuild& moe = {});

// The parameters whose gradient each rank computes from its sequence shard only, so that the
// whole gradient is their sum over the group (sequence parallelism): every LayerNorm's, and the
// position table. Empty without sequence parallelism.
std::vector<model::Parameter*> sequence_sharded_gradients(model::Model& model, const TensorParallel& tp);

// The site (TensorParallel::bytes_by_site) of those gradients' sums: a layer of its own in
// bytes_by_layer, beside the activations' collectives.
inline constexpr const char* kSequenceShardedGradientsSite = "sp_gradients";

// The tensor-parallel part of the step: with sequence parallelism, sums those gradients over
// the group right after the backward of the layer that owns them (when they are final, before
// a data-parallel synchronisation placed after this part may start reducing them: DDP's
// buckets start at that very hook), on every micro-batch when the data-parallel
// synchronisation takes each micro-batch's gradients (ZeRO-2/3), else on the last. It also
// lets the step count the group's traffic and time: the activations' collectives inside the
// passes are communication the rank waits for (exposed), not computation.
class TensorParallelSync : public GradientSync {
 public:
  TensorParallelSync(const TensorParallel& tp, model::Model& model, bool every_micro_batch);
  std::string describe() const override;
  std::vector<Communicator*> communicators() override { return {&tp_.group()}; }
  void on_layer(model::Layer& layer, model::HookPoint point, const model::PassContext& context) override;
  void begin_step() override { seen_ = tp_.seconds(); }
  void begin_backward(const MicroBatch& micro_batch) override { last_ = micro_batch.last; }
  void finish() override { take_collective_time(); }
  std::size_t summed_parameters() const;

 private:
  void take_collective_time();  // adds the group's collective time since the last call to exposed_seconds
  const TensorParallel& tp_;
  bool every_micro_batch_;
  double seen_ = 0;
  bool last_ = false;
  std::map<const model::Layer*, std::vector<model::Parameter*>> owned_;  // layer -> the summed parameters it owns
};

// The whole parameters (and optimizer state) from every rank's shards: each sharded parameter
// all-gathered over `group` and placed at its global elements; whole ones taken as they are.
// `local` lists `parameters` in order (OptimizerStep::gathered lists a model's). Collective over
// the group. Names of whole parameters whose copies differ between the ranks are added to
// `disagreeing` (they must be equal bit for bit).
ParameterValues gather_tensor_parallel(const ParameterValues& local, const std::vector<model::Parameter*>& parameters,
                                       Communicator& group, std::vector<std::string>* disagreeing);

}  // namespace parity::parallel
