// Models: a sequence of top-level layers (the unit pipeline stages split, ZeRO-3 gathers and
// checkpointing wraps) plus a loss. Built from a config and a seed; every parameter's values
// are a pure function of (seed, name, index), so a model built on any rank, or any range of its
// layers, holds the same values as the whole model built on one device.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "reference/model/layers.hpp"
#include "reference/model/moe.hpp"
#include "reference/theory/model_config.hpp"

namespace parity::model {

// A loss: the batch's loss from the model's output and, when asked, its gradient with respect
// to the output. The sum over the rows given is divided by `normalizer` (the global count, so
// that shards add up to the whole batch's mean).
class Loss {
 public:
  virtual ~Loss() = default;
  virtual const char* name() const = 0;
  virtual double compute(const Tensor& output, const Tensor& targets, double normalizer, Tensor* doutput) const = 0;
};
// Cross-entropy of logits [..., V] against integer targets [...].
class CrossEntropyLoss : public Loss {
 public:
  const char* name() const override { return "cross_entropy"; }
  double compute(const Tensor& output, const Tensor& targets, double normalizer, Tensor* doutput) const override;
};
// Squared error summed over elements.
class MeanSquaredErrorLoss : public Loss {
 public:
  const char* name() const override { return "mean_squared_error"; }
  double compute(const Tensor& output, const Tensor& targets, double normalizer, Tensor* doutput) const override;
};

// The whole global batch, or this rank's rows of it.
struct Batch {
  Tensor inputs;   // GPT: tokens [B, T] int32; MLP: [B, in]
  Tensor targets;  // GPT: next tokens [B, T] int32; MLP: [B, out]
  // Loss = sum over the rows here / normalizer. The global element count makes shards add up to
  // the whole batch's mean (data parallelism with uneven shards).
  double normalizer = 1;
  // The same batch with its tensors in `space` (batches are made on the host).
  Batch to(MemorySpace space) const;
};

class Model {
 public:
  Model(std::string description, std::unique_ptr<Loss> loss, DataType dtype)
      : description_(std::move(description)), loss_(std::move(loss)), dtype_(dtype) {}
  Layer& add(std::unique_ptr<Layer> layer);

  Tensor forward(const Tensor& x, const PassContext& context);
  // Backward from the gradient of the output; returns the input gradient (undefined for tokens).
  Tensor backward(const Tensor& dy, const PassContext& context);
  // Loss of `output` against `targets`; when doutput is given it receives d loss / d output.
  double loss(const Tensor& output, const Tensor& targets, double normalizer, Tensor* doutput) const;
  // The losses the layers added themselves in the forward of `context` (MoE balancing), summed;
  // a schedule adds them to the loss of the output once per pass.
  double take_auxiliary_loss(const PassContext& context);
  // forward, loss, backward of one (micro-)batch; gradients accumulate. Returns the loss,
  // the layers' own losses included.
  double forward_backward(const Batch& batch, const PassContext& context);

  // Replaces top-level layer `index` by what `wrapper` makes of it (activation checkpointing
  // wraps blocks): the count and order of top-level layers stay, and the wrapped layer lives on
  // inside the wrapper (pointers to it stay valid). Before a trainer hooks the model's layers.
  void wrap(std::size_t index, const std::function<std::unique_ptr<Layer>(std::unique_ptr<Layer>)>& wrapper);
  std::vector<Layer*> layers() const;
  std::vector<Parameter*> parameters() const;
  std::int64_t parameter_count() const;
  void zero_grad();
  // Moves every parameter to `space` (initialised on the host, so a model on a GPU starts from
  // the same values) and makes activations there; call before an optimizer or trainer holds
  // its tensors.
  void to(MemorySpace space);
  MemorySpace space() const { return space_; }
  const std::string& description() const { return description_; }
  DataType dtype() const { return dtype_; }

 private:
  std::string description_;
  std::unique_ptr<Loss> loss_;
  DataType dtype_;
  MemorySpace space_ = MemorySpace::host;
  std::vector<std::unique_ptr<Layer>> layers_;
};

// Layers [begin, end) of a model with `total` top-level layers (a pipeline stage); {0, -1} all.
struct LayerRange {
  int begin = 0;
  int end = -1;
};

// The top-level layer indices the ranges select, in order; throws UsageError naming `what` for
// a range outside [0, total) or ranges out of order or overlapping.
std::vector<int> layer_indices(const std::vector<LayerRange>& ranges, int total, const std::string& what);

// GPT-style decoder (GptConfig, reference/theory/model_config.hpp). Top-level layers:
// "embedding", "blocks.0" .. "blocks.L-1", "ln_f", "lm_head" (gpt_top_level_layers: L + 3).
inline int gpt_top_level_layers(const GptConfig& config) { return config.layers + 3; }
// Blocks listed in config.moe hold a MixtureOfExperts as "blocks.i.mlp".
std::unique_ptr<Model> build_gpt(const GptConfig& config, LayerRange range = {});
// How the MoE layers are built: the exchange of block i's layer (null or no function: every
// expert on this rank; expert parallelism gives one per layer), and deliberate faults.
struct MoeBuild {
  std::function<std::shared_ptr<ExpertExchange>(int block)> exchange;
  MoeFaults faults;
};
// The MoE layer of block `block` (named "blocks.<block>.mlp") with `attention`, in a
// TransformerBlock: the exchange and faults of `moe`, experts made by `expert` (empty:
// FeedForward).
std::unique_ptr<Layer> gpt_moe_block(const GptConfig& config, int block, std::unique_ptr<Layer> attention,
                                     const MoeBuild& moe, const ExpertBuilder& expert = {});
// Several ranges in increasing order (the chunks a rank holds in an interleaved or V-shaped
// pipeline), their layers one after another; a tied head shares the table when the embedding is
// among them.
std::unique_ptr<Model> build_gpt(const GptConfig& config, const std::vector<LayerRange>& ranges,
                                 const MoeBuild& moe = {});
// The model's MoE layers, in order.
std::vector<MixtureOfExperts*> moe_layers(const Model& model);

// Plain MLP stack (MlpConfig) with a mean-squared-error loss.
std::unique_ptr<Model> build_mlp(const MlpConfig& config, LayerRange range = {});

// Synthetic tasks, rows [first_row, first_row + rows) of step `step`'s global batch: every value
// a pure function of (seed, step, global row), so ranks make their shards without communication.
// GPT: each sequence follows a fixed random permutation of the vocabulary from a random start
// token; targets are the next tokens (learnable: loss falls from ln V towards 0).
Batch gpt_batch(const GptConfig& config, std::uint64_t step, std::int64_t first_row, std::int64_t rows,
                std::int64_t global_rows);
// MLP: inputs N(0, 1), targets = tanh(inputs W_teacher) with a fixed random teacher.
Batch mlp_batch(const MlpConfig& config, std::uint64_t step, std::int64_t first_row, std::int64_t rows,
                std::int64_t global_rows);

}  // namespace parity::model
