// Layer base: hooks, parameters and saved state per micro-batch (see layer.hpp).
#include "reference/model/layer.hpp"

#include <algorithm>

#include "reference/core/error.hpp"

namespace parity::model {

Tensor& Parameter::gradient() {
  if (!grad.defined()) grad = Tensor::zeros_like(value, name + ".grad", MemoryCategory::gradients);
  return grad;
}

Tensor Layer::forward(const Tensor& x, const PassContext& context) {
  run_hooks(HookPoint::before_forward, context);
  Tensor y = do_forward(x, context);
  run_hooks(HookPoint::after_forward, context);
  return y;
}

Tensor Layer::backward(const Tensor& dy, const PassContext& context) {
  run_hooks(HookPoint::before_backward, context);
  Tensor dx = do_backward(dy, context);
  if (!context.defer_weight_gradients) run_hooks(HookPoint::after_backward, context);
  return dx;
}

void Layer::weight_gradient(const PassContext& context, std::function<void()> work) {
  if (context.defer_weight_gradients)
    deferred_[{context.step, context.micro_batch}].push_back(std::move(work));
  else
    work();
}

void Layer::backward_weights(const PassContext& context) {
  // Children ran their backwards inside ours, after its own work began: theirs first, in the
  // reverse of the order they were added (the order of a backward through a forward chain).
  for (auto child = children_.rbegin(); child != children_.rend(); ++child) (*child)->backward_weights(context);
  const auto it = deferred_.find({context.step, context.micro_batch});
  if (it != deferred_.end()) {
    std::vector<std::function<void()>> work = std::move(it->second);
    deferred_.erase(it);
    for (auto& w : work) w();
  }
  run_hooks(HookPoint::after_backward, context);
}

std::size_t Layer::deferred_passes() const {
  std::size_t n = deferred_.size();
  for (const Layer* child : children_) n = std::max(n, child->deferred_passes());
  return n;
}

void Layer::run_hooks(HookPoint point, const PassContext& context) {
  // By index: a hook may add hooks.
  for (std::size_t i = 0; i < hooks_.size(); ++i) hooks_[i].second(*this, point, context);
}

HookId Layer::add_hook(Hook hook) {
  hooks_.emplace_back(next_hook_, std::move(hook));
  return next_hook_++;
}

void Layer::remove_hook(HookId id) {
  std::erase_if(hooks_, [id](const auto& h) { return h.first == id; });
}

std::vector<Parameter*> Layer::parameters() {
  std::vector<Parameter*> out;
  for (auto& p : parameters_) out.push_back(&p);
  for (Layer* child : children_) {
    auto more = child->parameters();
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

std::vector<Parameter*> Layer::own_parameters() {
  std::vector<Parameter*> out;
  for (auto& p : parameters_) out.push_back(&p);
  return out;
}

Parameter& Layer::add_parameter(const std::string& local_name, Shape shape, DataType dtype, Init init,
                                std::uint64_t seed) {
  return add_named_parameter(name_ + "." + local_name, std::move(shape), dtype, init, seed);
}

Parameter& Layer::add_named_parameter(std::string full_name, Shape shape, DataType dtype, Init init,
                                      std::uint64_t seed) {
  Parameter& p = parameters_.emplace_back();
  p.name = std::move(full_name);
  p.init = init;
  p.seed = seed;
  p.value = Tensor::empty(p.name, std::move(shape), dtype, MemoryCategory::parameters);
  initialize(p.value, init, seed);
  return p;
}

Parameter& Layer::add_sharded_parameter(std::string full_name, const ShardSpec& shard, DataType dtype, Init init,
                                        std::uint64_t seed) {
  Parameter& p = parameters_.emplace_back();
  p.name = std::move(full_name);
  p.init = init;
  p.seed = seed;
  p.shard = shard;
  p.value = Tensor::empty(p.name, shard.shape(), dtype, MemoryCategory::parameters);
  initialize_shard(p.value, init, seed, p.name, shard);
  return p;
}

void Layer::save(const PassContext& context, std::vector<Tensor> tensors) {
  if (!context.training) return;
  saved_[{context.step, context.micro_batch}] = std::move(tensors);
}

std::vector<Tensor> Layer::take_saved(const PassContext& context) {
  auto it = saved_.find({context.step, context.micro_batch});
  if (it == saved_.end())
    throw Error("layer " + name_ + ": backward of step " + std::to_string(context.step) + " micro-batch " +
                std::to_string(context.micro_batch) + " before its forward (or after its state was released)");
  std::vector<Tensor> tensors = std::move(it->second);
  saved_.erase(it);
  return tensors;
}

void Layer::add_auxiliary_loss(const PassContext& context, double value) {
  if (context.training) auxiliary_[{context.step, context.micro_batch}] += value;
}

double Layer::take_auxiliary_loss(const PassContext& context) {
  double sum = 0;
  if (auto it = auxiliary_.find({context.step, context.micro_batch}); it != auxiliary_.end()) {
    sum = it->second;
    auxiliary_.erase(it);
  }
  for (Layer* child : children_) sum += child->take_auxiliary_loss(context);
  return sum;
}

std::size_t Layer::pending_auxiliary_losses() const {
  std::size_t n = auxiliary_.size();
  for (const Layer* child : children_) n += child->pending_auxiliary_losses();
  return n;
}

void Layer::release_saved(const PassContext& context) {
  saved_.erase({context.step, context.micro_batch});
  auxiliary_.erase({context.step, context.micro_batch});
  deferred_.erase({context.step, context.micro_batch});
  for (Layer* child : children_) child->release_saved(context);
}

std::size_t Layer::saved_passes() const {
  std::size_t n = saved_.size();
  for (const Layer* child : children_) n = std::max(n, child->saved_passes());
  return n;
}

Tensor Layer::activation(const std::string& what, Shape shape, DataType dtype) const {
  return Tensor::empty(name_ + "." + what, std::move(shape), dtype, MemoryCategory::activations, space_);
}

Tensor Layer::activation_gradient(const std::string& what, Shape shape, DataType dtype) const {
  return Tensor::empty(name_ + "." + what, std::move(shape), dtype, MemoryCategory::workspace, space_);
}

void Layer::move_to(MemorySpace space) {
  require(saved_.empty(), "layer " + name_ + ": moved between memory spaces with a forward pass in flight");
  space_ = space;
  for (Parameter& p : parameters_) {
    if (p.value.space() != space) p.value = p.value.to(space, p.name, MemoryCategory::parameters);
    if (p.grad.defined() && p.grad.space() != space) p.grad = p.grad.to(space, p.name + ".grad", MemoryCategory::gradients);
  }
}

std::vector<Layer*> all_layers(const std::vector<Layer*>& roots) {
  std::vector<Layer*> out;
  for (Layer* layer : roots) {
    out.push_back(layer);
    auto below = all_layers(layer->children());
    out.insert(out.end(), below.begin(), below.end());
  }
  return out;
}

}  // namespace parity::model
