// Optimizers: SGD with momentum and AdamW, with float32 or float64 state. The element update is
// exposed on its own (update()) so that ZeRO can run it on the shard of parameters, gradients
// and state a rank owns; step() runs it on whole parameters with state the optimizer keeps.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "reference/model/model.hpp"

namespace parity::model {

// Which parameters weight decay applies to: torch.optim's parameter groups as GPT training sets
// them up.
enum class DecayGroups {
  all,       // every parameter
  matrices,  // the weight matrices only: none on biases, LayerNorm gains and shifts, and the
             // token and position tables (GPT-2's and Megatron's groups)
};
// Whether weight decay applies to the parameter (named as parity's models name them: a Linear's
// "<layer>.weight" and ".bias", a LayerNorm's ".gamma" and ".beta", the embedding's ".wte" and
// ".wpe") under `groups`.
bool decays(DecayGroups groups, const std::string& parameter);
// "all" or "matrices"; parse_decay_groups refuses anything else (UsageError).
const char* name_of(DecayGroups groups);
DecayGroups parse_decay_groups(const std::string& text);

class Optimizer {
 public:
  explicit Optimizer(DataType state_dtype);
  virtual ~Optimizer() = default;
  virtual const char* name() const = 0;
  // State tensors per parameter (SGD: 1 with momentum, else 0; AdamW: 2).
  virtual int state_count() const = 0;
  // The state tensors' names, as PyTorch's optimizers name them in a state_dict.
  virtual std::vector<std::string> state_names() const = 0;
  // Updates `value` from `grad` and `state` (each with value's element count; state in
  // state_dtype) at optimizer step `step` (1-based), with weight decay when `decay` (the
  // elements' group: decays(groups(), name)).
  virtual void update(Tensor& value, const Tensor& grad, std::vector<Tensor>& state, std::int64_t step,
                      bool decay) const = 0;
  // Which parameters weight decay applies to, and whether it applies to this one.
  virtual DecayGroups groups() const { return DecayGroups::all; }
  bool decays(const std::string& parameter) const { return model::decays(groups(), parameter); }

  // One step on whole parameters; state is made (zeros, charged to optimizer_state) on first use.
  void step(const std::vector<Parameter*>& parameters);
  std::int64_t steps_taken() const { return steps_; }
  DataType state_dtype() const { return state_dtype_; }
  // The state of one parameter (empty before the first step).
  const std::vector<Tensor>& state_of(const std::string& parameter) const;

 private:
  DataType state_dtype_;
  std::int64_t steps_ = 0;
  std::map<std::string, std::vector<Tensor>> state_;
};

struct SgdConfig {
  double learning_rate = 0.01;
  double momentum = 0;
  double weight_decay = 0;  // added to the gradient (L2), as torch.optim.SGD
  DecayGroups decay_groups = DecayGroups::all;
};
// buf = momentum * buf + (g + wd p); p -= lr * buf (plain SGD when momentum = 0).
class Sgd : public Optimizer {
 public:
  Sgd(SgdConfig config, DataType state_dtype);
  const char* name() const override { return "sgd"; }
  int state_count() const override { return config_.momentum != 0 ? 1 : 0; }
  std::vector<std::string> state_names() const override {
    return state_count() == 1 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{};
  }
  void update(Tensor& value, const Tensor& grad, std::vector<Tensor>& state, std::int64_t step,
              bool decay) const override;
  DecayGroups groups() const override { return config_.decay_groups; }

 private:
  SgdConfig config_;
};

struct AdamWConfig {
  double learning_rate = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.01;
  DecayGroups decay_groups = DecayGroups::all;
};
// Loshchilov and Hutter (2019), decoupled weight decay with bias correction:
// p -= lr wd p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
class AdamW : public Optimizer {
 public:
  AdamW(AdamWConfig config, DataType state_dtype);
  const char* name() const override { return "adamw"; }
  int state_count() const override { return 2; }
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  void update(Tensor& value, const Tensor& grad, std::vector<Tensor>& state, std::int64_t step,
              bool decay) const override;
  DecayGroups groups() const override { return config_.decay_groups; }
  const AdamWConfig& config() const { return config_; }

 private:
  AdamWConfig config_;
};

// The single-device training step every technique is compared with: zero the gradients,
// forward, loss, backward, one optimizer step. Returns the loss.
double train_step(Model& model, Optimizer& optimizer, const Batch& batch, std::uint64_t step);

}  // namespace parity::model
