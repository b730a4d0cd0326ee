// SGD and AdamW (see optimizer.hpp): the state each parameter keeps, and the element updates,
// which are ops (ops::sgd_update, ops::adamw_update) on either device. Arithmetic is in the
// state's type: float64 state gives a float64 update whatever the parameters' storage, float32
// state a float32 one.
#include "reference/model/optimizer.hpp"

#include "reference/core/error.hpp"
#include "reference/ops/ops.hpp"

namespace parity::model {

namespace {
void check_state(const char* who, const Tensor& value, const std::vector<Tensor>& state, std::size_t count, DataType dtype) {
  if (state.size() != count)
    throw Error(std::string(who) + ": " + std::to_string(count) + " state tensors expected for " + value.describe());
  for (const Tensor& s : state)
    if (s.numel() != value.numel() || s.dtype() != dtype)
      throw Error(std::string(who) + ": state " + s.describe() + " does not match " + value.describe());
}
}  // namespace

bool decays(DecayGroups groups, const std::string& parameter) {
  if (groups == DecayGroups::all) return true;
  const auto dot = parameter.rfind('.');
  const std::string last = dot == std::string::npos ? parameter : parameter.substr(dot + 1);
  return !(last == "bias" || last == "gamma" || last == "beta" || last == "wte" || last == "wpe");
}

const char* name_of(DecayGroups groups) { return groups == DecayGroups::all ? "all" : "matrices"; }

DecayGroups parse_decay_groups(const std::string& text) {
  if (text == "all") return DecayGroups::all;
  if (text == "matrices") return DecayGroups::matrices;
  throw UsageError("unknown weight-decay groups '" + text + "' (all, matrices)");
}

Optimizer::Optimizer(DataType state_dtype) : state_dtype_(state_dtype) {
  if (state_dtype != DataType::float32 && state_dtype != DataType::float64)
    throw UsageError("optimizer state type must be float32 or float64, not " + std::string(name_of(state_dtype)));
}

void Optimizer::step(const std::vector<Parameter*>& parameters) {
  ++steps_;
  for (Parameter* p : parameters) {
    auto& state = state_[p->name];
    if (state.empty())
      for (int i = 0; i < state_count(); ++i)
        state.push_back(Tensor::zeros(p->name + "." + name() + ".state" + std::to_string(i), p->value.shape(),
                                      state_dtype_, MemoryCategory::optimizer_state, p->value.space()));
    update(p->value, p->gradient(), state, steps_, decays(p->name));
  }
}

const std::vector<Tensor>& Optimizer::state_of(const std::string& parameter) const {
  static const std::vector<Tensor> none;
  auto it = state_.find(parameter);
  return it == state_.end() ? none : it->second;
}

Sgd::Sgd(SgdConfig config, DataType state_dtype) : Optimizer(state_dtype), config_(config) {
  if (!(config.learning_rate > 0) || config.momentum < 0 || config.momentum >= 1 || config.weight_decay < 0)
    throw UsageError("SGD: learning rate must be positive, momentum in [0, 1), weight decay >= 0");
}

void Sgd::update(Tensor& value, const Tensor& grad, std::vector<Tensor>& state, std::int64_t, bool decay) const {
  check_state("sgd", value, state, static_cast<std::size_t>(state_count()), state_dtype());
  ops::sgd_update(value, grad, state.empty() ? nullptr : &state[0], state_dtype(), config_.learning_rate,
                  config_.momentum, decay ? config_.weight_decay : 0.0);
}

AdamW::AdamW(AdamWConfig config, DataType state_dtype) : Optimizer(state_dtype), config_(config) {
  if (!(config.learning_rate > 0) || config.beta1 < 0 || config.beta1 >= 1 || config.beta2 < 0 || config.beta2 >= 1 ||
      !(config.epsilon > 0) || config.weight_decay < 0)
    throw UsageError("AdamW: learning rate and epsilon must be positive, betas in [0, 1), weight decay >= 0");
}

void AdamW::update(Tensor& value, const Tensor& grad, std::vector<Tensor>& state, std::int64_t step,
                   bool decay) const {
  check_state("adamw", value, state, 2, state_dtype());
  ops::adamw_update(value, grad, state[0], state[1], config_.learning_rate, config_.beta1, config_.beta2,
                    config_.epsilon, decay ? config_.weight_decay : 0.0, step);
}

double train_step(Model& model, Optimizer& optimizer, const Batch& batch, std::uint64_t step) {
  model.zero_grad();
  const double loss = model.forward_backward(batch, {step, 0, true});
  optimizer.step(model.parameters());
  return loss;
}

}  // namespace parity::model
