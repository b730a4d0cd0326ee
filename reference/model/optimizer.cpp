// SGD and AdamW (see optimizer.hpp). Arithmetic is in the state's type: float64 state gives a
// float64 update whatever the parameters' storage, float32 state a float32 one.
#include "reference/model/optimizer.hpp"

#include <cmath>

#include "reference/core/error.hpp"
#include "reference/ops/cuda.hpp"

namespace parity::model {

namespace {
// Calls f(ValueType{}, StateType{}) for the supported combinations.
template <typename F> void visit_update(const char* who, const Tensor& value, const Tensor& grad, DataType state, F&& f) {
  if (value.dtype() != grad.dtype() || value.numel() != grad.numel())
    throw Error(std::string(who) + ": value " + value.describe() + " and gradient " + grad.describe() + " do not match");
  if (state != DataType::float32 && state != DataType::float64)
    throw Error(std::string(who) + ": optimizer state must be float32 or float64, not " + std::string(name_of(state)));
  visit_data_type(value.dtype(), [&](auto value_tag) {
    using V = decltype(value_tag);
    if constexpr (std::is_integral_v<V>) {
      throw Error(std::string(who) + ": parameter " + value.describe() + " is not floating-point");
    } else if (state == DataType::float64) {
      f(V{}, double{});
    } else {
      f(V{}, float{});
    }
  });
}

void check_state(const char* who, const Tensor& value, const std::vector<Tensor>& state, std::size_t count, DataType dtype) {
  if (state.size() != count)
    throw Error(std::string(who) + ": " + std::to_string(count) + " state tensors expected for " + value.describe());
  for (const Tensor& s : state)
    if (s.numel() != value.numel() || s.dtype() != dtype)
      throw Error(std::string(who) + ": state " + s.describe() + " does not match " + value.describe());
}
}  // namespace

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
    update(p->value, p->gradient(), state, steps_);
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

void Sgd::update(Tensor& value, const Tensor& grad, std::vector<Tensor>& state, std::int64_t) const {
  check_state("sgd", value, state, static_cast<std::size_t>(state_count()), state_dtype());
  if (ops::on_device(value))
    return ops::cuda::sgd_update(value, grad, state.empty() ? nullptr : &state[0], state_dtype(), config_.learning_rate,
                                 config_.momentum, config_.weight_decay);
  visit_update("sgd", value, grad, state_dtype(), [&](auto value_tag, auto state_tag) {
    using V = decltype(value_tag);
    using S = decltype(state_tag);
    V* p = value.data<V>();
    const V* g = grad.data<V>();
    S* buf = state.empty() ? nullptr : state[0].data<S>();
    const S lr = static_cast<S>(config_.learning_rate), mu = static_cast<S>(config_.momentum),
            wd = static_cast<S>(config_.weight_decay);
    for (std::int64_t i = 0; i < value.numel(); ++i) {
      const S pi = static_cast<S>(to_double(p[i]));
      S d = static_cast<S>(to_double(g[i])) + wd * pi;
      if (buf) d = buf[i] = mu * buf[i] + d;
      p[i] = from_double<V>(pi - lr * d);
    }
  });
}

AdamW::AdamW(AdamWConfig config, DataType state_dtype) : Optimizer(state_dtype), config_(config) {
  if (!(config.learning_rate > 0) || config.beta1 < 0 || config.beta1 >= 1 || config.beta2 < 0 || config.beta2 >= 1 ||
      !(config.epsilon > 0) || config.weight_decay < 0)
    throw UsageError("AdamW: learning rate and epsilon must be positive, betas in [0, 1), weight decay >= 0");
}

void AdamW::update(Tensor& value, const Tensor& grad, std::vector<Tensor>& state, std::int64_t step) const {
  check_state("adamw", value, state, 2, state_dtype());
  require(step >= 1, "adamw: steps count from 1");
  if (ops::on_device(value))
    return ops::cuda::adamw_update(value, grad, state[0], state[1], config_.learning_rate, config_.beta1, config_.beta2,
                                   config_.epsilon, config_.weight_decay, step);
  visit_update("adamw", value, grad, state_dtype(), [&](auto value_tag, auto state_tag) {
    using V = decltype(value_tag);
    using S = decltype(state_tag);
    V* p = value.data<V>();
    const V* g = grad.data<V>();
    S* m = state[0].data<S>();
    S* v = state[1].data<S>();
    const S lr = static_cast<S>(config_.learning_rate), b1 = static_cast<S>(config_.beta1),
            b2 = static_cast<S>(config_.beta2), eps = static_cast<S>(config_.epsilon),
            wd = static_cast<S>(config_.weight_decay);
    // 1 - beta is formed in float64 and rounded once: in the state type it would cancel
    // (1 - 0.999f errs by 1.3e-5 relative), an error the step would carry into v.
    const S one_minus_b1 = static_cast<S>(1 - config_.beta1), one_minus_b2 = static_cast<S>(1 - config_.beta2);
    const S correction1 = static_cast<S>(1 - std::pow(config_.beta1, static_cast<double>(step)));
    const S correction2 = static_cast<S>(1 - std::pow(config_.beta2, static_cast<double>(step)));
    for (std::int64_t i = 0; i < value.numel(); ++i) {
      S pi = static_cast<S>(to_double(p[i]));
      const S gi = static_cast<S>(to_double(g[i]));
      pi -= lr * wd * pi;
      m[i] = b1 * m[i] + one_minus_b1 * gi;
      v[i] = b2 * v[i] + one_minus_b2 * gi * gi;
      pi -= lr * (m[i] / correction1) / (std::sqrt(v[i] / correction2) + eps);
      p[i] = from_double<V>(pi);
    }
  });
}

double train_step(Model& model, Optimizer& optimizer, const Batch& batch, std::uint64_t step) {
  model.zero_grad();
  const double loss = model.forward_backward(batch, {step, 0, true});
  optimizer.step(model.parameters());
  return loss;
}

}  // namespace parity::model
