// The mixture-of-experts feed-forward layer (see moe.hpp).
#include "reference/model/moe.hpp"

#include <algorithm>

#include "reference/core/error.hpp"
#include "reference/ops/checks.hpp"

namespace parity::model {
namespace {

// A tensor of `dtype` in `space` holding host values.
Tensor tensor_of(const std::string& name, const std::vector<double>& values, Shape shape, DataType dtype,
                 MemorySpace space) {
  Tensor wide = Tensor::empty(name, std::move(shape), DataType::float64, MemoryCategory::activations);
  std::copy(values.begin(), values.end(), wide.data<double>());
  Tensor typed = dtype == DataType::float64 ? wide : cast(wide, dtype, name, MemoryCategory::activations);
  return space == MemorySpace::host ? typed : typed.to(space, name, MemoryCategory::activations);
}

// The weight of a pass's own losses: its rows over the global batch's (1 when it is the batch),
// times the loss scale.
double pass_weight(const PassContext& context, std::int64_t rows) {
  const double share = context.global_rows > 0 ? static_cast<double>(rows) / static_cast<double>(context.global_rows) : 1.0;
  return share * context.loss_scale;
}

std::vector<std::int64_t> offsets_of(const std::vector<std::int64_t>& counts) {
  std::vector<std::int64_t> offsets(counts.size() + 1, 0);
  for (std::size_t i = 0; i < counts.size(); ++i) offsets[i + 1] = offsets[i] + counts[i];
  return offsets;
}

}  // namespace

MoeFaults parse_moe_fault(const std::string& fault) {
  MoeFaults f;
  if (fault.empty()) return f;
  if (fault == "no_renormalise") f.no_renormalise = true;
  else if (fault == "drop_residual") f.drop_residual = true;
  else throw UsageError("unknown MoE fault '" + fault + "' (known: no_renormalise, drop_residual)");
  return f;
}

struct MixtureOfExperts::Routed {
  std::vector<double> probabilities;  // [N E]
  ops::Routing routing;
};

MixtureOfExperts::MixtureOfExperts(std::string name, std::int64_t hidden, const MoeConfig& config, double dropout,
                                   DataType dtype, double init_std, double proj_std, std::uint64_t seed,
                                   std::shared_ptr<ExpertExchange> exchange, MoeFaults faults,
                                   const ExpertBuilder& expert)
    : Layer(std::move(name)),
      config_(config),
      faults_(faults),
      routing_type_(dtype == DataType::float64 ? DataType::float64 : DataType::float32),
      exchange_(std::move(exchange)) {
  rule_.kind = ops::parse_router(config.router);
  rule_.k = config.top_k;
  rule_.capacity_factor = config.capacity_factor;
  const int ranks = exchange_ ? exchange_->ranks() : 1;
  if (config.experts % ranks != 0)
    throw UsageError(this->name() + ": " + std::to_string(config.experts) + " experts do not divide over " +
                     std::to_string(ranks) + " expert-parallel ranks");
  const int local = config.experts / ranks;
  first_expert_ = exchange_ ? exchange_->rank() * local : 0;
  const std::int64_t ffn = config.expert_hidden > 0 ? config.expert_hidden : 4 * hidden;
  router_ = &add_child(std::make_unique<Linear>(this->name() + ".router", hidden, config.experts, false, dtype,
                                                init_std, seed));
  const auto make = [&](const std::string& name) -> std::unique_ptr<Layer> {
    if (expert) return expert(name, hidden, ffn, dtype, init_std, proj_std, seed);
    return std::make_unique<FeedForward>(name, hidden, ffn, 0.0, dtype, init_std, proj_std, seed);
  };
  for (int e = first_expert_; e < first_expert_ + local; ++e)
    experts_.push_back(&add_child(make(this->name() + ".experts." + std::to_string(e))));
  if (config.shared_expert) shared_ = &add_child(make(this->name() + ".shared"));
  dropout_ = &add_child(std::make_unique<Dropout>(this->name() + ".dropout", dropout, seed));
  bias_.assign(static_cast<std::size_t>(config.experts), 0.0);
}

std::vector<Parameter*> MixtureOfExperts::expert_parameters() {
  std::vector<Parameter*> out;
  for (Layer* e : experts_) {
    auto more = e->parameters();
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

MixtureOfExperts::Routed MixtureOfExperts::route(const Tensor& probabilities, const std::vector<double>& bias) const {
  Routed r;
  r.probabilities = probabilities.to_vector();
  r.routing = ops::route(r.probabilities, probabilities.dim(0), config_.experts, rule_,
                         rule_.kind == ops::RouterKind::aux_free ? bias : std::vector<double>{});
  return r;
}

// Auxiliary-loss-free balancing: the first training forward of a new step moves the bias by
// the previous step's load, summed over the data-parallel ranks (every rank runs that forward,
// so the reduction is collective as it must be).
void MixtureOfExperts::update_bias(const PassContext& context) {
  if (rule_.kind != ops::RouterKind::aux_free || !context.training) return;
  if (has_load_ && context.step != load_step_) {
    if (sum_load_ && !load_summed_) sum_load_(step_load_);
    load_summed_ = false;
    ops::update_routing_bias(bias_, step_load_, config_.bias_update_rate);
    has_load_ = false;
  }
  if (!has_load_) step_load_.assign(bias_.size(), 0.0);
  has_load_ = true;
  load_step_ = context.step;
}

MixtureOfExperts::RoutingState MixtureOfExperts::routing_state(bool sum) const {
  RoutingState s;
  s.bias = bias_;
  s.pending = has_load_;
  s.step = load_step_;
  s.load = has_load_ ? step_load_ : std::vector<double>(bias_.size(), 0.0);
  if (sum && has_load_ && sum_load_ && !load_summed_) sum_load_(s.load);
  return s;
}

void MixtureOfExperts::restore_routing_state(const RoutingState& s) {
  require(s.bias.size() == bias_.size() && s.load.size() == bias_.size(),
          name() + ": a routing state of " + std::to_string(s.bias.size()) + " experts, the layer has " +
              std::to_string(bias_.size()));
  bias_ = s.bias;
  step_load_ = s.load;
  has_load_ = s.pending;
  load_step_ = s.step;
  load_summed_ = true;
}

// Runs the forward (or, reversed, the backward) of every local expert on its block of `local`
// (expert-major), into a tensor of the same layout; an expert without rows runs on
// one row of zeros and its output is dropped.
Tensor MixtureOfExperts::run_blocks(const ExpertRows& local, std::int64_t C, DataType dtype, bool backward,
                                    const PassContext& context) {
  const std::vector<std::int64_t> offsets = offsets_of(local.per_expert);
  Tensor out;
  if (local.rows.defined())
    out = backward ? activation_gradient("expert_drows", local.rows.shape(), dtype)
                   : activation("expert_rows", local.rows.shape(), dtype);
  for (std::size_t j = 0; j < experts_.size(); ++j) {
    const std::size_t i = backward ? experts_.size() - 1 - j : j;  // backward: the reverse order
    const std::int64_t r = local.per_expert[i];
    const Tensor in = r > 0 ? local.rows.segment(name() + ".expert_block", offsets[i] * C, {r, C})
                            : Tensor::zeros(name() + ".idle_row", {1, C}, dtype, MemoryCategory::activations, space());
    const Tensor result = backward ? experts_[i]->backward(in, context) : experts_[i]->forward(in, context);
    if (r > 0) {
      Tensor destination = out.segment(out.name(), offsets[i] * C, {r, C});
      copy_into(destination, result);
    }
  }
  return out;
}

Tensor MixtureOfExperts::run_experts(const Tensor& rows, const std::vector<std::int64_t>& per_expert,
                                     const PassContext& context) {
  const ExpertRows local = exchange_ ? exchange_->dispatch(rows, per_expert, context) : ExpertRows{rows, per_expert};
  const Tensor out = run_blocks(local, rows.dim(-1), rows.dtype(), false, context);
  return exchange_ ? exchange_->combine(out, context) : out;
}

Tensor MixtureOfExperts::run_experts_backward(const Tensor& drows, const std::vector<std::int64_t>& per_expert,
                                              const PassContext& context) {
  const ExpertRows local = exchange_ ? exchange_->combine_backward(drows, context) : ExpertRows{drows, per_expert};
  const Tensor din = run_blocks(local, drows.dim(-1), drows.dtype(), true, context);
  return exchange_ ? exchange_->dispatch_backward(din, context) : din;
}

Tensor MixtureOfExperts::do_forward(const Tensor& x, const PassContext& context) {
  update_bias(context);
  const std::int64_t C = x.dim(-1), N = ops::rows_of(x), E = config_.experts;
  const Tensor flat = x.reshape({N, C});
  const Tensor logits = router_->forward(flat, context);
  const Tensor routing_logits =
      logits.dtype() == routing_type_ ? logits : cast(logits, routing_type_, name() + ".logits", MemoryCategory::activations);
  Tensor probabilities = activation("probabilities", {N, E}, routing_type_);
  ops::softmax_forward(routing_logits, probabilities);
  const Routed routed = route(probabilities, bias_);
  const ops::Routing& routing = routed.routing;

  // The balancing losses, weighted by this pass's share of the global batch's rows.
  const double weight = pass_weight(context, x.dim(0));
  const double balancing = rule_.kind == ops::RouterKind::top_k
                               ? ops::balancing_loss(routed.probabilities, routing, config_.balance_coefficient, 1.0, nullptr)
                               : 0.0;
  // The z-loss reads the logits on the host: copied only when it counts.
  const double z = config_.z_loss_coefficient > 0
                       ? ops::router_z_loss(routing_logits.to_vector(), N, E, config_.z_loss_coefficient, 1.0, nullptr)
                       : 0.0;
  add_auxiliary_loss(context, (balancing + z) * weight);
  if (context.training && !context.recompute) {
    MoePassStats s;
    s.step = context.step;
    s.micro_batch = context.micro_batch;
    s.tokens = N;
    s.load = routing.load;
    s.admitted = routing.per_expert;
    s.dropped = routing.dropped;
    s.unrouted = routing.unrouted_tokens();
    s.capacity = routing.capacity;
    s.balancing_loss = balancing;
    s.z_loss = z;
    s.token = routing.token;
    s.expert.assign(routing.expert.begin(), routing.expert.end());
    statistics_.push_back(std::move(s));
    if (has_load_)
      for (std::size_t e = 0; e < step_load_.size(); ++e) step_load_[e] += static_cast<double>(routing.load[e]);
  }

  const ops::RowMap map = ops::row_map(routing, space());
  const std::int64_t A = routing.assignments();
  const Tensor gates = tensor_of(name() + ".gates", ops::routing_gates(routed.probabilities, routing, !faults_.no_renormalise),
                                 {A}, x.dtype(), space());
  Tensor rows = activation("rows", {A, C}, x.dtype());
  ops::gather_rows_forward(flat, map, rows);
  const Tensor expert_out = run_experts(rows, routing.per_expert, context);
  Tensor y = activation("combined", {N, C}, x.dtype());
  ops::combine_rows_forward(expert_out, gates, map, y);
  if (faults_.drop_residual) {
    const std::vector<std::uint8_t> routed_token = routing.routed_tokens();
    for (std::int64_t n = 0; n < N; ++n)
      if (!routed_token[static_cast<std::size_t>(n)])
        for (std::int64_t c = 0; c < C; ++c) y.set(n * C + c, flat.at(n * C + c));
  }
  if (shared_) ops::accumulate(y, shared_->forward(flat, context));
  save(context, {probabilities, routing_logits, tensor_of("bias", bias_, {E}, DataType::float64, MemorySpace::host),
                 gates, expert_out, map.row_token, map.token_offsets, map.token_rows});
  return dropout_->forward(y.reshape(x.shape()), context);
}

Tensor MixtureOfExperts::do_backward(const Tensor& dy_in, const PassContext& context) {
  const std::vector<Tensor> saved = take_saved(context);
  const Tensor& probabilities = saved[0];
  const Tensor& routing_logits = saved[1];
  const Tensor& gates = saved[3];
  const Tensor& expert_out = saved[4];
  const ops::RowMap map{saved[5], saved[6], saved[7]};
  const std::int64_t C = dy_in.dim(-1), N = ops::rows_of(dy_in), E = config_.experts;
  const Tensor dy = dropout_->backward(dy_in, context).reshape({N, C});
  const Routed routed = route(probabilities, saved[2].to_vector());
  const ops::Routing& routing = routed.routing;

  // Experts: the gradient of the combine, through the experts, back to the tokens' rows.
  Tensor dexpert_out = Tensor::zeros_like(expert_out, name() + ".dexpert_out", MemoryCategory::workspace);
  Tensor dgates = Tensor::zeros_like(gates, name() + ".dgates", MemoryCategory::workspace);
  ops::combine_rows_backward(dy, expert_out, gates, map, dexpert_out, dgates);
  const Tensor drows = run_experts_backward(dexpert_out, routing.per_expert, context);
  Tensor dx = activation_gradient("dx", {N, C}, dy.dtype());
  ops::gather_rows_backward(drows, map, dx);
  if (faults_.drop_residual) {
    const std::vector<std::uint8_t> routed_token = routing.routed_tokens();
    for (std::int64_t n = 0; n < N; ++n)
      if (!routed_token[static_cast<std::size_t>(n)])
        for (std::int64_t c = 0; c < C; ++c) dx.set(n * C + c, dx.at(n * C + c) + dy.at(n * C + c));
  }
  if (shared_) ops::accumulate(dx, shared_->backward(dy, context));

  // Router: the gates' gradient through the renormalisation, the balancing losses', the softmax.
  const double weight = pass_weight(context, dy_in.dim(0));
  std::vector<double> dprobabilities(static_cast<std::size_t>(N * E), 0.0);
  ops::routing_gates_backward(dgates.to_vector(), routed.probabilities, routing, dprobabilities, !faults_.no_renormalise);
  if (rule_.kind == ops::RouterKind::top_k)
    ops::balancing_loss(routed.probabilities, routing, config_.balance_coefficient, weight, &dprobabilities);
  const Tensor dprob = tensor_of(name() + ".dprobabilities", dprobabilities, {N, E}, routing_type_, space());
  Tensor dlogits = Tensor::zeros_like(probabilities, name() + ".dlogits", MemoryCategory::workspace);
  ops::softmax_backward(dprob, probabilities, dlogits);
  if (config_.z_loss_coefficient > 0) {
    std::vector<double> dz(static_cast<std::size_t>(N * E), 0.0);
    ops::router_z_loss(routing_logits.to_vector(), N, E, config_.z_loss_coefficient, weight, &dz);
    ops::accumulate(dlogits, tensor_of(name() + ".dz", dz, {N, E}, routing_type_, space()));
  }
  const Tensor dlogits_model =
      dlogits.dtype() == dy.dtype() ? dlogits : cast(dlogits, dy.dtype(), dlogits.name(), MemoryCategory::workspace);
  ops::accumulate(dx, router_->backward(dlogits_model, context));
  return dx.reshape(dy_in.shape());
}

}  // namespace parity::model
