// The mixture-of-experts feed-forward layer (Shazeer et al. 2017; GShard; Switch): a router
// (linear h -> E, softmax in float32, or float64 for float64 models), the routing decisions of
// ops/routing.hpp, E expert FFNs (Linear h -> f, GeLU, Linear f -> h), an optional shared
// expert every token goes through ungated, and the residual dropout of the dense FFN it
// replaces (named "<name>.dropout", so the masks are the dense layer's).
//
// For a pass of N tokens (the routing group):
//   probs = softmax(x Wg); routing = route(probs); rows = gather(x) by assignment;
//   expert e runs on its rows (expert-major, in admission order); y = sum over a token's
//   assignments of gate * expert row (+ shared(x)); a token no expert took gets 0, and the
//   residual connection around the layer carries it unchanged.
// The balancing losses (Switch's, the z-loss) are added to the model's loss, weighted by this
// pass's rows over the global batch's (PassContext::global_rows), and their gradients enter
// the router's in backward.
//
// Where the experts live is the exchange's business (parallel/expert/): without one, all E
// experts are on this rank; with one, the rank holds experts [rank E/ep, (rank+1) E/ep) and the
// exchange carries rows to the rank of their expert and the outputs back. An expert with no
// rows still runs its forward and backward, on one row of zeros whose output is discarded and
// whose gradient is zero: the hooks around a layer's passes (ZeRO-3's gathers, DDP's buckets)
// are collective, so every rank must run every pass, and the gradients are exactly unchanged.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "reference/model/layers.hpp"
#include "reference/ops/routing.hpp"
#include "reference/theory/model_config.hpp"

namespace parity::model {

// Rows an exchange delivered to this rank's experts: expert-major over the local experts,
// and each local expert's row count.
struct ExpertRows {
  Tensor rows;                        // [R, C]; undefined when R = 0
  std::vector<std::int64_t> per_expert;
};

// Carries rows between the ranks that hold the experts (expert parallelism). The layout of a
// pass (who sends how many rows to whom) is fixed by its dispatch and kept until release.
class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  virtual int ranks() const = 0;  // ep: the experts are spread over this many ranks
  virtual int rank() const = 0;
  // Forward: rows [A, C] expert-major over all E experts (per_expert [E] rows each) to the ranks
  // holding them; returns what this rank's experts received. Keeps the layout for the pass.
  virtual ExpertRows dispatch(const Tensor& rows, const std::vector<std::int64_t>& per_expert,
                              const PassContext& context) = 0;
  // Forward: the local experts' outputs (laid out as dispatch returned) back to their tokens'
  // ranks, in the order dispatch took them: [A, C].
  virtual Tensor combine(const Tensor& rows, const PassContext& context) = 0;
  // Backward: the gradient of combine's output [A, C] to the experts (combine's adjoint, the
  // same transfer as dispatch), and of dispatch's output back (dispatch's adjoint); the last
  // releases the pass's layout.
  virtual ExpertRows combine_backward(const Tensor& drows, const PassContext& context) = 0;
  virtual Tensor dispatch_backward(const Tensor& drows, const PassContext& context) = 0;
};

// Statistics of one training pass, for the measurements (bench moe, the conformance cases).
struct MoePassStats {
  std::uint64_t step = 0;
  int micro_batch = 0;
  std::int64_t tokens = 0;
  std::vector<std::int64_t> load;      // [E] rows each expert was chosen for (before capacity)
  std::vector<std::int64_t> admitted;  // [E] rows each expert took
  std::int64_t dropped = 0;            // routing.dropped
  std::int64_t unrouted = 0;           // tokens no expert took
  std::int64_t capacity = -1;
  double balancing_loss = 0, z_loss = 0;  // before the global_rows weighting
  std::vector<std::int64_t> token, expert;  // the decisions: assignment (token, expert) in order
};

// A deliberate bug, to show the checks catch it: "no_renormalise" (gates are the raw
// probabilities), "drop_residual" (a token no expert took comes out of the layer as its input
// instead of zero, so the residual no longer carries it alone). Empty: none.
struct MoeFaults {
  bool no_renormalise = false;
  bool drop_residual = false;
};
MoeFaults parse_moe_fault(const std::string& fault);  // "" -> none; UsageError for an unknown one

// Makes one expert FFN (h -> ffn -> h, GeLU, no dropout) named `name`, its linears "<name>.fc"
// and "<name>.proj" with the single device's values: a FeedForward on this rank by default,
// tensor parallelism's split over the tp ranks (parallel/tensor/).
using ExpertBuilder = std::function<std::unique_ptr<Layer>(const std::string& name, std::int64_t hidden, std::int64_t ffn,
                                                           DataType dtype, double init_std, double proj_std,
                                                           std::uint64_t seed)>;

class MixtureOfExperts : public Layer {
 public:
  // `exchange` null: every expert on this rank. Otherwise the experts of exchange->rank().
  // `expert` (and the shared expert) empty: FeedForward.
  MixtureOfExperts(std::string name, std::int64_t hidden, const MoeConfig& config, double dropout, DataType dtype,
                   double init_std, double proj_std, std::uint64_t seed, std::shared_ptr<ExpertExchange> exchange = {},
                   MoeFaults faults = {}, const ExpertBuilder& expert = {});
  const char* kind() const override { return "moe"; }

  int experts() const { return config_.experts; }
  int first_local_expert() const { return first_expert_; }
  std::vector<Layer*> local_experts() const { return experts_; }
  Layer* shared_expert() const { return shared_; }
  Linear& router() const { return *router_; }
  const ops::RoutingRule& rule() const { return rule_; }
  // Every parameter of the experts this rank holds (expert parallelism reduces their gradients
  // over the replicas of the expert only).
  std::vector<Parameter*> expert_parameters();
  // Auxiliary-loss-free balancing: the per-expert bias and the load summed over the data-
  // parallel world; the layer applies the update at the first training forward of a new step.
  const std::vector<double>& routing_bias() const { return bias_; }
  void set_load_reduction(std::function<void(std::vector<double>&)> sum_over_ranks) { sum_load_ = std::move(sum_over_ranks); }
  // The aux-free router's state between optimizer steps (what the training state saves): the
  // bias, and the load of the last step, whose update the next step's first forward applies.
  struct RoutingState {
    std::vector<double> bias, load;
    bool pending = false;    // a load waits for its update
    std::uint64_t step = 0;  // the step it was counted in
  };
  // `sum`: the load summed over the data-parallel world (collective over it where a reduction
  // is set); else as this rank counted it.
  RoutingState routing_state(bool sum) const;
  // Takes up a saved state; its load is taken as summed already. Throws Error for a state of
  // another expert count.
  void restore_routing_state(const RoutingState& state);
  // Statistics of the training passes since the last clear.
  const std::vector<MoePassStats>& statistics() const { return statistics_; }
  void clear_statistics() { statistics_.clear(); }

 protected:
  Tensor do_forward(const Tensor& x, const PassContext& context) override;
  Tensor do_backward(const Tensor& dy, const PassContext& context) override;

 private:
  struct Routed;  // a pass's routing, re-derived in backward from the saved probabilities
  Routed route(const Tensor& probabilities, const std::vector<double>& bias) const;
  void update_bias(const PassContext& context);
  Tensor run_blocks(const ExpertRows& local, std::int64_t C, DataType dtype, bool backward, const PassContext& context);
  Tensor run_experts(const Tensor& rows, const std::vector<std::int64_t>& per_expert, const PassContext& context);
  Tensor run_experts_backward(const Tensor& drows, const std::vector<std::int64_t>& per_expert,
                              const PassContext& context);
  MoeConfig config_;
  ops::RoutingRule rule_;
  MoeFaults faults_;
  DataType routing_type_;
  std::shared_ptr<ExpertExchange> exchange_;
  int first_expert_ = 0;
  Linear* router_;
  std::vector<Layer*> experts_;
  Layer* shared_ = nullptr;
  Layer* dropout_;
  std::vector<double> bias_;
  std::vector<double> step_load_;      // aux_free: this step's load, summed over its passes
  std::uint64_t load_step_ = 0;
  bool has_load_ = false;
  bool load_summed_ = false;  // restored: the pending load is the world's sum already
  std::function<void(std::vector<double>&)> sum_load_;
  std::vector<MoePassStats> statistics_;
};

}  // namespace parity::model
