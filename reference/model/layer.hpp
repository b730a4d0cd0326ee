// Layers: the unit every technique works on. A layer has parameters (value and gradient, each
// charged to its memory category), a forward that saves what its backward needs per micro-batch
// (so a pipeline stage can hold several micro-batches in flight), and hooks before and after
// its forward and backward: data parallelism starts a bucket's all-reduce after a backward,
// ZeRO-3 gathers parameters before a forward, checkpointing drops and re-runs forwards.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "reference/tensor/random.hpp"
#include "reference/tensor/tensor.hpp"

namespace parity::model {

// A trainable tensor. `value` is charged to parameters, `grad` (made on first use) to gradients.
// `init` and `seed` say how the whole value is made (initialize_shard(t, init, seed, name, spec)),
// so a rank can make any shard of it. ZeRO-3 may replace `value` by a shard between passes.
struct Parameter {
  std::string name;
  Tensor value;
  Tensor grad;
  Init init;
  std::uint64_t seed = 0;
  // Which part of the whole tensor `name` this rank holds (tensor parallelism); none: all of it.
  std::optional<ShardSpec> shard;
  // The gradient, allocated as zeros on first use.
  Tensor& gradient();
};

// Which pass a forward or backward belongs to. `micro_batch` keys the state a layer saves for
// its backward (several may be in flight on a pipeline stage). `first_row` is the index, in the
// step's global batch, of this pass's first sample: dropout masks are a pure function of
// (seed, layer, step, global element index), so a data-parallel shard or a micro-batch draws
// exactly the slice of the whole batch's mask, and a re-run forward replays it. Evaluation
// passes (training = false) save nothing and apply no dropout.
//
// `defer_weight_gradients` splits a backward in two, as zero-bubble pipeline schedules do: the
// backward computes input gradients only (I) and each layer keeps its weight-gradient work,
// with the tensors it reads, until backward_weights() runs it (W).
struct PassContext {
  std::uint64_t step = 0;
  int micro_batch = 0;
  bool training = true;
  std::int64_t first_row = 0;
  bool defer_weight_gradients = false;
  // Rows of the step's global batch (0: this pass's rows are the whole batch). A loss a layer
  // adds itself (the MoE balancing losses) weighs this pass's rows r by r / global_rows, as the
  // model's loss does through Batch::normalizer, so that passes add up to the whole batch's.
  std::int64_t global_rows = 0;
  // A forward that re-runs one whose saved state was dropped (activation checkpointing): the
  // same values as the first, so layers keep state for backward but record no statistics twice.
  bool recompute = false;
  // Added to every dropout layer's seed: 0 in every real pass. Only the checkpoint fault that
  // recomputes with a fresh seed sets it, to show the conformance cases catch that.
  std::uint64_t dropout_seed_offset = 0;
  // What the step's loss is multiplied by (loss scaling, parallel/precision/loss_scaler.hpp): a loss a layer adds
  // itself is multiplied by it too, as the model's loss is through Batch::normalizer.
  double loss_scale = 1;
};

class Layer;
enum class HookPoint { before_forward, after_forward, before_backward, after_backward };
using Hook = std::function<void(Layer& layer, HookPoint point, const PassContext& context)>;
using HookId = std::uint64_t;

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  virtual const char* kind() const = 0;

  // Run the layer: hooks before and after, the work in between. A backward that defers its
  // weight gradients runs the after_backward hooks in backward_weights() instead, since only
  // then are the layer's gradients final.
  Tensor forward(const Tensor& x, const PassContext& context);
  Tensor backward(const Tensor& dy, const PassContext& context);
  // The weight-gradient work that backward(dy, context) deferred, for this layer and its
  // children (children first, latest first, as a whole backward would); then the hooks.
  void backward_weights(const PassContext& context);
  // Passes whose weight-gradient work waits in this layer or its children.
  std::size_t deferred_passes() const;

  // This layer's own parameters, then its children's, depth first (what an optimizer updates).
  std::vector<Parameter*> parameters();
  // Only the parameters this layer holds itself (its gradients are final after its backward).
  std::vector<Parameter*> own_parameters();
  // The parameters this layer's forward reads that another layer owns (a tied LM head's token
  // table): hooks that gather or free parameters around a forward need these too.
  std::vector<Parameter*> borrowed_parameters() { return borrowed_; }
  std::vector<Layer*> children() { return children_; }
  // Hooks run in the order added; whoever adds one removes it when it goes away.
  HookId add_hook(Hook hook);
  void remove_hook(HookId id);
  std::size_t hook_count() const { return hooks_.size(); }
  // The losses this layer and its children added to the model's loss in the forward of
  // `context` (Model::take_auxiliary_loss sums them over the model), then forgotten.
  double take_auxiliary_loss(const PassContext& context);
  // Forwards whose auxiliary losses this layer and its children still hold (none once every
  // training forward's were taken: a recomputed forward's are taken and dropped).
  std::size_t pending_auxiliary_losses() const;
  // Drops what a forward saved for `context` without running backward (checkpointing).
  void release_saved(const PassContext& context);
  // Micro-batches whose forward state this layer (and its children) hold.
  std::size_t saved_passes() const;
  // Moves this layer's own parameters (and gradients) to `space`; activations are made there
  // from now on. Model::to() calls it for every layer.
  void move_to(MemorySpace space);
  MemorySpace space() const { return space_; }

 protected:
  virtual Tensor do_forward(const Tensor& x, const PassContext& context) = 0;
  virtual Tensor do_backward(const Tensor& dy, const PassContext& context) = 0;

  // A parameter named "<layer>.<local_name>", initialised whole from (seed, name).
  Parameter& add_parameter(const std::string& local_name, Shape shape, DataType dtype, Init init, std::uint64_t seed);
  // The same under a full name of its own (a stage's copy of a tied embedding table).
  Parameter& add_named_parameter(std::string full_name, Shape shape, DataType dtype, Init init, std::uint64_t seed);
  // The part `shard` of the whole parameter `full_name`, initialised as that slice of the whole
  // (initialize_shard): the same values as initialising the whole and splitting it.
  Parameter& add_sharded_parameter(std::string full_name, const ShardSpec& shard, DataType dtype, Init init,
                                   std::uint64_t seed);
  void borrow_parameter(Parameter& p) { borrowed_.push_back(&p); }
  // Makes `child` part of this layer: its parameters are listed and its saved state released with ours.
  template <typename L> L& add_child(std::unique_ptr<L> child) {
    L& ref = *child;
    owned_children_.push_back(std::move(child));
    children_.push_back(&ref);
    return ref;
  }
  // Keeps tensors for this pass's backward; nothing is kept in an evaluation pass.
  void save(const PassContext& context, std::vector<Tensor> tensors);
  std::vector<Tensor> take_saved(const PassContext& context);
  // Weight-gradient work of a backward: run now, or kept for backward_weights() when the
  // context defers it. `work` captures the tensors it reads and fetches Parameter::gradient()
  // when it runs (a gradient may be rebound between passes).
  void weight_gradient(const PassContext& context, std::function<void()> work);
  // A loss of this layer's own to add to the model's loss for this training pass (the MoE
  // balancing losses); its gradient is this layer's business in backward.
  void add_auxiliary_loss(const PassContext& context, double value);
  // A new activation tensor named after this layer.
  Tensor activation(const std::string& what, Shape shape, DataType dtype) const;
  // A gradient with respect to an activation, made in backward: charged to workspace (short-
  // lived temporaries), so that the activations category holds what forward passes made.
  Tensor activation_gradient(const std::string& what, Shape shape, DataType dtype) const;

 private:
  void run_hooks(HookPoint point, const PassContext& context);
  std::string name_;
  std::deque<Parameter> parameters_;  // deque: stable addresses
  std::vector<Parameter*> borrowed_;
  std::vector<std::unique_ptr<Layer>> owned_children_;
  std::vector<Layer*> children_;
  std::vector<std::pair<HookId, Hook>> hooks_;
  HookId next_hook_ = 1;
  std::map<std::pair<std::uint64_t, int>, std::vector<Tensor>> saved_;
  std::map<std::pair<std::uint64_t, int>, std::vector<std::function<void()>>> deferred_;
  std::map<std::pair<std::uint64_t, int>, double> auxiliary_;
  MemorySpace space_ = MemorySpace::host;
};

// Every layer of a tree, parents before children.
std::vector<Layer*> all_layers(const std::vector<Layer*>& roots);

}  // namespace parity::model
